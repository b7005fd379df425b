"""The weight sync's end-to-end probe (``sync_probe``) on a vision-language model: a damaged vision tower moves the
probe only when the probe carries a picture.

The engines and the policy are stand-ins that score with real transformers models of the tiny Idefics3 (the logic
around the Ray handles is what is tested here: the picture's expansion taken from the engines, the trainer scoring
that expansion with the same picture, ``sent_weights`` waiting for it on the first sync). The real stack runs the
same probe in every vision-language run: ``tests/loop/test_vision_run.py`` checks its figures.
"""

from __future__ import annotations

import asyncio
import copy

import numpy as np
import pytest
import torch

from reasonrl.distributed.sync_checks import WeightSyncError
from reasonrl.distributed.sync_probe import EndToEndProbe, ProbeInput
from reasonrl.models.host_copy import sequence_logprobs


@pytest.fixture(scope="module")
def vlm():
    """The tiny Idefics3 (fp32), its pixel inputs, a picture, and a probe prompt with one placeholder."""
    from reasonrl.models.tiny_vlm import tiny_vlm_path
    from reasonrl.models.vision import VisionInputs, auto_model_class, image_placeholder, load_processor

    path = tiny_vlm_path()
    model = auto_model_class(path).from_pretrained(path, dtype=torch.float32).eval()
    processor = load_processor(path)
    picture = np.random.default_rng(0).integers(0, 256, (56, 56, 3), dtype=np.uint8)
    text = f"{image_placeholder(processor)}how many dots are there"
    ids = processor.tokenizer(text, add_special_tokens=False).input_ids
    # what vLLM does with a placeholder: the processor's own expansion into the image's tokens
    expanded = [int(t) for t in processor(text=[text], images=[[picture]], add_special_tokens=False)["input_ids"][0]]
    return model, VisionInputs(path), picture, list(ids), expanded


def _score(model, vision, ids, images):
    pixel_inputs = vision([list(images)], torch.tensor([ids])) if images else None
    return sequence_logprobs(model, ids, pixel_inputs)


class _value:  # noqa: N801 - an awaitable that is ready (a Ray ref's result): never left un-awaited
    def __init__(self, value):
        self.value = value

    def __await__(self):
        return self.value
        yield  # a generator: what __await__ must return


class _Call:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return _value(self.fn(*args))


class FakeEngine:
    """An engine's probe call (``VLLMEngine.score_probe``): it expands the placeholder as vLLM does and scores the
    expanded sequence with its own weights."""

    def __init__(self, vlm, model):
        _, vision, _, ids, expanded = vlm
        self.model = model

        def score(token_ids, images):
            seq = expanded if images else list(token_ids)
            assert not images or list(token_ids) == ids, "the engine gets the prompt with its placeholder"
            return seq, _score(self.model, vision, seq, images)

        self.score_probe = _Call(score)


class FakePolicy:
    """Policy rank 0's ``sent_probe_logprobs`` and the ranks' ``probe_logprobs``: the trainer's weights; records
    which sequence it was asked to score."""

    def __init__(self, vlm):
        model, vision, *_ = vlm
        self.asked: list[list[int]] = []

        def score(ids, images):
            self.asked.append(list(ids))
            return _score(model, vision, list(ids), images)

        self.actors = [type("Rank0", (), {"sent_probe_logprobs": _Call(score)})()]
        self.score = score

    def call_async(self, method, *args):
        assert method == "probe_logprobs"
        return [_value(self.score(*args))]


def _damaged_tower(model):
    """A copy whose vision tower's first matrix (the tiny Idefics3's position embedding) is off by noise of its own
    size (a bucket loaded in part, or a stale tower): the probe with the picture moves by 0.048 nats (fp32
    tolerance 1e-4), the text probe by exactly 0."""
    from reasonrl.models.vision import vision_tower_prefixes

    damaged = copy.deepcopy(model)
    prefix = vision_tower_prefixes(damaged)[0]
    name, param = next((n, p) for n, p in damaged.named_parameters() if n.startswith(prefix) and p.dim() == 2)
    with torch.no_grad():
        param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(1)) * param.std())
    return damaged, name


def _sync(probe_state: EndToEndProbe, probe: ProbeInput):
    """One sync's probe part as ``WeightSyncer`` runs it: load (rank 0 keeps what it sent), then verify."""
    probe_state.loading()
    if probe_state.keeps_sent(probe):
        probe_state.sent(probe)
    return asyncio.run(probe_state.verify(probe))


@pytest.mark.parametrize("verify_with", ["sent_weights", "trainer_forward"])
def test_a_damaged_vision_tower_moves_the_probe_only_with_its_picture(vlm, verify_with):
    """Sync 1 calibrates (engine and trainer hold the same weights); at sync 2 the engine's vision tower is damaged
    and nothing else changed. The text probe cannot see it (its log-probs are bit-identical: no text token reaches
    the tower); the probe with its picture fails the sync."""
    model, _, picture, ids, expanded = vlm
    damaged, name = _damaged_tower(model)
    for images, caught in (([], False), ([picture], True)):
        engine, policy = FakeEngine(vlm, model), FakePolicy(vlm)
        state = EndToEndProbe(policy, [engine], tol=1e-4, exact=True, verify_with=verify_with)
        probe = ProbeInput(ids, images)
        first = _sync(state, probe)
        assert (first.tokens, first.images) == ((len(expanded), 1) if images else (len(ids), 0))
        assert first.max_abs_diff < 1e-4  # the same weights: float32 noise only
        engine.model = damaged
        if not caught:
            assert _sync(state, probe).max_abs_diff == 0.0, f"{name} damaged: the text probe does not move at all"
        else:
            with pytest.raises(WeightSyncError):
                _sync(state, probe)
    # the trainer always scored what the engines scored: the picture's expansion, never the bare placeholder
    assert policy.asked and all(asked == expanded for asked in policy.asked)


def test_sent_weights_scores_the_expansion_once_the_engines_have_made_it(vlm):
    """``sent_weights``: the first sync's rank-0 score waits for the engines' expansion (verify); from the second
    sync on it starts as soon as the load has sent (the expansion is known), before any engine scores."""
    model, _, picture, ids, expanded = vlm
    policy = FakePolicy(vlm)
    state = EndToEndProbe(policy, [FakeEngine(vlm, model)], tol=1e-4, exact=True, verify_with="sent_weights")
    probe = ProbeInput(ids, [picture])
    state.loading()
    state.sent(probe)
    assert state.pending is None and policy.asked == []  # not known yet: nothing scored the bare placeholder
    asyncio.run(state.verify(probe))
    state.loading()
    state.sent(probe)
    assert state.pending is not None and state.pending[0] == expanded and policy.asked == [expanded, expanded]
    asyncio.run(state.verify(probe))
    with pytest.raises(RuntimeError, match="needs load"):  # a verify with no load before it
        asyncio.run(state.verify(probe))


def test_engines_that_expand_the_picture_differently_are_refused(vlm):
    model, _, picture, ids, expanded = vlm
    other = FakeEngine(vlm, model)
    other.score_probe = _Call(lambda token_ids, images: (expanded[:-1], [0.0] * (len(expanded) - 2)))
    state = EndToEndProbe(
        FakePolicy(vlm), [FakeEngine(vlm, model), other], tol=1e-4, exact=True, verify_with="trainer_forward"
    )
    with pytest.raises(RuntimeError, match="expanded the sync probe's prompt differently"):
        asyncio.run(state.verify(ProbeInput(ids, [picture])))


def test_a_probe_needs_two_tokens():
    with pytest.raises(ValueError, match="at least 2 tokens"):
        ProbeInput([5])
    assert ProbeInput.of(None) is None and ProbeInput.of([1, 2]).pictures is None

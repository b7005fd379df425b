"""Ulysses sequence parallelism (reasonrl.models.ulysses_attention, reasonrl.models.sequence_parallel).

The equality tests run ``sp_probe.py`` as two processes of one gloo group (CPU, fp32, the tiny Qwen2 model: 4 query
heads, 2 key/value heads, so each rank attends with 2 and 1). Tolerance 1e-5 everywhere: SP = 2 computes the same
float32 operations as SP = 1, only grouped differently (matmuls over L = S / 2 rows instead of S, the attention of
2 heads at a time, gradients summed over two ranks instead of accumulated in one), so results differ by float32
rounding of reductions: ~1e-7 relative; measured max abs diffs are <= 5e-7 for log-probs (values ~ -10) and
gradients (entries up to ~0.5). Dropping the mask as DeepSpeed's Ulysses does gives diffs of 0.1 to 4 here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reasonrl.models.batching import pack_batch, pad_batch

PROBE = Path(__file__).with_name("sp_probe.py")
CASES = ("padded-sdpa", "packed-sdpa", "padded-eager", "packed-eager", "padded-sdpa-checkpointed", "single-sdpa")
# float32 reduction order differs between the split and the whole sequence (module docstring)
TOL = 1e-5


@pytest.fixture(scope="module")
def sp_results(tmp_path_factory):
    """Both ranks of the probe, run once for the module: {case: {metric: max abs diff}}."""
    tmp = tmp_path_factory.mktemp("sp")
    out, store = tmp / "results.json", tmp / "store"
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROBE), str(rank), "2", str(store), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", CASES)
def test_sp2_logprobs_entropy_values_equal_sp1(sp_results, case):
    got = sp_results[case]
    assert got["logprobs"] <= TOL and got["entropy"] <= TOL and got["values"] <= TOL, got
    assert got["masked_zero"], "positions outside action_mask must be 0"


@pytest.mark.parametrize("case", CASES)
def test_sp2_summed_gradients_equal_sp1(sp_results, case):
    """GRPO-like loss with a holed loss mask (policy) and a value loss (critic): every parameter's gradient."""
    got = sp_results[case]
    assert got["max_policy_grad"] > 1e-2, "the loss must produce real gradients for the comparison to mean anything"
    assert got["policy_grads"] <= TOL and got["critic_grads"] <= TOL, got


def test_only_rows_that_are_one_unpadded_sequence_take_the_causal_path_without_a_mask():
    """``causal_only``: every row's tokens a prefix of one segment (the right pad to a multiple of N allowed, causal
    queries never look right); left padding or packed sequences take the span path (``spans``), a hole the mask."""
    from reasonrl.models.ulysses_attention import UlyssesContext

    def ctx(keep, segment):
        return UlyssesContext(group=None, keep=torch.tensor(keep), segment=torch.tensor(segment))

    assert ctx([[1, 1, 1, 0]], [[0, 0, 0, 0]]).causal_only()  # one sequence, right pad
    assert ctx([[1, 1, 1, 1], [1, 1, 0, 0]], [[0, 0, 0, 0], [0, 0, 0, 0]]).causal_only()
    assert not ctx([[0, 1, 1, 1]], [[0, 0, 0, 0]]).causal_only()  # left padding
    assert not ctx([[1, 1, 1, 1]], [[0, 0, 1, 1]]).causal_only()  # two packed sequences
    assert not ctx([[1, 0, 1, 1]], [[0, 0, 0, 0]]).causal_only()  # a hole


def test_spans_are_each_sequences_contiguous_kept_tokens_or_none():
    """``spans``: per row, one (start, end) per sequence (left or right padding, packing); None when a sequence's
    kept tokens are not contiguous, where only the dense mask is exact."""
    from reasonrl.models.ulysses_attention import UlyssesContext

    def spans(keep, segment):
        return UlyssesContext(group=None, keep=torch.tensor(keep), segment=torch.tensor(segment)).spans()

    assert spans([[1, 1, 1, 0]], [[0, 0, 0, -1]]) == [[(0, 3)]]  # right pad
    assert spans([[0, 1, 1, 1], [1, 1, 0, 0]], [[0, 0, 0, 0], [0, 0, 0, 0]]) == [[(1, 4)], [(0, 2)]]  # left/right
    assert spans([[1, 1, 1, 1, 1, 0]], [[0, 0, 1, 1, 1, -1]]) == [[(0, 2), (2, 5)]]  # two packed sequences
    assert spans([[1, 0, 1, 1]], [[0, 0, 0, 0]]) is None  # a hole in one sequence
    assert spans([[1, 1, 1, 1]], [[0, 1, 1, 0]]) is None  # a sequence in two pieces


class _Attention(torch.nn.Module):
    """What the cores read from an attention module: grouped key/value heads, causal, not training."""

    num_key_value_groups = 2
    is_causal = True


@pytest.mark.parametrize("core", ["sdpa", "eager"])
def test_attention_within_spans_equals_the_dense_mask(core, one_thread):
    """The span path (causal per sequence, no mask tensor) against the dense whole-row mask on left-padded and
    packed rows, grouped key/value heads: equal on every kept position within 1e-6 (the same float32 softmax and
    matmuls over the same keys, in kernels of other shapes: rounding only); padding's outputs are 0."""
    from reasonrl.models.ulysses_attention import UlyssesContext, _core, attend_spans

    keep = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 0]], dtype=torch.bool)
    segment = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 2, 2, -1]])
    ctx = UlyssesContext(group=None, keep=keep, segment=segment)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, heads, 8, 16, generator=g) for heads in (4, 2, 2))  # [batch, h, S, d]
    module = _Attention().eval()
    got = attend_spans(core, module, q, k, v, None, ctx.spans())  # [batch, S, h, d]
    want, _ = _core(core, module, q, k, v, ctx.mask(core, q.dtype), 0.0, None)
    assert torch.allclose(got[keep], want[keep], atol=1e-6, rtol=0)
    assert (got[~keep] == 0).all()


@pytest.fixture(scope="module")
def tiny_pair():
    from transformers import AutoModelForCausalLM

    from reasonrl.models import tiny_model_path

    path = tiny_model_path()
    return [AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32) for _ in range(2)]


@pytest.mark.parametrize("core", ["sdpa", "eager"])
def test_ulysses_model_without_context_computes_as_before(tiny_pair, core, one_thread):
    """A model switched to Ulysses attention and run without a context (SP = 1, generation) is unchanged, and the
    switch touches only that model."""
    from reasonrl.models.ulysses_attention import ULYSSES_BY_CORE, use_ulysses_attention

    ref, model = tiny_pair
    ref.set_attn_implementation(core)
    model.set_attn_implementation(core)
    batch = pad_batch([([5, 6, 7], [8, 9, 10, 11]), ([5, 6, 7, 12, 13], [8, 9])], pad_token_id=0)
    assert use_ulysses_attention(model, core) == core
    assert model.config._attn_implementation == ULYSSES_BY_CORE[core] and ref.config._attn_implementation == core
    with torch.no_grad():
        want, got = ref(**batch.model_inputs()).logits, model(**batch.model_inputs()).logits
    real = batch.attention_mask.bool()
    assert torch.allclose(got[real], want[real], atol=1e-6, rtol=0)


def test_shard_layout_pads_to_multiple_and_marks_scored_positions():
    from reasonrl.models.sequence_parallel import shard_layout

    samples = [([5, 6, 7], [8, 9, 10, 11]), ([5, 6, 7, 12, 13], [8, 9])]
    padded = pad_batch(samples, pad_token_id=0)  # width 5 + 4 = 9
    layout = shard_layout(padded, size=4, rank=1)
    assert layout.input_ids.shape == (2, 12) and layout.local_len == 3 and layout.width == 9
    assert not layout.keep[:, 9:].any() and (layout.segment[:, 9:] == -1).all()
    # the scored positions are those whose label is a response token, in the same order as the response grid
    assert torch.equal(layout.labels[layout.scored], padded.response_ids()[padded.action_mask])
    assert torch.equal(layout.local(layout.input_ids), layout.input_ids[:, 3:6])

    packed = pack_batch(samples)  # one row of 7 + 7 = 14
    layout = shard_layout(packed, size=4, rank=0)
    assert layout.input_ids.shape == (1, 16)
    assert layout.segment[0, :14].tolist() == [0] * 7 + [1] * 7
    assert torch.equal(layout.labels[layout.scored], packed.response_ids())


def test_vision_batch_and_bad_head_counts_are_refused():
    from transformers import AutoConfig

    from reasonrl.models import tiny_model_path
    from reasonrl.models.sequence_parallel import shard_layout
    from reasonrl.models.ulysses_attention import check_heads

    batch = pad_batch([([5, 6, 7], [8, 9])], pad_token_id=0)
    batch.vision = {"pixel_values": torch.zeros(1, 3)}
    with pytest.raises(ValueError, match="vision-language"):
        shard_layout(batch, size=2, rank=0)
    config = AutoConfig.from_pretrained(tiny_model_path())  # 4 query heads, 2 key/value heads
    check_heads(config, 2)
    with pytest.raises(ValueError, match=r"sequence_parallel_size=4 must divide the model's num_key_value_heads=2"):
        check_heads(config, 4)
    with pytest.raises(ValueError, match="num_attention_heads=4"):
        check_heads(config, 3)

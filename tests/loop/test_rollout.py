"""Streamed scoring in ``Generator.generate_and_score``: with ``stream_rollout=false`` engine e's completions
are scored as soon as engine e returns; with ``stream_rollout=true`` each completion as soon as it finishes. Either
way the assembled completions/results equal generating everything first and scoring it afterwards.

The engines are fakes (``generate.remote`` returns an asyncio task, ``generate_stream`` yields one completion at a
time): this is a unit test of the logic around the engines; tests/loop/test_trainer.py,
test_trainer_split_placement.py and test_trainer_features.py run the same code on real Ray + vLLM engines.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from reasonrl.dataplane.completion import Completion
from reasonrl.loop.evaluation import EvalSettings, eval_set
from reasonrl.loop.generation import GenerationSettings, Generator
from reasonrl.loop.rollout import RolloutCollector, RolloutSettings, StepAbandoned
from reasonrl.rewards import RewardResult

ROWS = [{"prompt": f"q{i}", "answer": str(i)} for i in range(7)]
WAIT_LIMIT_S = 5.0  # a blocked fake engine gives up after this (only reached when scoring is NOT streamed)


class FakeEngine:
    """``generate.remote(prompt_ids, sampling)`` -> an asyncio task: n completions per prompt, returned after
    ``delay_s`` and, when ``wait_for`` is given, after that threading.Event is set (or WAIT_LIMIT_S passed)."""

    def __init__(self, name: str, delay_s: float = 0.0, wait_for: threading.Event | None = None):
        self.name, self.delay_s, self.wait_for = name, delay_s, wait_for
        self.finished = threading.Event()
        self.generate = SimpleNamespace(remote=self._remote)
        # generate_stream.options(num_returns="streaming").remote(...) -> async iterator of awaitable parts
        self.generate_stream = SimpleNamespace(options=lambda num_returns: SimpleNamespace(remote=self._stream))

    def _remote(self, prompt_ids, sampling):
        return asyncio.get_running_loop().create_task(self._generate(prompt_ids, sampling))

    async def _generate(self, prompt_ids, sampling) -> list[Completion]:
        await asyncio.sleep(self.delay_s)
        if self.wait_for is not None:
            await asyncio.to_thread(self.wait_for.wait, WAIT_LIMIT_S)
        out = self._completions(prompt_ids, sampling)
        self.finished.set()
        return out

    async def _stream(self, prompt_ids, sampling):
        """One completion per part, the LAST sample first (finish order differs from prompt order)."""
        await asyncio.sleep(self.delay_s)
        for c in reversed(self._completions(prompt_ids, sampling)):
            if c is not None and self.wait_for is not None and c.prompt_index == 0 and c.sample_index == 0:
                await asyncio.to_thread(self.wait_for.wait, WAIT_LIMIT_S)  # the engine's first sample comes last
            yield asyncio.sleep(0.01, result=[c])
        self.finished.set()

    def _completions(self, prompt_ids, sampling) -> list[Completion]:
        return [
            Completion(
                prompt_index=p,
                sample_index=k,
                prompt_token_ids=list(ids),
                token_ids=[len(ids), k],
                text=f"{self.name}:{ids[0]}:{k}",
                finish_reason="stop",
            )
            for p, ids in enumerate(prompt_ids)
            for k in range(sampling.n)
        ]


class RecordingScorer:
    """Reward = prompt id * 10 + sample index; records each call's texts and which engines had finished then."""

    def __init__(self, engines: list[FakeEngine]):
        self.engines = engines
        self.calls: list[dict] = []
        self.scored_any = threading.Event()

    def __call__(self, completions, rows) -> list[RewardResult]:
        finished = [e.finished.is_set() for e in self.engines]
        self.calls.append({"texts": [c.text for c in completions], "engines_finished": finished})
        time.sleep(0.05)  # some scoring work
        self.scored_any.set()
        return [
            RewardResult(reward=float(row["answer"]) * 10 + c.sample_index, correct=True, reason="correct")
            for c, row in zip(completions, rows, strict=True)
        ]


def fake_generator(engines: list[FakeEngine], scorer: RecordingScorer, stream: bool = False) -> Generator:
    """The trainer's generator on fake engines: prompt "q<i>" is encoded as [i, 99]."""
    return Generator(
        engines,
        tokenizer=lambda text, add_special_tokens: SimpleNamespace(input_ids=[int(text[1:]), 99]),
        template=SimpleNamespace(render=lambda row: row["prompt"]),
        scorer=scorer,
        settings=GenerationSettings(max_prompt_len=16, generate_max_len=8, stream_rollout=stream),
    )


async def generate_then_score(generator: Generator, rows, *, n: int, temperature: float, seed: int):
    """Every engine's completions first (prompt-major), then one scorer call on all of them, each result's final
    reward assembled as the generator assembles it (``rewards.shaping.final_reward``)."""
    from reasonrl.rewards.shaping import final_reward

    completions = []
    for engine_parts in generator.start_generation(rows, n=n, temperature=temperature, seed=seed):
        async for part in engine_parts:
            completions += part
    completions.sort(key=lambda c: (c.prompt_index, c.sample_index))
    results = generator.scorer(completions, [rows[c.prompt_index] for c in completions])
    for c, r in zip(completions, results, strict=True):
        final_reward(r, env_reward=c.env_reward)
    return completions, results


def _slow_first_engines() -> tuple[list[FakeEngine], RecordingScorer]:
    """Engine 1 only finishes once something was scored; engine 0 finishes at once, engine 2 after 0.1 s."""
    scored_any = threading.Event()
    engines = [FakeEngine("e0"), FakeEngine("e1", wait_for=scored_any), FakeEngine("e2", delay_s=0.1)]
    scorer = RecordingScorer(engines)
    scorer.scored_any = scored_any
    return engines, scorer


def test_each_engine_part_is_scored_while_later_engines_still_generate():
    engines, scorer = _slow_first_engines()
    generator = fake_generator(engines, scorer)
    start = time.perf_counter()
    scored = asyncio.run(generator.generate_and_score(ROWS, n=2, temperature=1.0, seed=0))
    assert time.perf_counter() - start < WAIT_LIMIT_S  # engine 1 was released by the first scoring call
    first = scorer.calls[0]
    assert all(t.startswith("e0:") for t in first["texts"])  # engine 0's part, alone
    assert first["engines_finished"] == [True, False, False]  # scored while engines 1 and 2 generated
    assert len(scorer.calls) == 3
    assert scored.reward_overlapped_s > 0.0
    assert scored.generate_s >= 0.05 and scored.reward_s >= 0.04  # the last part is scored after generation


def test_streamed_order_equals_generate_then_score():
    engines, scorer = _slow_first_engines()
    streamed = asyncio.run(fake_generator(engines, scorer).generate_and_score(ROWS, n=2, temperature=1.0, seed=0))

    engines, scorer = _slow_first_engines()
    scorer.scored_any.set()  # without streaming nothing is scored before every engine returned

    completions, results = asyncio.run(
        generate_then_score(fake_generator(engines, scorer), ROWS, n=2, temperature=1.0, seed=0)
    )
    assert streamed.completions == completions
    assert streamed.results == results
    # engine order and prompt offsets: rows 0-1 on engine 0, 2-4 on engine 1, 5-6 on engine 2; n=2 each
    assert [c.prompt_index for c in streamed.completions] == [p for p in range(7) for _ in range(2)]
    assert [c.text.split(":")[0] for c in streamed.completions] == ["e0"] * 4 + ["e1"] * 6 + ["e2"] * 4
    assert [r.reward for r in streamed.results] == [p * 10.0 + k for p in range(7) for k in range(2)]


def test_an_engine_without_prompts_is_not_scored():
    engines = [FakeEngine("e0"), FakeEngine("e1"), FakeEngine("e2")]
    scorer = RecordingScorer(engines)
    scored = asyncio.run(fake_generator(engines, scorer).generate_and_score(ROWS[:2], n=1, temperature=0.0, seed=0))
    assert [c.prompt_index for c in scored.completions] == [0, 1]
    assert not engines[1].finished.is_set()  # 2 rows over 3 engines: engine 1 got no prompts and no call
    assert engines[0].finished.is_set() and engines[2].finished.is_set()


def test_eval_set_groups_by_prompt_and_records_every_sample():
    """``eval_set`` (the trainer's in-loop eval and ``python -m reasonrl.eval``): the first eval_max_prompts rows,
    eval_n_samples each, correctness and vote keys grouped per prompt, one record per sample."""
    engines = [FakeEngine("e0"), FakeEngine("e1")]
    scorer = RecordingScorer(engines)
    settings = EvalSettings(n_samples=2, temperature=1.0, max_prompts=3, seed=3)
    scored = asyncio.run(eval_set(fake_generator(engines, scorer), settings, "toy", ROWS))
    assert [row["answer"] for row in scored.rows] == ["0", "1", "2"]
    correct, keys = scored.per_prompt()
    assert correct == [[True, True]] * 3
    assert keys == [[None, None]] * 3  # RecordingScorer extracts no answer: every vote key is None
    records = scored.records(split="eval/toy")
    assert len(records) == 6 and {r["split"] for r in records} == {"eval/toy"}
    assert [(r["prompt_index"], r["sample_index"]) for r in records] == [(p, k) for p in range(3) for k in range(2)]
    assert [r["reward"] for r in records] == [p * 10.0 + k for p in range(3) for k in range(2)]
    assert scored.records(limit=2)[1]["completion"] == scored.completions[1].text


def test_concurrent_rollouts_never_call_the_scorer_at_the_same_time():
    """Asynchronous rollouts score while other rollouts (and the eval) do: a user reward function need not be
    thread-safe, so the trainer's scorer calls are serialised across every concurrent generate_and_score."""
    engines = [FakeEngine("e0"), FakeEngine("e1", delay_s=0.02)]
    scorer = RecordingScorer(engines)
    inside, most = [0], [0]
    original = scorer.__call__

    def counting(completions, rows):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        try:
            return original(completions, rows)
        finally:
            inside[0] -= 1

    generator = fake_generator(engines, counting)

    async def three_at_once():
        calls = [generator.generate_and_score(ROWS, n=1, temperature=1.0, seed=s) for s in range(3)]
        return await asyncio.gather(*calls)

    results = asyncio.run(three_at_once())
    assert all(len(r.results) == len(ROWS) for r in results)
    assert most[0] == 1  # 6 scorer calls (3 rollouts x 2 engines), never two at once


def test_streamed_completions_are_scored_one_by_one_and_equal_the_batched_result():
    """stream_rollout: the first scorer call holds the first completions to finish (one per engine at most), made
    while every engine still generates (engine 1 holds its last sample back until something was scored); the
    assembled result equals the per-engine one."""
    engines, scorer = _slow_first_engines()
    streamed = asyncio.run(
        fake_generator(engines, scorer, stream=True).generate_and_score(ROWS, n=2, temperature=1.0, seed=0)
    )
    first = scorer.calls[0]
    assert len(first["texts"]) < 4  # engine 0's part holds 4: its completions came one by one
    assert not first["engines_finished"][1]  # engine 1 cannot finish before something was scored
    assert len(scorer.calls) > 3  # more calls than engines
    engines, scorer = _slow_first_engines()
    batched = asyncio.run(fake_generator(engines, scorer).generate_and_score(ROWS, n=2, temperature=1.0, seed=0))
    assert streamed.completions == batched.completions and streamed.results == batched.results


class EvenPromptsScorer:
    """Reward = sample index on prompts with an even id, 0 on odd ones (zero variance: dynamic sampling drops them)."""

    def __call__(self, completions, rows) -> list[RewardResult]:
        return [
            RewardResult(reward=float(c.sample_index if int(row["answer"]) % 2 == 0 else 0), correct=True, reason="x")
            for c, row in zip(completions, rows, strict=True)
        ]


def _collector(stop_requested=lambda: False) -> RolloutCollector:
    engines = [FakeEngine("e0"), FakeEngine("e1")]
    generator = Generator(
        engines,
        tokenizer=lambda text, add_special_tokens: SimpleNamespace(input_ids=[int(text[1:]), 99]),
        template=SimpleNamespace(render=lambda row: row["prompt"]),
        scorer=EvenPromptsScorer(),
        settings=GenerationSettings(max_prompt_len=16, generate_max_len=8),
    )
    settings = RolloutSettings(
        seed=0,
        rollout_batch_size=4,
        n_samples_per_prompt=2,
        temperature=1.0,
        dynamic_sampling=True,
        max_sampling_tries=3,
    )
    refills = iter([ROWS[4:8]])
    return RolloutCollector(generator, settings, next_rows=lambda: next(refills), stop_requested=stop_requested)


def test_collector_refills_zero_variance_groups_and_returns_its_metrics():
    """Dynamic sampling: the odd prompts of each try are dropped, the refill tops the step up to its target; the
    kept samples are handed on (``on_kept``) in the returned order."""
    released = []
    rollout, metrics = asyncio.run(_collector().collect(ROWS[:4], seed_step=0, on_kept=released.extend))
    assert [row["answer"] for row in rollout.rows] == ["0", "0", "2", "2", "4", "4", "6", "6"]
    assert rollout.group_ids == [0, 0, 2, 2, 4, 4, 6, 6]  # unique across tries: the refill's groups count from 4
    assert rollout.baselines is None and released == rollout.completions
    assert metrics["sampling/tries"] == 2.0 and metrics["sampling/samples"] == 8.0
    assert metrics["sampling/kept_groups_frac"] == pytest.approx(4 / 7)  # 4 + 3 prompts (ROWS has 7) tried
    assert metrics["reward/mean"] == 0.5
    assert len(rollout.head(3)) == 3 and rollout.head(3).completions == rollout.completions[:3]
    assert [r["prompt_index"] for r in rollout.records(limit=2, split="train")] == [0, 0]


def test_collector_abandons_the_step_before_a_refill_when_a_stop_was_asked():
    with pytest.raises(StepAbandoned, match="refills"):
        asyncio.run(_collector(stop_requested=lambda: True).collect(ROWS[:4], seed_step=0))

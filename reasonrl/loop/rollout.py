"""Rollout of one training step: generate with every vLLM engine, score (rule or user reward, plus the learned
reward model), DAPO dynamic sampling, the ReMax greedy baseline, and the step's rollout metrics.

Scoring is streamed (``generate_and_score``, :mod:`reasonrl.loop.rollout_stream`): with ``stream_rollout`` each
completion as soon as its engine finishes it, else each engine's part as soon as that engine returns (as ORZ
does), while the engines still generate; the assembled order is prompt-major either way. ``rollout(on_kept=...)``
hands the samples the step keeps to the forwards as soon as that is known.

``RolloutMixin`` is part of :class:`reasonrl.loop.trainer.PPOTrainer` (it uses the trainer's ``cfg``, ``roles``,
``tokenizer``, ``template``, ``scorer``, ``sampler``, ``reward_model_encoder`` and ``global_step``); it lives here so
each file keeps one job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence

import torch

from reasonrl import algos
from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.worker_group import gather_all
from reasonrl.loop.rollout_stream import KeptRelease, OnReady, score_as_they_arrive
from reasonrl.rewards.repetition import repetition_stats
from reasonrl.utils.rng import derive_seed


@dataclasses.dataclass
class Rollout:
    """The scored samples of one step, after dynamic sampling.

    ``results[i].reward`` is the FINAL reward of sample i (rule reward + reward-model score when there is one);
    ``baselines`` holds the reward of the greedy response to sample i's prompt (remax), else None.
    """

    completions: list
    results: list
    rows: list  # the data row of each sample
    group_ids: list[int]  # prompt-group id of each sample (unique across refills)
    baselines: list[float] | None = None
    policy_version: int | None = None  # training steps whose weights generated it (set by the trainer)

    def __len__(self) -> int:
        return len(self.completions)


@dataclasses.dataclass
class ScoredGeneration:
    """Completions in prompt-major order (prompt_index into the given rows), their final rewards, and wall times.

    ``generate_s``: from the launch until the LAST engine returned. ``reward_s``: scoring not hidden behind
    generation, i.e. from the last engine's return until every part (and the reward model) was scored.
    ``reward_overlapped_s``: scoring that ran while some engine was still generating.
    """

    completions: list[Completion]
    results: list
    generate_s: float
    reward_s: float
    reward_overlapped_s: float


@dataclasses.dataclass
class EvalSet:
    """The scored samples of one eval set: ``completions[i]`` answers ``rows[completions[i].prompt_index]``;
    ``keys[i]`` is the majority-vote key of sample i's extracted answer, None when the scorer extracts none."""

    rows: list[dict]
    completions: list[Completion]
    results: list
    keys: list[str | None] | None

    def per_prompt(self) -> tuple[list[list[bool]], list[list[str | None]] | None]:
        """``(correct, vote keys)`` grouped by prompt, in sample order: the input of ``eval_metrics``."""
        correct: list[list[bool]] = [[] for _ in self.rows]
        keys: list[list[str | None]] | None = None if self.keys is None else [[] for _ in self.rows]
        for i, (c, r) in enumerate(zip(self.completions, self.results, strict=True)):
            correct[c.prompt_index].append(bool(r.correct))
            if keys is not None:
                keys[c.prompt_index].append(self.keys[i])
        return correct, keys

    def records(self, limit: int | None = None, **fields) -> list[dict]:
        """JSON-ready rows of the first ``limit`` samples (:func:`sample_records`), each with ``fields`` added."""
        rows = [self.rows[c.prompt_index] for c in self.completions]
        return sample_records(self.completions, self.results, rows, limit=limit, keys=self.keys, **fields)


class RolloutMixin:
    def encode(self, rows: Sequence[dict]) -> list[list[int]]:
        """Prompt token ids (the template's text, tokenized without extra special tokens), cut to max_prompt_len."""
        ids = []
        for row in rows:
            tokens = self.tokenizer(self.template.render(row), add_special_tokens=False).input_ids
            ids.append(tokens[-self.cfg.max_prompt_len :])
        return ids

    def start_generation(
        self, rows: Sequence[dict], *, n: int, temperature: float, seed: int, logprobs: bool = False
    ) -> list[AsyncIterator[list[Completion]]]:
        """Launch ``n`` samples per row, prompts split evenly over the engines (contiguous parts); ``logprobs``:
        each completion carries the engine's log-prob of every sampled token (rollout-policy correction).

        Returns one async iterator per engine that got prompts, yielding lists of finished completions with
        ``prompt_index`` counted over ``rows``: each completion as its engine finishes it with ``stream_rollout``
        (``VLLMEngine.generate_stream``), else the engine's whole part at once (``VLLMEngine.generate``). Both
        give the same completions.
        """
        from reasonrl.distributed.vllm_engine import SamplingConfig

        cfg, engines = self.cfg, self.roles.engines
        prompt_ids = self.encode(rows)
        bounds = [round(i * len(rows) / len(engines)) for i in range(len(engines) + 1)]
        parts = []
        for e, engine in enumerate(engines):
            if bounds[e] == bounds[e + 1]:
                continue  # fewer prompts than engines
            sampling = SamplingConfig(
                n=n,
                temperature=temperature,
                top_p=cfg.top_p if temperature > 0 else 1.0,
                top_k=cfg.top_k if temperature > 0 else 0,
                max_tokens=cfg.generate_max_len,
                stop=list(cfg.stop) or None,
                include_stop_str_in_output=cfg.include_stop_str_in_output,
                seed=derive_seed(seed, e),
                logprobs=logprobs,
            )
            ids = prompt_ids[bounds[e] : bounds[e + 1]]
            if cfg.stream_rollout:  # launched now, on every engine at once; read as it comes
                launched = engine.generate_stream.options(num_returns="streaming").remote(ids, sampling)
            else:
                launched = engine.generate.remote(ids, sampling)
            parts.append(_engine_parts(launched, bounds[e], streamed=cfg.stream_rollout))
        return parts

    async def generate(self, rows: Sequence[dict], *, n: int, temperature: float, seed: int) -> list[Completion]:
        """Sample ``n`` completions per row, prompts split evenly over the engines; prompt-major order."""
        out = []
        for engine_parts in self.start_generation(rows, n=n, temperature=temperature, seed=seed):
            async for part in engine_parts:
                out += part
        return sorted(out, key=lambda c: (c.prompt_index, c.sample_index))

    def score_serialised(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list:
        """``self.scorer(completions, rows)`` in a worker thread, one call at a time across every concurrent
        rollout and eval of this trainer (asynchronous rollouts score while others generate): a user reward
        function need not be thread-safe."""
        lock = self.__dict__.setdefault("_scorer_lock", threading.Lock())
        with lock:
            return self.scorer(completions, rows)

    async def score(
        self, completions: Sequence[Completion], rows: Sequence[dict], model_scores: list | None = None
    ) -> list:
        """Final rewards: the rule/user scorer in a worker thread (the verifier pool blocks, the event loop stays
        free), plus the learned reward model's score when there is one (also appended to ``model_scores``).
        Everything downstream (dynamic sampling, the logged reward, the advantages) sees the same final reward."""
        results = await asyncio.to_thread(self.score_serialised, completions, rows)
        await self.add_reward_model_scores(completions, results, model_scores)
        return results

    async def generate_and_score(
        self,
        rows: Sequence[dict],
        *,
        n: int,
        temperature: float,
        seed: int,
        model_scores: list | None = None,
        logprobs: bool = False,
        on_ready: OnReady | None = None,
        ready_when_scored: bool = True,
    ) -> ScoredGeneration:
        """``generate`` + ``score``, streamed (:func:`reasonrl.loop.rollout_stream.score_as_they_arrive`): completions
        are scored as they arrive (each one as it finishes with ``stream_rollout``, else each engine's part), one
        scorer call at a time, while the engines still generate.

        Completions and results come back prompt-major (prompt index, then sample index), whatever order they
        finished in, so everything equals ``score(generate(...))`` as long as the scorer scores each sample on its
        own (true for the built-in rules; a user reward function sees whatever finished together per call). The
        learned reward model, when there is one, scores all completions after the last engine returned
        (``model_scores`` in that order). ``on_ready``: see ``score_as_they_arrive`` (rule scores only).
        """
        parts = self.start_generation(rows, n=n, temperature=temperature, seed=seed, logprobs=logprobs)

        def score(completions: list[Completion]) -> list:
            return self.score_serialised(completions, [rows[c.prompt_index] for c in completions])

        completions, results, times = await score_as_they_arrive(
            parts, score, on_ready=on_ready, ready_when_scored=ready_when_scored
        )
        await self.add_reward_model_scores(completions, results, model_scores)
        reward_s = time.perf_counter() - times.generated  # scoring and the reward model after the last engine
        return ScoredGeneration(completions, results, times.generate_s, reward_s, times.reward_overlapped_s)

    async def eval_set(self, name: str, rows: Sequence[dict]) -> EvalSet:
        """Evaluate one eval set: the first ``eval_max_prompts`` rows, ``eval_n_samples`` samples each at
        ``eval_temperature``, seeded by ``(seed, "eval", name)``, scored (streamed) by the training scorer.
        The trainer's in-loop eval and ``python -m reasonrl.eval`` both call this, so they agree."""
        from reasonrl.loop.eval_metrics import vote_keys

        cfg = self.cfg
        rows = list(rows)[: cfg.eval_max_prompts] if cfg.eval_max_prompts else list(rows)
        seed = derive_seed(cfg.seed, "eval", name)
        scored = await self.generate_and_score(rows, n=cfg.eval_n_samples, temperature=cfg.eval_temperature, seed=seed)
        return EvalSet(rows, scored.completions, scored.results, vote_keys(scored.results))

    async def add_reward_model_scores(
        self, completions: Sequence[Completion], results: Sequence, model_scores: list | None = None
    ) -> None:
        """With a learned reward model: add its score to each ``results[i].reward`` (and set ``model_score``),
        appending the scores to ``model_scores``; without one, nothing."""
        if self.roles.reward_model is None or not completions:
            return
        scores = (await self.reward_model_scores(completions)).tolist()
        for r, s in zip(results, scores, strict=True):
            r.reward = float(r.reward) + s
            r.model_score = s
        if model_scores is not None:
            model_scores.extend(scores)

    async def reward_model_scores(self, completions: Sequence[Completion]) -> torch.Tensor:
        """[batch] scores of the learned reward model, in its own vocabulary (re-tokenised when it differs)."""
        samples = [(c.prompt_token_ids, c.token_ids) for c in completions]
        if self.reward_model_encoder is not None:
            samples = self.reward_model_encoder(samples)
        group = self.roles.reward_model
        parts = await gather_all(group.call_sharded_async("score", _split(samples, group.world_size)))
        return torch.cat([p.float() for p in parts])

    async def greedy_baseline(self, rows: Sequence[dict], tries: int, seed_step: int) -> list[float]:
        """ReMax: the final reward of one greedy (temperature 0) response per prompt. [len(rows)]"""
        seed = derive_seed(self.cfg.seed, "greedy", seed_step, tries)
        scored = await self.generate_and_score(rows, n=1, temperature=0.0, seed=seed)
        baseline = [0.0] * len(rows)
        for c, r in zip(scored.completions, scored.results, strict=True):
            baseline[c.prompt_index] = float(r.reward)
        return baseline

    async def rollout(
        self,
        rows: Sequence[dict],
        m: dict,
        seed_step: int | None = None,
        on_kept: Callable[[list[Completion]], None] | None = None,
    ) -> Rollout:
        """Generate + score, with DAPO dynamic sampling (drop zero-variance groups, refill up to max tries), and
        for remax one greedy response per prompt as the baseline. Filtering uses the final reward.

        Timing metrics (summed over refills; the remax greedy pass is not included): ``time/generate`` is the wall
        time until the last engine returned; ``time/reward`` the scoring time NOT hidden behind generation (from
        the last engine's return until all scoring finished); ``time/reward_overlapped`` the scoring seconds
        that ran while engines were still generating (``generate_and_score`` scores completions as they arrive).

        ``seed_step``: the completed steps the seeds count (default ``global_step``: the next step's rollout; an
        asynchronous rollout launched ahead passes the step it is for, so its seeds equal the synchronous loop's).

        ``on_kept``: receives the samples the step will train on, in the returned order, as soon as that is known
        (:class:`reasonrl.loop.rollout_stream.KeptRelease`): on arrival without dynamic sampling, once a prompt group is
        scored with it; after the try's reward-model pass when that pass decides (dynamic sampling) or shares its
        devices with the critic (``colocate_critic_reward``)."""
        seed_step = self.global_step if seed_step is None else seed_step
        cfg = self.cfg
        target = cfg.rollout_batch_size * cfg.n_samples_per_prompt
        release = None
        if on_kept is not None:
            keep_group = _group_has_signal if cfg.dynamic_sampling else None
            release = KeptRelease(cfg.n_samples_per_prompt, target, keep_group, on_kept)
        # After the try's reward-model pass: with dynamic sampling (the kept decision needs final rewards), and when
        # the reward model shares its devices with the critic (their forwards would overlap: two activation peaks)
        release_after_try = self.roles.reward_model is not None and (cfg.dynamic_sampling or cfg.colocate_critic_reward)
        kept = Rollout([], [], [], [], [] if cfg.advantage_estimator == "remax" else None)
        tries = total_groups = 0
        gen_s = score_s = overlapped_s = 0.0
        gen_tokens = 0
        model_scores: list[float] = []  # reward-model score of every sample, before filtering
        greedy: list[float] = []  # remax: greedy reward of every prompt
        while True:
            if tries:
                self.check_stop("dynamic-sampling refills")
            seed = derive_seed(cfg.seed, "rollout", seed_step, tries)
            if release is not None:
                release.start_try(len(rows))
            scored = await self.generate_and_score(
                rows,
                n=cfg.n_samples_per_prompt,
                temperature=cfg.temperature,
                seed=seed,
                model_scores=model_scores,
                logprobs=cfg.rollout_correction != "off",  # the behaviour policy's log-probs, for the correction
                on_ready=None if release is None or release_after_try else release.add,
                ready_when_scored=cfg.dynamic_sampling,
            )
            completions, results = scored.completions, scored.results
            if release is not None and release_after_try:
                release.add(completions, results)
            gen_s += scored.generate_s
            score_s += scored.reward_s
            overlapped_s += scored.reward_overlapped_s
            gen_tokens += sum(len(c.token_ids) for c in completions)
            per_sample_rows = [rows[c.prompt_index] for c in completions]
            baseline = await self.greedy_baseline(rows, tries, seed_step) if kept.baselines is not None else None
            greedy += baseline or []
            groups = [total_groups + c.prompt_index for c in completions]  # unique across refills
            keep = [True] * len(completions)
            if cfg.dynamic_sampling:
                rewards = torch.tensor([float(r.reward) for r in results])
                keep = algos.dynamic_sampling_keep_mask(rewards, torch.tensor(groups)).tolist()
            for c, r, row, g, k in zip(completions, results, per_sample_rows, groups, keep, strict=True):
                if k:
                    kept.completions.append(c)
                    kept.results.append(r)
                    kept.rows.append(row)
                    kept.group_ids.append(g)
                    if baseline is not None:
                        kept.baselines.append(baseline[c.prompt_index])
            tries += 1
            total_groups += len(rows)
            if not cfg.dynamic_sampling or len(kept) >= target or tries >= cfg.max_sampling_tries:
                break
            rows = self.sampler.next_batch() or rows
        if cfg.dynamic_sampling:
            for name in ("completions", "results", "rows", "group_ids", "baselines"):
                if getattr(kept, name) is not None:
                    setattr(kept, name, getattr(kept, name)[:target])
            m["sampling/kept_groups_frac"] = len(set(kept.group_ids)) / max(total_groups, 1)
            m["sampling/tries"] = float(tries)
            m["sampling/samples"] = float(len(kept))
        if release is not None and [id(c) for c in release.released] != [id(c) for c in kept.completions]:
            raise RuntimeError(  # a bug, not bad input: the streamed forwards would not match the step's samples
                f"streamed rollout: released {len(release.released)} samples, the step keeps {len(kept)} others"
            )
        m |= {"time/generate": gen_s, "time/reward": score_s, "time/reward_overlapped": overlapped_s}
        m["perf/tokens_per_s_generate"] = gen_tokens / gen_s
        if model_scores:
            m["reward/model_score_mean"] = sum(model_scores) / len(model_scores)
            rule = [float(r.reward) - r.model_score for r in kept.results]
            m["reward/rule_mean"] = sum(rule) / max(len(rule), 1)
        if greedy:
            m["reward/greedy_baseline_mean"] = sum(greedy) / len(greedy)
        m |= self.rollout_metrics(kept.completions, kept.results)
        return kept

    def rollout_metrics(self, completions: Sequence[Completion], results: Sequence) -> dict[str, float]:
        """Reward (final: rule + reward model), accuracy, length and repetition figures of the trained samples."""
        if not completions:
            return {}
        lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float32)
        rewards = torch.tensor([r.reward for r in results], dtype=torch.float32)
        return {
            "reward/mean": rewards.mean().item(),
            "reward/accuracy": sum(bool(r.correct) for r in results) / len(results),
            "reward/truncated_frac": sum(c.finish_reason != "stop" for c in completions) / len(completions),
            "response/length_mean": lengths.mean().item(),
            "response/length_max": lengths.max().item(),
            "response/clip_frac": (lengths >= self.cfg.generate_max_len).float().mean().item(),
        } | repetition_stats([c.text for c in completions])


def sample_records(completions, results, rows, *, limit: int | None = None, keys=None, **fields) -> list[dict]:
    """One JSON-ready row per scored sample (the first ``limit``): ``fields`` (e.g. ``split``), then the prompt and
    sample index, id, question, completion, finish reason and length, extracted answer (and its vote key when
    ``keys`` are given), gold, verdict, reward and reward-model score. ``rows[i]`` is sample i's data row."""
    out = []
    for i, (c, r, row) in enumerate(list(zip(completions, results, rows, strict=True))[:limit]):
        gold = row.get("answer")
        record = dict(fields)
        record |= {"prompt_index": c.prompt_index, "sample_index": c.sample_index, "id": row.get("id")}
        record |= {"question": row.get("question"), "completion": c.text, "finish_reason": c.finish_reason}
        record |= {"response_tokens": len(c.token_ids), "extracted": getattr(r, "extracted", None)}
        if keys is not None:
            record["vote_key"] = keys[i]
        record |= {"gold": None if gold is None else str(gold), "correct": bool(r.correct)}
        record |= {"reason": getattr(r, "reason", None), "reward": float(r.reward)}
        record["model_score"] = getattr(r, "model_score", None)
        out.append(record)
    return out


def _group_has_signal(rewards: list[float]) -> bool:
    """DAPO dynamic sampling's decision for one prompt group: keep it iff its final rewards are not all equal
    (``algos.dynamic_sampling_keep_mask`` on the group alone, so the streamed and the batched decisions agree)."""
    mask = algos.dynamic_sampling_keep_mask(torch.tensor(rewards), torch.zeros(len(rewards), dtype=torch.long))
    return bool(mask.all())


async def _engine_parts(launched, offset: int, *, streamed: bool):
    """One engine's completions as they come (see ``RolloutMixin.start_generation``), prompt_index + ``offset``:
    ``launched`` is the ref of ``generate`` (one part) or the ref generator of ``generate_stream``."""
    if not streamed:
        yield _with_prompt_offset(await launched, offset)
        return
    async for ref in launched:
        yield _with_prompt_offset(await ref, offset)


def _with_prompt_offset(part: Sequence[Completion], offset: int) -> list[Completion]:
    """One engine's completions with prompt_index counted in the full row list (the engine got rows[offset:])."""
    for c in part:
        c.prompt_index += offset
    return list(part)


def _split(items: Sequence, num_parts: int) -> list[list]:
    """``num_parts`` contiguous, nearly equal parts (one per data-parallel rank)."""
    bounds = [round(i * len(items) / num_parts) for i in range(num_parts + 1)]
    return [list(items[bounds[i] : bounds[i + 1]]) for i in range(num_parts)]

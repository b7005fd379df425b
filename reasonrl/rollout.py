"""Rollout of one training step: generate with every vLLM engine, score (rule or user reward, plus the learned
reward model), DAPO dynamic sampling, the ReMax greedy baseline, and the step's rollout metrics.

Scoring is streamed (as in ORZ): the completions of engine e are scored as soon as engine e returns, while the
other engines still generate (``generate_and_score``); the assembled order is the engine order, as without
streaming.

``RolloutMixin`` is part of :class:`reasonrl.trainer.PPOTrainer` (it uses the trainer's ``cfg``, ``roles``,
``tokenizer``, ``template``, ``scorer``, ``sampler``, ``reward_model_encoder`` and ``global_step``); it lives here so
each file keeps one job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Sequence

import torch

from reasonrl import algos
from reasonrl.distributed.worker_group import gather_all
from reasonrl.rewards.repetition import repetition_stats
from reasonrl.types import Completion
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

    def __len__(self) -> int:
        return len(self.completions)


@dataclasses.dataclass
class ScoredGeneration:
    """Completions in engine order (prompt_index into the given rows), their final rewards, and wall times.

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
    ) -> tuple[list, list]:
        """Launch ``n`` samples per row, prompts split evenly over the engines (contiguous parts); ``logprobs``:
        each completion carries the engine's log-prob of every sampled token (rollout-policy correction).

        Returns (refs, bounds): refs[e] resolves to engine e's completions, whose prompt_index counts from
        bounds[e] (engine e got rows[bounds[e]:bounds[e + 1]]).
        """
        from reasonrl.distributed.vllm_engine import SamplingConfig

        cfg, engines = self.cfg, self.roles.engines
        prompt_ids = self.encode(rows)
        bounds = [round(i * len(rows) / len(engines)) for i in range(len(engines) + 1)]
        refs = []
        for e, engine in enumerate(engines):
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
            refs.append(engine.generate.remote(prompt_ids[bounds[e] : bounds[e + 1]], sampling))
        return refs, bounds

    async def generate(self, rows: Sequence[dict], *, n: int, temperature: float, seed: int) -> list[Completion]:
        """Sample ``n`` completions per row, prompts split evenly over the engines (all at once), engine order."""
        refs, bounds = self.start_generation(rows, n=n, temperature=temperature, seed=seed)
        out: list[Completion] = []
        for e, part in enumerate(await asyncio.gather(*refs)):
            out += _with_prompt_offset(part, bounds[e])
        return out

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
    ) -> ScoredGeneration:
        """``generate`` + ``score`` with the scoring streamed: engine e's completions go to the scorer (in a worker
        thread, one part at a time) as soon as engine e returns, while the other engines still generate.

        Completions and results come back in engine order with the same prompt_index offsets as ``generate``, so
        everything equals ``score(generate(...))`` as long as the scorer scores each sample on its own (true for
        the math rule; a user reward function sees one engine's part per call). The learned reward model, when
        there is one, scores all completions after the last engine returned (``model_scores`` in engine order).
        """
        start = time.perf_counter()
        refs, bounds = self.start_generation(rows, n=n, temperature=temperature, seed=seed, logprobs=logprobs)
        one_scorer_at_a_time = asyncio.Lock()  # this call's parts one after the other (disjoint scoring spans)
        returned_at: list[float] = []  # when each engine returned
        scoring_spans: list[tuple[float, float]] = []  # (begin, end) of each scorer call; disjoint (the lock)

        async def generate_then_score(ref, offset: int) -> tuple[list[Completion], list]:
            part = _with_prompt_offset(await ref, offset)
            returned_at.append(time.perf_counter())
            if not part:
                return part, []
            async with one_scorer_at_a_time:
                begin = time.perf_counter()
                results = await asyncio.to_thread(self.score_serialised, part, [rows[c.prompt_index] for c in part])
                scoring_spans.append((begin, time.perf_counter()))
            return part, list(results)

        parts = await asyncio.gather(*(generate_then_score(ref, bounds[e]) for e, ref in enumerate(refs)))
        completions = [c for part, _ in parts for c in part]
        results = [r for _, part_results in parts for r in part_results]
        await self.add_reward_model_scores(completions, results, model_scores)
        end = time.perf_counter()
        generated = max(returned_at, default=start)
        overlapped = sum(max(0.0, min(stop, generated) - begin) for begin, stop in scoring_spans)
        return ScoredGeneration(completions, results, generated - start, end - generated, overlapped)

    async def eval_set(self, name: str, rows: Sequence[dict]) -> EvalSet:
        """Evaluate one eval set: the first ``eval_max_prompts`` rows, ``eval_n_samples`` samples each at
        ``eval_temperature``, seeded by ``(seed, "eval", name)``, scored (streamed) by the training scorer.
        The trainer's in-loop eval and ``python -m reasonrl.eval`` both call this, so they agree."""
        from reasonrl.eval_metrics import vote_keys

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

    async def rollout(self, rows: Sequence[dict], m: dict, seed_step: int | None = None) -> Rollout:
        """Generate + score, with DAPO dynamic sampling (drop zero-variance groups, refill up to max tries), and
        for remax one greedy response per prompt as the baseline. Filtering uses the final reward.

        Timing metrics (summed over refills; the remax greedy pass is not included): ``time/generate`` is the wall
        time until the last engine returned; ``time/reward`` the scoring time NOT hidden behind generation (from
        the last engine's return until all scoring finished); ``time/reward_overlapped`` the scoring seconds
        that ran while engines were still generating (``generate_and_score`` streams each engine's part).

        ``seed_step``: the completed steps the seeds count (default ``global_step``: the next step's rollout; an
        asynchronous rollout launched ahead passes the step it is for, so its seeds equal the synchronous loop's)."""
        seed_step = self.global_step if seed_step is None else seed_step
        cfg = self.cfg
        target = cfg.rollout_batch_size * cfg.n_samples_per_prompt
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
            scored = await self.generate_and_score(
                rows,
                n=cfg.n_samples_per_prompt,
                temperature=cfg.temperature,
                seed=seed,
                model_scores=model_scores,
                logprobs=cfg.rollout_correction != "off",  # the behaviour policy's log-probs, for the correction
            )
            completions, results = scored.completions, scored.results
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


def _with_prompt_offset(part: Sequence[Completion], offset: int) -> list[Completion]:
    """One engine's completions with prompt_index counted in the full row list (the engine got rows[offset:])."""
    for c in part:
        c.prompt_index += offset
    return list(part)


def _split(items: Sequence, num_parts: int) -> list[list]:
    """``num_parts`` contiguous, nearly equal parts (one per data-parallel rank)."""
    bounds = [round(i * len(items) / num_parts) for i in range(num_parts + 1)]
    return [list(items[bounds[i] : bounds[i + 1]]) for i in range(num_parts)]

"""The rollout of one training step: :class:`RolloutCollector` generates and scores with a
:class:`~reasonrl.loop.generation.Generator`, applies DAPO dynamic sampling (zero-variance prompt groups dropped,
refilled from the prompt sampler), runs the ReMax greedy baseline, and returns the step's :class:`Rollout` with its
rollout metrics.

``collect(rows, seed_step, on_kept=...)`` hands the samples the step keeps to the forwards as soon as that is
known (:class:`reasonrl.loop.rollout_stream.KeptRelease`), while the engines still generate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from reasonrl import algos
from reasonrl.dataplane.completion import Completion
from reasonrl.loop.agent_rollout import AgentTimes, agent_metrics
from reasonrl.loop.generation import Generator
from reasonrl.loop.multi_turn import multi_turn_metrics
from reasonrl.loop.rollout_stream import KeptRelease
from reasonrl.rewards.code import code_metrics
from reasonrl.rewards.judge import judge_metrics
from reasonrl.rewards.remote import remote_metrics
from reasonrl.rewards.repetition import repetition_stats
from reasonrl.utils.rng import derive_seed


class StepAbandoned(Exception):
    """A stop was asked before the step changed any state (weights, optimizer, controllers): the step is dropped.
    The message says where (``"generation"``, ``"dynamic-sampling refills"``, ...)."""


@dataclasses.dataclass
class RolloutSample:
    """One scored sample of a step: the completion, its reward result (``reward`` is the FINAL reward: rule
    reward + reward-model score when there is one), its data row, its prompt group (unique across refills) and,
    for ReMax, the final reward of the greedy response to its prompt."""

    completion: Completion
    result: Any
    row: dict
    group_id: int
    baseline: float | None = None


@dataclasses.dataclass
class Rollout:
    """The scored samples of one step, after dynamic sampling, in the order the step trains on them.

    ``policy_version``: the training steps whose weights generated it (set by the trainer)."""

    samples: list[RolloutSample] = dataclasses.field(default_factory=list)
    policy_version: int | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def head(self, n: int) -> Rollout:
        """The first ``n`` samples (dynamic sampling keeps at most the step's target)."""
        return Rollout(self.samples[:n], self.policy_version)

    @property
    def completions(self) -> list[Completion]:
        return [s.completion for s in self.samples]

    @property
    def results(self) -> list:
        return [s.result for s in self.samples]

    @property
    def rows(self) -> list[dict]:
        return [s.row for s in self.samples]

    @property
    def group_ids(self) -> list[int]:
        return [s.group_id for s in self.samples]

    @property
    def baselines(self) -> list[float] | None:
        """The greedy baseline of each sample (ReMax), else None."""
        if not self.samples or self.samples[0].baseline is None:
            return None
        return [s.baseline for s in self.samples]

    def records(self, limit: int | None = None, **fields) -> list[dict]:
        """JSON-ready rows of the first ``limit`` samples (:func:`sample_records`), each with ``fields`` added."""
        return sample_records(self.completions, self.results, self.rows, limit=limit, **fields)


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
    """The config values a step's rollout reads (``from_config``)."""

    seed: int
    rollout_batch_size: int
    n_samples_per_prompt: int
    temperature: float
    dynamic_sampling: bool = False
    max_sampling_tries: int = 1
    remax: bool = False  # advantage_estimator == "remax": one greedy response per prompt as the baseline
    engine_logprobs: bool = False  # rollout_correction != "off": the behaviour policy's log-probs of each token
    colocate_critic_reward: bool = False

    @classmethod
    def from_config(cls, cfg) -> RolloutSettings:
        return cls(
            seed=cfg.seed,
            rollout_batch_size=cfg.rollout_batch_size,
            n_samples_per_prompt=cfg.n_samples_per_prompt,
            temperature=cfg.temperature,
            dynamic_sampling=cfg.dynamic_sampling,
            max_sampling_tries=cfg.max_sampling_tries,
            remax=cfg.advantage_estimator == "remax",
            engine_logprobs=cfg.rollout_correction != "off",
            colocate_critic_reward=cfg.colocate_critic_reward,
        )

    @property
    def target(self) -> int:
        """The most samples a step trains on."""
        return self.rollout_batch_size * self.n_samples_per_prompt


class RolloutCollector:
    """Collects the rollout of one training step (see the module docstring).

    Args:
        generator: generation and scoring on the engines.
        settings: the config values the rollout reads.
        next_rows: the prompts of a dynamic-sampling refill (the trainer's ``PromptSampler.next_batch``; None when
            the data is used up: the try's rows come again).
        stop_requested: True once a stop was asked; checked before each refill (raises :class:`StepAbandoned`).
    """

    def __init__(
        self,
        generator: Generator,
        settings: RolloutSettings,
        *,
        next_rows: Callable[[], list[dict] | None],
        stop_requested: Callable[[], bool] = lambda: False,
    ):
        self.generator, self.settings = generator, settings
        self.next_rows, self.stop_requested = next_rows, stop_requested

    async def collect(
        self,
        rows: Sequence[dict],
        seed_step: int,
        on_kept: Callable[[list[Completion]], None] | None = None,
    ) -> tuple[Rollout, dict[str, float]]:
        """``(rollout, metrics)``: generate + score, with DAPO dynamic sampling (drop zero-variance groups, refill
        up to max tries), and for remax one greedy response per prompt as the baseline. Filtering uses the final
        reward.

        Timing metrics (summed over refills; the remax greedy pass is not included): ``time/generate`` is the wall
        time until the last engine returned; ``time/reward`` the scoring time NOT hidden behind generation (from
        the last engine's return until all scoring finished); ``time/reward_overlapped`` the scoring seconds
        that ran while engines were still generating (completions are scored as they arrive).

        ``seed_step``: the completed steps the seeds count (the next step's rollout: the trainer's ``global_step``;
        an asynchronous rollout launched ahead passes the step it is for, so its seeds equal the synchronous loop's).

        ``on_kept``: receives the samples the step will train on, in the returned order, as soon as that is known
        (:class:`reasonrl.loop.rollout_stream.KeptRelease`): on arrival without dynamic sampling, once a prompt
        group is scored with it; after the try's reward-model pass when that pass decides (dynamic sampling) or
        shares its devices with the critic (``colocate_critic_reward``)."""
        s, generator = self.settings, self.generator
        release = None
        if on_kept is not None:
            keep_group = _group_has_signal if s.dynamic_sampling else None
            release = KeptRelease(s.n_samples_per_prompt, s.target, keep_group, on_kept)
        # After the try's reward-model pass: with dynamic sampling (the kept decision needs final rewards), and when
        # the reward model shares its devices with the critic (their forwards would overlap: two activation peaks)
        release_after_try = generator.reward_model is not None and (s.dynamic_sampling or s.colocate_critic_reward)
        kept = Rollout()
        tries = total_groups = 0
        gen_s = score_s = overlapped_s = 0.0
        gen_tokens = 0
        env_s = env_exposed_s = 0.0
        agent_times: list[AgentTimes] = []  # agent_fn: each try's session counts
        model_scores: list[float] = []  # reward-model score of every sample, before filtering
        greedy: list[float] = []  # remax: greedy reward of every prompt
        while True:
            if tries and self.stop_requested():
                raise StepAbandoned("dynamic-sampling refills")
            seed = derive_seed(s.seed, "rollout", seed_step, tries)
            if release is not None:
                release.start_try(len(rows))
            scored = await generator.generate_and_score(
                rows,
                n=s.n_samples_per_prompt,
                temperature=s.temperature,
                seed=seed,
                logprobs=s.engine_logprobs,  # the behaviour policy's log-probs, for the correction
                on_ready=None if release is None or release_after_try else release.add,
                ready_when_scored=s.dynamic_sampling,
            )
            completions, results = scored.completions, scored.results
            if release is not None and release_after_try:
                release.add(completions, results)
            gen_s += scored.generate_s
            score_s += scored.reward_s
            overlapped_s += scored.reward_overlapped_s
            gen_tokens += sum(len(c.token_ids) for c in completions)
            if scored.env_times is not None:
                env_s += scored.env_times.env_s
                env_exposed_s += scored.env_times.exposed_s
                if isinstance(scored.env_times, AgentTimes):
                    agent_times.append(scored.env_times)
            model_scores += scored.model_scores
            baseline = await self.greedy_baseline(rows, tries, seed_step) if s.remax else None
            greedy += baseline or []
            keep = [True] * len(completions)
            if s.dynamic_sampling:
                rewards = torch.tensor([float(r.reward) for r in results])
                groups = torch.tensor([total_groups + c.prompt_index for c in completions])
                keep = algos.dynamic_sampling_keep_mask(rewards, groups).tolist()
            for c, r, k in zip(completions, results, keep, strict=True):
                if k:
                    greedy_reward = None if baseline is None else baseline[c.prompt_index]
                    group = total_groups + c.prompt_index  # unique across refills
                    kept.samples.append(RolloutSample(c, r, rows[c.prompt_index], group, greedy_reward))
            tries += 1
            total_groups += len(rows)
            if not s.dynamic_sampling or len(kept) >= s.target or tries >= s.max_sampling_tries:
                break
            rows = self.next_rows() or rows
        m: dict[str, float] = {}
        if s.dynamic_sampling:
            kept = kept.head(s.target)
            m["sampling/kept_groups_frac"] = len(set(kept.group_ids)) / max(total_groups, 1)
            m["sampling/tries"] = float(tries)
            m["sampling/samples"] = float(len(kept))
        if release is not None and [id(c) for c in release.released] != [id(c) for c in kept.completions]:
            raise RuntimeError(  # a bug, not bad input: the streamed forwards would not match the step's samples
                f"streamed rollout: released {len(release.released)} samples, the step keeps {len(kept)} others"
            )
        m |= {"time/generate": gen_s, "time/reward": score_s, "time/reward_overlapped": overlapped_s}
        m["perf/tokens_per_s_generate"] = gen_tokens / gen_s
        if generator.multi_turn is not None:  # time in environments; exposed = engines idle waiting for them
            m |= {"time/env": env_s, "time/env_exposed": env_exposed_s}
        if agent_times:  # agent_fn: errors, timeouts, sessions without a request, forks, the gateway's latency
            m |= agent_metrics(agent_times, generator.agents.gateway_stats())
        if model_scores:
            m["reward/model_score_mean"] = sum(model_scores) / len(model_scores)
            rule = [float(r.reward) - r.model_score for r in kept.results]
            m["reward/rule_mean"] = sum(rule) / max(len(rule), 1)
        if greedy:
            m["reward/greedy_baseline_mean"] = sum(greedy) / len(greedy)
        m |= rollout_metrics(kept.completions, kept.results, generator.settings.generate_max_len)
        return kept, m

    async def greedy_baseline(self, rows: Sequence[dict], tries: int, seed_step: int) -> list[float]:
        """ReMax: the final reward of one greedy (temperature 0) response per prompt. [len(rows)]"""
        seed = derive_seed(self.settings.seed, "greedy", seed_step, tries)
        scored = await self.generator.generate_and_score(rows, n=1, temperature=0.0, seed=seed)
        baseline = [0.0] * len(rows)
        for c, r in zip(scored.completions, scored.results, strict=True):
            baseline[c.prompt_index] = float(r.reward)
        return baseline


def rollout_metrics(completions: Sequence[Completion], results: Sequence, generate_max_len: int) -> dict[str, float]:
    """Reward (final: rule + reward model), accuracy, length and repetition figures of the trained samples, and the
    ``reward/code_*`` verdict counts (:func:`reasonrl.rewards.code.code_metrics`) when some rows are code rows, the
    ``reward/remote_*`` counts (:func:`reasonrl.rewards.remote.remote_metrics`) when some were scored by reward_url,
    the ``reward/judge_*`` counts (:func:`reasonrl.rewards.judge.judge_metrics`) when some were judged."""
    if not completions:
        return {}
    lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float32)
    rewards = torch.tensor([r.reward for r in results], dtype=torch.float32)
    verdicts = [r.code_verdict for r in results if getattr(r, "code_verdict", None) is not None]
    code = code_metrics(verdicts) if verdicts else {}
    return (
        code
        | remote_metrics(results)
        | judge_metrics(results)
        | {
            "reward/mean": rewards.mean().item(),
            "reward/accuracy": sum(bool(r.correct) for r in results) / len(results),
            "reward/truncated_frac": sum(c.finish_reason != "stop" for c in completions) / len(completions),
            "response/length_mean": lengths.mean().item(),
            "response/length_max": lengths.max().item(),
            "response/clip_frac": (lengths >= generate_max_len).float().mean().item(),
        }
        | repetition_stats([c.text for c in completions])
        | multi_turn_metrics(completions)
    )


def sample_records(completions, results, rows, *, limit: int | None = None, keys=None, **fields) -> list[dict]:
    """One JSON-ready row per scored sample (the first ``limit``): ``fields`` (e.g. ``split``), then the prompt and
    sample index, id, question, completion, finish reason and length, extracted answer (and its vote key when
    ``keys`` are given), gold, verdict, reward and reward-model score, and a judged sample's ``judge_text``,
    ``judge_score`` and ``judge_weight``. ``rows[i]`` is sample i's data row."""
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
        judge = getattr(r, "judge", None)
        if judge is not None:  # LLM as judge: what it wrote, the score parsed from it (None: unparsed), the weight
            record |= {"judge_text": judge.text, "judge_score": judge.score, "judge_weight": judge.weight}
        if c.turns is not None:  # multi-turn: each turn's text and size, and why the environment ended it early
            record["turns"] = [{k: t[k] for k in ("role", "text", "num_tokens") if k in t} for t in c.turns]
            record |= {"env_reward": c.env_reward, "env_error": c.env_error}
        out.append(record)
    return out


def _group_has_signal(rewards: list[float]) -> bool:
    """DAPO dynamic sampling's decision for one prompt group: keep it iff its final rewards are not all equal
    (``algos.dynamic_sampling_keep_mask`` on the group alone, so the streamed and the batched decisions agree)."""
    mask = algos.dynamic_sampling_keep_mask(torch.tensor(rewards), torch.zeros(len(rewards), dtype=torch.long))
    return bool(mask.all())

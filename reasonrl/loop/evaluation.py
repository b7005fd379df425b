"""Evaluation on held-out sets, the same for the trainer's in-loop eval and ``python -m reasonrl.eval``.

:func:`eval_set` generates ``eval_n_samples`` samples per prompt at ``eval_temperature`` with a
:class:`~reasonrl.loop.generation.Generator` (seeded by ``(seed, "eval", name)``), scored by the training scorer;
:func:`evaluate_sets` is the trainer's eval: every set, summarised as avg@k / pass@k / maj@k
(:mod:`reasonrl.loop.eval_metrics`), its generations dumped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from loguru import logger

from reasonrl.dataplane.completion import Completion
from reasonrl.loop.eval_metrics import summarize_eval, vote_keys
from reasonrl.loop.generation import Generator
from reasonrl.loop.rollout import sample_records
from reasonrl.utils.rng import derive_seed


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """The config values an eval reads: samples per prompt, their temperature, the prompts kept, the run's seed."""

    n_samples: int
    temperature: float
    max_prompts: int | None = None
    seed: int = 0

    @classmethod
    def from_config(cls, cfg) -> EvalSettings:
        return cls(cfg.eval_n_samples, cfg.eval_temperature, cfg.eval_max_prompts, cfg.seed)


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


async def eval_set(generator: Generator, settings: EvalSettings, name: str, rows: Sequence[dict]) -> EvalSet:
    """Evaluate one eval set: the first ``max_prompts`` rows, ``n_samples`` samples each at ``temperature``,
    seeded by ``(seed, "eval", name)``, scored (streamed) by the generator's scorer."""
    rows = list(rows)[: settings.max_prompts] if settings.max_prompts else list(rows)
    seed = derive_seed(settings.seed, "eval", name)
    scored = await generator.generate_and_score(rows, n=settings.n_samples, temperature=settings.temperature, seed=seed)
    return EvalSet(rows, scored.completions, scored.results, vote_keys(scored.results))


async def evaluate_sets(
    generator: Generator, settings: EvalSettings, eval_sets: Mapping[str, Sequence[dict]], *, step: int, tracker
) -> dict[str, float]:
    """The trainer's eval at ``step``: avg@k, pass@k and maj@k of every eval set (maj@k only when the scorer
    extracts answers) as ``eval/<set>/<metric>``; each set's generations go to ``tracker.dump_generations``."""
    out = {}
    for name, rows in eval_sets.items():
        scored = await eval_set(generator, settings, name, rows)
        correct, keys = scored.per_prompt()
        summary = summarize_eval(correct, settings.n_samples, keys)
        out |= {f"eval/{name}/{k}": float(v) for k, v in summary.items()}
        tracker.dump_generations(step, scored.records(split=f"eval/{name}"))
        logger.info(f"eval {name} @ step {step}: {summary}")
    return out

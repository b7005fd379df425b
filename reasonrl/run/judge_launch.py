"""``judge_pretrain``: the judge's frozen vLLM engine, started once Ray runs and attached to the run's judge scorer
(built and checked before Ray by :func:`reasonrl.rewards.routing.build_scorer`). Used by training
(:func:`reasonrl.run.launch.start_attempt`, once per attempt) and by ``reasonrl.eval``.

Placement, for now: one engine on a placement group of its own, one CPU bundle, taken after the run's placement groups
hold theirs (the judge engine is not in the placement plan nor in the memory model). On GPUs it is refused: "not yet
placed on GPUs"; serve the judge with ``vllm serve`` and give ``judge_url`` instead.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from loguru import logger


def start_judge(cfg, stack: contextlib.ExitStack, scorer, device: str):
    """Start the judge engine of ``cfg.judge_pretrain`` and attach it to ``scorer`` (a
    :class:`reasonrl.rewards.judge.JudgeScorer`); register detach, shutdown and the group's removal on ``stack``
    (the detach runs first: no batch reaches an engine going away). Returns the engine actor, not waited for (its
    start overlaps the roles'; wait on ``engine.ready`` before scoring), or None without ``judge_pretrain``.
    Raises :class:`ConfigError` naming ``judge_pretrain`` on GPUs, with a scorer of the experiment's own, or when
    no CPU is free for the judge's bundle, before the engine starts."""
    if getattr(cfg, "judge_pretrain", None) is None:
        return None
    import ray
    from transformers import AutoTokenizer

    from reasonrl.config import ConfigError
    from reasonrl.distributed.judge_engines import EngineJudge, judge_context, start_judge_engine
    from reasonrl.rewards.judge import JudgeScorer

    field = f"judge_pretrain={cfg.judge_pretrain!r}"
    if not isinstance(scorer, JudgeScorer):
        raise ConfigError(
            [
                f"{field}: the experiment's build_scorer() returned a {type(scorer).__name__}, not the judge scorer "
                "that BasePPOExp.build_scorer builds (reasonrl.rewards.routing.build_scorer); wrap yours with "
                "reasonrl.rewards.judge.judge_from_config(cfg, your_scorer)"
            ],
            title="the judge cannot start",
        )
    if device == "gpu":
        raise ConfigError(
            [f"{field}: the judge engine is not yet placed on GPUs; serve the judge with vllm serve, give judge_url"],
            title="the judge cannot start",
        )
    free = ray.available_resources().get("CPU", 0.0)
    if free < 1:
        raise ConfigError(
            [
                f"{field} needs one free CPU for its engine once the placement groups hold theirs; the cluster has "
                f"{free:g} free of {ray.cluster_resources().get('CPU', 0.0):g}: lower cpus_per_bundle or "
                "reward_num_cpus, or add a node"
            ],
            title="the judge cannot start",
        )
    folder = cfg.resolve_model_path(cfg.judge_pretrain)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    context = judge_context(_model_context(folder), cfg.max_prompt_len, cfg.generate_max_len, cfg.judge_max_tokens)
    engine, pg = start_judge_engine(
        cfg.model_source(cfg.judge_pretrain),
        dtype="bfloat16" if cfg.bf16 else "float32",
        max_model_len=context,
        seed=cfg.seed,
    )
    stack.callback(_stop, engine, pg)
    scorer.attach(
        EngineJudge(
            [engine],
            tokenizer,
            max_tokens=cfg.judge_max_tokens,
            temperature=cfg.judge_temperature,
            seed=cfg.seed,
            max_prompt_len=context - cfg.judge_max_tokens,
        )
    )
    stack.callback(scorer.attach, None)  # runs first: no batch reaches the engine going away
    logger.info(f"judge engine starting: {cfg.judge_pretrain} (a CPU bundle of its own, context {context} tokens)")
    return engine


def _model_context(folder: str) -> int | None:
    """The judge model's ``max_position_embeddings`` (config.json), or None when it does not say."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    config = config.get("text_config") or config
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else None


def _stop(engine, pg) -> None:
    """Shut the judge engine down, kill its actor, remove its group; a failing step is logged and the next still
    runs (the attempt's other cleanups go on too)."""
    import ray
    from ray.util.placement_group import remove_placement_group

    steps = (
        ("shutdown", lambda: ray.get(engine.shutdown.remote(process_exits=True), timeout=120)),
        ("kill", lambda: ray.kill(engine)),
        ("remove its placement group", lambda: remove_placement_group(pg)),
    )
    for what, step in steps:
        try:
            step()
        except Exception as err:  # noqa: BLE001 - keep cleaning up
            logger.warning(f"judge engine cleanup, {what}: {err}")

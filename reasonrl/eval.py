"""Evaluate a model or a checkpoint without training: ``python -m reasonrl.eval``.

    python -m reasonrl.eval pretrain=tiny eval_data=arith_add2_heldout eval_n_samples=4 eval_temperature=1.0
    python -m reasonrl.eval config=ckpt/demo/demo_grpo/step_30    # that run's eval settings, on its exported policy
    python -m reasonrl.eval pretrain=Qwen/Qwen2.5-7B eval_data=math500_test,aime24 eval_n_samples=16 out_dir=ev

The same pieces as training, built by the same code: Ray and the placement (``reasonrl.distributed.placement``),
the vLLM engines (``run.launch.start_vllm_engines``), the data, template and scorer (the ``BasePPOExp`` hooks),
prompt encoding, sampling, scoring and seeds (``reasonrl.loop.generation.Generator`` and
``reasonrl.loop.evaluation.eval_set``, as the trainer's in-loop eval).
So evaluating a run's starting model with its config reproduces that run's step-0 ``eval/*`` numbers.

Reported per eval set (``reasonrl.loop.eval_metrics``): ``avg@n`` (n = ``eval_n_samples``), unbiased ``pass@k`` and
``maj@k`` (majority vote over extracted answers; not for a user reward function, which extracts none) for k = 1,
2, 4, ... up to n (and n itself). Written to ``out_dir``:

* ``generations.jsonl``: one row per sample (prompt, completion, extracted answer, gold, verdict, reward, ...);
* ``summary.json``: the model, the settings and the metrics of every set;
* ``samples.html``: a small table of samples with their extracted answers and verdicts (text HTML-escaped).

``config=<checkpoint folder or its config.json>`` takes that run's fields (unknown ones of a recipe subclass are
ignored); ``pretrain`` then defaults to the checkpoint's exported ``policy_hf`` folder when it has one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import html
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.fields import _evl
from reasonrl.loop.evaluation import EvalSet, EvalSettings, eval_set
from reasonrl.loop.generation import GenerationSettings, Generator

HTML_MAX_PROMPTS = 20  # prompts per eval set shown in samples.html (every sample of each); all are in the jsonl


@dataclass
class EvalConfig(BasePPOExpConfig):
    """An evaluation-only run: the model (``pretrain``), the eval sets and sampling, the vLLM engines, ``out_dir``.

    Training fields are accepted (``config=`` of a training run) but not used; :meth:`validate` checks only what an
    evaluation needs.
    """

    out_dir: str = _evl("eval_results", "folder of generations.jsonl, summary.json and samples.html")
    train_data: list[str] = ()  # not used: evaluation reads eval_data only
    vllm_num_engines: int = 1
    vllm_enable_sleep: bool = False  # nothing else shares the devices

    def validate(self, cluster_resources: Any = None, nodes: Sequence[Any] | None = None) -> None:
        """Raise :class:`ConfigError` listing every problem of the fields an evaluation uses (model, eval data,
        template, reward, sampling and engine settings, ``out_dir``); training-only fields are not checked. The
        cluster (``cluster_resources``, ``nodes``) is checked by ``build_placement`` when the engines start."""
        from reasonrl.config import consistency
        from reasonrl.config import validate as v
        from reasonrl.data.source_checks import data_source_problems

        problems = v._type_problems(self)
        if problems:
            raise ConfigError(problems, title=f"invalid {type(self).__name__}")
        problems += v._check_models(self) + v._check_names(self) + v._check_ranges(self)
        if not self.eval_data:
            problems.append("eval_data is empty: give at least one built-in dataset or a data file to evaluate on")
        problems += data_source_problems(dataclasses.replace(self, train_data=[]), required=False)
        if self.reward_fn is not None:
            problems += v._reward_fn_problems(self.reward_fn)
        if self.agent_fn is not None:
            problems += v._agent_fn_problems(self.agent_fn)
        problems += consistency.eval_sampling_problems(self) + consistency.engine_length_problems(self)
        if not self.out_dir.strip():
            problems.append("out_dir is empty: give the folder for generations.jsonl, summary.json and samples.html")
        if problems:
            raise ConfigError(problems, title=f"invalid {type(self).__name__}")

    def eval_role_resources(self) -> dict[str, Any]:
        """Placement of the engines alone: ``vllm_num_engines x vllm_tensor_parallel_size`` devices of one node.
        ``plan_groups`` always places a policy, so a policy of the same size shares the engines' bundles
        (``colocate_all``); no policy actor is started."""
        from reasonrl.distributed.placement import RoleResources, VLLMResources

        engines = VLLMResources(self.vllm_num_engines, self.vllm_tensor_parallel_size)
        return {"policy": RoleResources(1, engines.world_size), "vllm": engines}


# ---------------------------------------------------------------------------------------------- command line
def checkpoint_policy(config_path: str | Path) -> Path | None:
    """The exported policy (``policy_hf`` with a config.json) of the checkpoint that ``config_path`` (a step folder
    or its config.json) belongs to, or None."""
    path = Path(config_path).expanduser()
    folder = path if path.is_dir() else path.parent
    policy = folder / "policy_hf"
    return policy if (policy / "config.json").is_file() else None


def eval_config_from_cli(argv: Sequence[str] | None = None) -> EvalConfig:
    """:class:`EvalConfig` from ``[config=<file or checkpoint>] field=value ...`` (``--help`` prints the fields).
    A file written by any training config is accepted (fields this class lacks are ignored); not validated yet."""
    from reasonrl.config.overrides import apply_overrides, config_file_overrides, parse_overrides, split_config_file

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        print(__doc__ + "\n" + EvalConfig.help_text())
        raise SystemExit(0)
    config_path, rest = split_config_file(argv)
    overrides = parse_overrides(rest)
    cfg = EvalConfig()
    if config_path is not None:
        file, values = config_file_overrides(EvalConfig, config_path, any_class=True)  # refuses a model's config
        values.pop("train_data", None)
        # a LoRA run's policy_hf is the merged model: the engines serve it as a plain model
        values = {k: v for k, v in values.items() if not k.startswith("lora_")}
        cfg = apply_overrides(cfg, values, strict=False, source=str(file))  # types checked, the file named
        policy = checkpoint_policy(config_path)
        if policy is not None and "pretrain" not in overrides:
            cfg = cfg.with_overrides({"pretrain": str(policy)})
    return cfg.with_overrides(overrides)


# ---------------------------------------------------------------------------------------------- metrics
def sample_sizes(n: int) -> list[int]:
    """The k reported for ``n`` samples per prompt: 1, 2, 4, ... up to n, and n itself."""
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks if ks[-1] == n else [*ks, n]


def eval_summary(per_prompt_correct: Sequence[Sequence[bool]], per_prompt_keys, n: int) -> dict[str, float | int]:
    """``avg@n``, then ``pass@k`` (and ``maj@k`` when ``per_prompt_keys`` are given) for each k of
    :func:`sample_sizes`, then ``num_prompts`` and ``num_samples``."""
    from reasonrl.loop.eval_metrics import avg_at_k, summarize_eval

    out: dict[str, float | int] = {f"avg@{n}": avg_at_k([[bool(x) for x in c] for c in per_prompt_correct])}
    for k in sample_sizes(n):
        summary = summarize_eval(per_prompt_correct, k, per_prompt_keys)
        out[f"pass@{k}"] = summary[f"pass@{k}"]
        if f"maj@{k}" in summary:
            out[f"maj@{k}"] = summary[f"maj@{k}"]
    out["num_prompts"] = len(per_prompt_correct)
    out["num_samples"] = sum(len(c) for c in per_prompt_correct)
    return out


def generation_records(name: str, scored: EvalSet, prompts: Sequence[str]) -> list[dict]:
    """One JSON-ready row per sample (``EvalSet.records``: id, question, completion, extracted answer and vote key,
    gold, verdict, reward, ...), with the eval set's name and the rendered prompt (``prompts[prompt_index]``)."""
    records = scored.records(eval_set=name)
    for record in records:
        record["prompt"] = prompts[record["prompt_index"]]
    return records


def summary_table(summaries: dict[str, dict[str, float | int]]) -> str:
    """A plain-text table: one line per eval set, one column per metric (``num_samples`` left out)."""
    columns: list[str] = []
    for summary in summaries.values():
        columns += [key for key in summary if key not in columns and key != "num_samples"]
    width = max([len("eval set"), *map(len, summaries)])
    lines = [f"{'eval set':<{width}}  " + "  ".join(f"{c:>11}" for c in columns)]
    for name, summary in summaries.items():
        cells = [summary.get(c) for c in columns]
        text = [f"{'':>11}" if v is None else f"{v:>11d}" if isinstance(v, int) else f"{v:>11.4f}" for v in cells]
        lines.append(f"{name:<{width}}  " + "  ".join(text))
    return "\n".join(lines)


def samples_html(title: str, summaries: dict[str, dict], records: Sequence[dict], max_prompts: int) -> str:
    """A small self-contained HTML page: the metrics of every set, then the samples of its first ``max_prompts``
    prompts (question, completion, extracted answer, gold, verdict). Every text is HTML-escaped: model output and
    data are untrusted."""
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px;vertical-align:top}pre{white-space:pre-wrap;margin:0;max-width:60em}"
        ".ok{background:#e6ffe6}.bad{background:#ffe6e6}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    for name, summary in summaries.items():
        metrics = ", ".join(f"{e(k)} {v:.4f}" if isinstance(v, float) else f"{e(k)} {v}" for k, v in summary.items())
        parts += [f"<h2>{e(name)}</h2>", f"<p>{metrics}</p>"]
        parts.append(
            "<table><tr><th>prompt</th><th>sample</th><th>question</th><th>completion</th><th>extracted</th>"
            "<th>gold</th><th>verdict</th><th>reward</th></tr>"
        )
        shown = [r for r in records if r["eval_set"] == name and r["prompt_index"] < max_prompts]
        for r in shown:
            verdict = "correct" if r["correct"] else f"wrong ({r['reason']})"
            parts.append(
                f"<tr class='{'ok' if r['correct'] else 'bad'}'><td>{r['prompt_index']}</td><td>{r['sample_index']}"
                f"</td><td><pre>{e(_text(r['question']))}</pre></td><td>{_completion_html(r)}</td>"
                f"<td><pre>{e(_text(r['extracted']))}</pre></td><td><pre>{e(_text(r['gold']))}</pre></td>"
                f"<td>{e(verdict)}</td><td>{r['reward']:.3f}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _completion_html(record: dict) -> str:
    """A sample's completion, HTML-escaped: one block, or for a multi-turn sample one block per turn (the model's
    turns and the environment's observations told apart, and the error that ended it early, if any)."""
    e = html.escape
    turns = record.get("turns")
    if not turns:
        return f"<pre>{e(record['completion'])}</pre>"
    blocks = []
    for turn in turns:
        who = "model" if turn["role"] == "assistant" else "tool"
        style = "" if who == "model" else " style='background:#eef'"
        blocks.append(f"<div{style}><b>{who}</b> ({turn['num_tokens']} tokens)<pre>{e(turn['text'])}</pre></div>")
    if record.get("env_error"):
        blocks.append(f"<div><b>environment error</b><pre>{e(record['env_error'])}</pre></div>")
    return "".join(blocks)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def write_outputs(out_dir: Path, cfg: EvalConfig, summaries: dict[str, dict], records: Sequence[dict]) -> None:
    """``generations.jsonl``, ``summary.json`` and ``samples.html`` in ``out_dir`` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "generations.jsonl", "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    settings = {
        name: getattr(cfg, name)
        for name in (
            "pretrain",
            "eval_data",
            "eval_n_samples",
            "eval_temperature",
            "eval_max_prompts",
            "generate_max_len",
            "max_prompt_len",
            "prompt_template",
            "reward_fn",
            "env_fn",
            "agent_fn",
            "agent_reward",
            "tools",
            "max_turns",
            "top_p",
            "top_k",
            "seed",
        )
    }
    summary = {"model": cfg.pretrain, "model_path": cfg.resolve_model_path(cfg.pretrain), "settings": settings}
    summary["eval_sets"] = summaries
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    title = f"reasonrl eval: {cfg.pretrain}"
    (out_dir / "samples.html").write_text(samples_html(title, summaries, records, HTML_MAX_PROMPTS), encoding="utf-8")


# ---------------------------------------------------------------------------------------------- run
class Evaluator:
    """Generation and scoring exactly as the trainer's (a :class:`Generator` and ``eval_set``), on engines without a
    trainer."""

    def __init__(self, cfg: EvalConfig, engines: list, tokenizer, template, scorer):
        self.cfg, self.template = cfg, template
        settings = GenerationSettings.from_config(cfg)
        self.generator = Generator(engines, tokenizer=tokenizer, template=template, scorer=scorer, settings=settings)
        self.eval_settings = EvalSettings.from_config(cfg)

    async def evaluate_set(self, name: str, rows: list[dict]) -> tuple[dict, list[dict]]:
        """``(summary, records)`` of one eval set, generated, scored and seeded exactly as the trainer's in-loop
        eval (:func:`reasonrl.loop.evaluation.eval_set`)."""
        try:
            scored = await eval_set(self.generator, self.eval_settings, name, rows)
        finally:
            await self.generator.aclose()  # the agent gateway (agent_fn) lives in this set's event loop
        correct, keys = scored.per_prompt()
        summary = eval_summary(correct, keys, self.cfg.eval_n_samples)
        prompts = [self.template.render(row) for row in scored.rows]
        return summary, generation_records(name, scored, prompts)


def run_eval(cfg: EvalConfig) -> dict[str, dict[str, float | int]]:
    """Validate, start Ray and the engines, evaluate every eval set, write ``out_dir``, shut everything down.
    Returns the summary of each eval set."""
    import ray
    from loguru import logger
    from transformers import AutoTokenizer

    from reasonrl.data.sources import DataFormatError
    from reasonrl.distributed.placement import build_placement
    from reasonrl.distributed.ray_cluster import check_ray_address, init_ray
    from reasonrl.exp import BasePPOExp
    from reasonrl.rewards.routing import routing_problems
    from reasonrl.run.judge_launch import start_judge
    from reasonrl.run.launch import logged, ray_cluster_checked, start_reward_actors, start_vllm_engines
    from reasonrl.sft.warm_start import register_offline_models
    from reasonrl.utils.reaper import start_reaper

    register_offline_models()  # pretrain= an offline model: its builder, before the model is resolved
    cfg.validate()
    with ray_cluster_checked():
        check_ray_address(cfg.ray_address)
    hooks = BasePPOExp(cfg)  # the data, template and scorer builders of training
    try:
        eval_sets = hooks.load_eval_sets()
    except (DataFormatError, FileNotFoundError) as err:
        raise ConfigError([f"eval_data cannot be loaded: {err}"], title="bad eval data") from None
    from reasonrl.data.gym_source import gym_sources

    sets = {f"eval_data {name}": rows for name, rows in eval_sets.items()}
    problems = routing_problems(cfg, sets, gym=gym_sources(cfg))
    if problems:  # a row the scorer cannot route, before Ray and the engines start
        raise ConfigError(problems, title="bad eval data")
    tokenizer = AutoTokenizer.from_pretrained(cfg.resolve_model_path(cfg.pretrain))
    template = hooks.build_template(tokenizer)
    from reasonrl.run.vision_check import vision_problems

    problems = vision_problems(cfg, tokenizer, template, eval_sets, training=False)  # images: lengths, the model
    if problems:
        raise ConfigError(problems, title="the vision-language evaluation cannot start")
    if cfg.env_fn is not None:  # multi-turn eval: the environment and the chat template, before Ray
        from reasonrl.loop.multi_turn import environment_problems

        problems = environment_problems(cfg.env_fn, cfg.tools, tokenizer)
        if problems:
            raise ConfigError(problems, title="multi-turn rollouts cannot start")
    if cfg.agent_fn is not None:  # agent eval: the agent function imports, the chat template, before Ray
        from reasonrl.loop.agent_rollout import agent_problems

        problems = agent_problems(cfg.agent_fn, tokenizer)
        if problems:
            raise ConfigError(problems, title="agent rollouts cannot start")
    summaries: dict[str, dict] = {}
    records: list[dict] = []
    with contextlib.ExitStack() as stack:
        scorer = hooks.build_scorer()
        if callable(getattr(scorer, "close", None)):
            stack.callback(logged, scorer.close)
        if callable(getattr(scorer, "wait_ready", None)):
            scorer.wait_ready()
        start_reaper()  # before Ray starts: even a killed driver leaves no Ray/vLLM/reward process behind
        started_ray = not ray.is_initialized()
        with ray_cluster_checked():
            init_ray(cfg.ray_address, device=cfg.device)
        if started_ray:
            stack.callback(logged, ray.shutdown)
        plan = build_placement(
            cfg.eval_role_resources(),
            colocate_all=True,
            device=cfg.resolved_device(ray.cluster_resources()),
            cpus_per_bundle=cfg.cpus_per_bundle,
        )
        stack.callback(logged, plan.remove)
        reward_actors = start_reward_actors(cfg, stack, scorer)  # reward_num_cpus > 0: math / code on Ray actors
        judge_engine = start_judge(cfg, stack, scorer, plan.device)  # judge_pretrain: its own CPU bundle
        engines = start_vllm_engines(cfg, plan["vllm"], stack)
        ray.get([e.ready.remote() for e in engines])
        if reward_actors is not None:
            reward_actors.wait_ready()
        if judge_engine is not None:
            ray.get(judge_engine.ready.remote())
        evaluator = Evaluator(cfg, engines, tokenizer, template, scorer)
        for name, rows in eval_sets.items():
            summary, set_records = asyncio.run(evaluator.evaluate_set(name, list(rows)))
            summaries[name] = summary
            records += set_records
            logger.info(f"eval {name}: {summary}")
    write_outputs(Path(cfg.out_dir), cfg, summaries, records)
    return summaries


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float | int]]:
    try:
        cfg = eval_config_from_cli(argv)
        cfg.validate()
    except ConfigError as err:  # a readable message, no traceback: nothing has started yet
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    try:
        summaries = run_eval(cfg)
    except ConfigError as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("reasonrl.eval: interrupted; engines and Ray are shut down", file=sys.stderr)
        raise SystemExit(130) from None
    print(f"\nreasonrl eval of {cfg.pretrain} ({cfg.eval_n_samples} samples per prompt, T={cfg.eval_temperature})")
    print(summary_table(summaries))
    print(f"written: {Path(cfg.out_dir) / 'generations.jsonl'}, summary.json, samples.html")
    return summaries


if __name__ == "__main__":
    main()

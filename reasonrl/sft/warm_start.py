"""``pretrain=arith-sft``: the SFT warm start of the CPU learning demo, trained on first use and cached.
:func:`register_offline_models` registers its builder (and those of the other warm starts and of
``reasonrl.models.named``, their bases) in :mod:`reasonrl.config.offline_models`; every runner calls it before it
resolves a model (importing this module registers nothing).

A small random Qwen2 (``tiny-demo``, ~5M parameters) is fine-tuned by :func:`reasonrl.sft.train_sft` on 2-digit
addition (``arith_add2_train``: ``"47+85="`` -> ``"132"``) for a deliberately SHORT schedule, so that it stops at
a partial held-out accuracy (~55-65% greedy on ``arith_add2_heldout``) that RL then
improves: it stops once its greedy accuracy on a validation split of its own enters a band (55-65%,
:mod:`reasonrl.sft.band`), so it lands there on any CPU. Built once per machine (~85 s on 2 cores, both used by its
one rank), reused afterwards::

    path = warm_start_path()                 # <cache>/models/sft-<hash>/, an HF folder vLLM and transformers load

The folder name hashes every field that changes the weights (model, data, schedule, seed) plus
:data:`BUILD_VERSION`, so a changed recipe builds a new folder and a stale one is never reused. The SFT run is
deterministic by seed on a given torch build; another machine's float order gives another trajectory, which the
band absorbs (it stops at another step). ``band.json`` beside the weights records where it stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from filelock import FileLock
from loguru import logger

from reasonrl.config.offline_models import register_offline_builders
from reasonrl.models import named
from reasonrl.sft.config import SFTConfig
from reasonrl.utils.cpus import usable_cores
from reasonrl.utils.paths import cache_root

BUILD_VERSION = 1  # bump when train_sft changes what the same config produces
# The schedule of tools-sft and tools-sft-notool (tiny-demo, batch 32, lr 1e-3 constant after 20 warmup steps), on
# the default ToolMulTask (2-digit x 2-digit, question "48*93=?"). Measured on a shared 2-core CPU
# (benchmarks/bench_tools_sft.py, first 100 held-out rows, greedy): the copy of the operands is learned in a sharp
# transition between ~100 and ~120 steps (train loss 0.20 at 100, 0.14 at 110, 0.03 at 120).
#   90 steps:  tools-sft 0% (0% of calls copy the expression), build 169 s; tools-sft-notool 0%, build 66 s.
#   120 steps: tools-sft 73% (94% copied), build 264 s under CPU contention (~1.4-1.8 s/step).
#   115 steps (this setting): tools-sft 56% (93% copied; the misses copy the tool's result wrong), build 261 s
#   (~195 s of training at ~1.7 s/step, plus start-up): over the ~150 s goal.
# The old task (3-4 x 2-4 digits, "What is 4821 * 937?", batch 64): 0% after 60 steps (240 s), nothing copied.
# Those builds ran one torch thread; with both cores (torch_threads below): 96 s, 0.65 s/step, the same weights.
TOOLS_SFT_STEPS = 115


@dataclasses.dataclass
class ArithWarmStartConfig(SFTConfig):
    """The SFT run behind ``pretrain=arith-sft`` (also the base of the ``playground.sft_arith`` recipe).

    Constant learning rate: a decayed one would settle the model, leaving RL less to fix. The run stops by accuracy
    (issue 45): once greedy accuracy on its validation split ``arith_add2_val`` first reaches 55% (the band 55-65%,
    measured every 5 steps from step 100, and every step once within 10 points of it), while held-out accuracy is
    still rising steeply. A fixed 400 steps landed
    at 40.0%, 64.5% and 75.0% held-out on three machines; the band lands in 55-65% on each, at the step that machine
    needs. Measured here (2 threads): validation 27.5% at step 250, 31.5% at 255, 50.0% at 260 (18.5 points in 5
    steps, hence every step near the band), 50.5% at 271, 58.5% at 272 (the stop; held-out 51.5%). Build ~85 s
    (~8 s of it the ~45 greedy measurements); 600 steps is the cap."""

    pretrain: str = "tiny-demo"
    exp_name: str = "arith_sft"
    seed: int = 0
    train_data: list[str] = dataclasses.field(default_factory=lambda: ["arith_add2_train"])
    eval_data: list[str] = dataclasses.field(default_factory=lambda: ["arith_add2_heldout"])
    prompt_template: str = "plain"
    response_field: str = "answer"
    max_prompt_len: int = 32
    max_response_len: int = 16
    lr: float = 1e-3
    lr_schedule: str = "constant"
    warmup_steps: int = 20
    max_steps: int | None = 600  # the cap: the accuracy band below ends the run (~400 steps on a 2-core CPU)
    train_batch_size: int = 64
    # The accuracy band (reasonrl.sft.band): greedy accuracy on arith_add2_val (200 held-out-bucket problems, never
    # the demo's held-out set) every 5 steps from step 100; the run stops once it first reaches 55%.
    band_low: float | None = 0.55
    band_high: float | None = 0.65
    band_data: str | None = "arith_add2_val"
    band_eval_interval: int = 5
    band_eval_from: int = 100
    band_max_new_tokens: int = 8
    zero_stage: int = 0
    device: str = "cpu"
    # One rank alone on the machine: it may use the cores (up to 4; more only adds overhead on a 5M model). Not a
    # weight field (the cache key ignores it); measured bit-identical weights with 1 and 2 threads, 1.4x faster.
    torch_threads: int | None = dataclasses.field(default_factory=lambda: min(4, usable_cores()))


@dataclasses.dataclass
class ArithStudentWarmStartConfig(ArithWarmStartConfig):
    """The SFT run behind ``pretrain=arith-sft-student``, the weak student of the distillation demo
    (``python -m reasonrl.demo --task distill``): an early checkpoint of the ``arith-sft`` run (the same model,
    data, seed and constant learning rate, stopped sooner), so that it lands clearly below ``arith-sft``: its band
    is 25-35% on the validation split (measured here: 27.0% at step 232, held-out 26.0%; ~65 s to build).

    Measured before the band, with fixed step counts:

    Greedy held-out accuracy (``arith_add2_heldout``, 200 problems, plain transformers) measured on a shared 2-core
    CPU (``benchmarks/bench_distill_warm_starts.py``): 3.5% after 150 steps, 10.5% after 200, 25.0% after 250 (this
    setting), 64.5% after 400 (``arith-sft``). From 10.5% neither distillation nor GRPO moved in 10-20 steps (the
    student rarely samples a right digit to learn from), so the student sits near 25%."""

    exp_name: str = "arith_sft_student"
    max_steps: int | None = 400
    band_low: float | None = 0.25
    band_high: float | None = 0.35


@dataclasses.dataclass
class ArithTeacherWarmStartConfig(ArithWarmStartConfig):
    """The SFT run behind ``pretrain=arith-sft-teacher``, the strong teacher of the distillation demo: ``arith-sft``
    (the cached build, not trained again) after 120 more SFT steps of 128 training pairs, the learning rate warmed up
    to 5e-4 over 5 steps and decayed to 0 (cosine). A fixed schedule, no accuracy band: the teacher must be strong,
    and its accuracy saturates too slowly for a band near the top (from a banded ``arith-sft`` at 58.0% on the
    validation split: 91.0% at step 30, 95.5% at 50, 96.0% at 90, 97.5% at 120; held-out 90.5% at 50, 97.5% at 120;
    from today's, 58.5%: 98.5% held-out at 120).

    Earlier measurements, from the 400-step ``arith-sft`` (64.5% held-out):

    Greedy held-out accuracy (``arith_add2_heldout``, the 200 problems the demo evaluates the student on, never
    trained on: the teacher's check, ``benchmarks/bench_distill_warm_starts.py``) measured on a shared 2-core CPU,
    all from ``arith-sft`` (64.5%), cosine to 0: lr 1e-3 without warmup, batch 128: 90.0% after 50 steps, 98.0%
    after 100 (the first steps at full lr undo part of ``arith-sft``: train loss 0.90 at step 10, from a held-out
    0.28); lr 5e-4 with 5 warmup steps: 92.5% after 30 steps of 128, 94.5% after 50 steps of 64, 97.0% after 50 steps
    of 128 (train loss 0.10 at step 10), built in 31 s on the quiet machine. 120 steps: ~55 s, ``arith-sft`` not
    counted (cached; if it is missing it is built first, ~85 s)."""

    pretrain: str = "arith-sft"
    exp_name: str = "arith_sft_teacher"
    lr: float = 5e-4
    lr_schedule: str = "cosine"
    warmup_steps: int = 5
    max_steps: int | None = 120
    train_batch_size: int = 128
    band_low: float | None = None  # a fixed schedule: strong is what counts (see the class docstring)
    band_high: float | None = None


@dataclasses.dataclass
class CodeWarmStartConfig(ArithWarmStartConfig):
    """The SFT run behind ``pretrain=code-sft``: ``tiny-code`` (``tiny-demo``'s shape, a tokenizer trained with code)
    on the procedural programming tasks of :mod:`reasonrl.data.code_tasks` (``"f(x) returns x times 3 plus 12."`` ->
    ``"def f(x):\n    return x * 3 + 12"``).

    Same optimiser as the arithmetic warm start, and a short schedule on purpose: greedy held-out pass rate
    (``code_heldout``, 200 tasks) measured 4.5% after 40 steps, 53.0% after 50, 64.5% after 55, 83.0% after 80 on a
    2-core CPU, so 50 steps leave RL (``playground.code_grpo_cpu``) room. ~100 s to build there. Prompts take at most
    18 tokens of ``tiny-code``'s tokenizer, programs at most 20 (+ EOS). On ``tiny-demo`` (its math tokenizer: 33 and
    39 tokens) 80 steps reached only 8.0%, at twice the time per step."""

    pretrain: str = "tiny-code"
    exp_name: str = "code_sft"
    train_data: list[str] = dataclasses.field(default_factory=lambda: ["code_train"])
    eval_data: list[str] = dataclasses.field(default_factory=lambda: ["code_heldout"])
    max_prompt_len: int = 48
    max_response_len: int = 48
    max_steps: int | None = 50
    band_low: float | None = None  # a fixed step count (see the class docstring)
    band_high: float | None = None


@dataclasses.dataclass
class ToolsWarmStartConfig(ArithWarmStartConfig):
    """The SFT run behind ``pretrain=tools-sft``: ``tiny-demo`` on calculator conversations
    (:mod:`reasonrl.data.tool_tasks`, ``tool_mul_sft_train``): ``"48*93=?"`` -> a ``<tool_call>`` of the
    calculator with ``{"expression": "48*93"}``, the tool's ``"4464"`` (masked), ``"The answer is
    \\boxed{4464}."``. The loss is on the assistant turns only (``response_field=messages``,
    :mod:`reasonrl.sft.conversation`), and the prompt is the chat template's, as in a multi-turn rollout.

    Meant to be short, so that the model calls the tool correctly only part of the time and RL has room; the
    copy of the operands is learned in a sharp transition around 100-120 steps of 32 (:data:`TOOLS_SFT_STEPS`: 0%
    held-out at 90 steps, 56% at 115, 73% at 120, the no-tool baseline 0%), so the step count sits inside it."""

    exp_name: str = "tools_sft"
    train_data: list[str] = dataclasses.field(default_factory=lambda: ["tool_mul_sft_train"])
    eval_data: list[str] = dataclasses.field(default_factory=lambda: ["tool_mul_sft_heldout"])
    prompt_template: str = "chat"
    prompt_field: str = "messages"
    response_field: str = "messages"
    max_prompt_len: int = 32
    max_response_len: int = 128
    train_batch_size: int = 32
    max_steps: int | None = TOOLS_SFT_STEPS
    band_low: float | None = None  # a fixed step count (see the class docstring)
    band_high: float | None = None


@dataclasses.dataclass
class ToolsNoToolWarmStartConfig(ToolsWarmStartConfig):
    """The SFT run behind ``pretrain=tools-sft-notool``, the baseline of ``tools-sft``: the same questions, model
    and schedule, answered directly (``tool_mul_notool_sft_train``: ``"The answer is \\boxed{4517277}."``)."""

    exp_name: str = "tools_sft_notool"
    train_data: list[str] = dataclasses.field(default_factory=lambda: ["tool_mul_notool_sft_train"])
    eval_data: list[str] = dataclasses.field(default_factory=lambda: ["tool_mul_notool_sft_heldout"])


@dataclasses.dataclass
class VisionWarmStartConfig(ArithWarmStartConfig):
    """The SFT run behind ``pretrain=vision-sft``: the tiny vision-language model (``tiny-vlm``, Idefics3) on
    counting dots (:mod:`reasonrl.data.vision_tasks`, ``dots_train``: a 56 x 56 picture and ``"<image>How many
    dots?"`` -> ``"7"``, loss on the count and EOS).

    Short on purpose, so that RL (``playground.vision_grpo_cpu``) has room. Greedy held-out accuracy
    (``dots_heldout``, 200 pictures) measured on a 2-core CPU, batch 64: lr 3e-4 (constant after 20 warmup steps)
    37.5% after 150 steps, 45.0% after 180 (this setting; ~60 s of training, ~70 s to build), 100% after 400;
    lr 1e-3 stalls (16% after 100 steps, 15% after 250: the count is guessed from the prompt alone)."""

    pretrain: str = "tiny-vlm"
    exp_name: str = "vision_sft"
    train_data: list[str] = dataclasses.field(default_factory=lambda: ["dots_train"])
    eval_data: list[str] = dataclasses.field(default_factory=lambda: ["dots_heldout"])
    max_prompt_len: int = 48
    max_response_len: int = 4
    lr: float = 3e-4
    max_steps: int | None = 180
    # No accuracy band: this run's greedy accuracy oscillates (measured on 200 other held-out-bucket boards: 48.5%
    # at step 90, 1.5% at 100, 37.5% at 110, 60.5% at 120), so a band stops it on a transient spike; from the step-90
    # stop GRPO fell (47.5% -> 36.5% held-out in the vision test's 15 steps).
    band_low: float | None = None
    band_high: float | None = None


def warm_start_key(cfg: SFTConfig) -> str:
    """``sft-<exp_name>-<hash>``: the hash covers the fields of ``cfg`` that change its weights
    (:meth:`SFTConfig.weights_fingerprint`), this module's and the tiny models' build versions, and the definition
    of every generated dataset it names, so a changed recipe, base model or task never reuses a stale folder."""
    from reasonrl.data.arithmetic import GENERATED_DATASETS
    from reasonrl.models import tiny, tiny_vlm

    if cfg.rows is not None or cfg.generator is not None:
        raise ValueError("a cached warm start needs named data (train_data=...), not in-memory rows or a generator")
    tasks = {name: GENERATED_DATASETS[name][0].key for name in cfg.train_data if name in GENERATED_DATASETS}
    blob = {"fields": cfg.weights_fingerprint(), "build": BUILD_VERSION, "tiny_build": tiny.BUILD_VERSION}
    if cfg.pretrain == "tiny-vlm":  # (other models' keys stay as they were)
        blob["tiny_vlm_build"] = tiny_vlm.BUILD_VERSION
    if cfg.band_low is not None:  # stopped by an accuracy band: a changed stop rule builds a new folder
        from reasonrl.sft.band import RULE_VERSION

        blob["band_rule"] = RULE_VERSION
    if cfg.pretrain in WARM_START_CONFIGS:  # continued from another warm start: a changed base builds a new folder
        blob["base"] = warm_start_key(WARM_START_CONFIGS[cfg.pretrain]())
    digest = hashlib.sha1(json.dumps(blob | {"tasks": tasks}, sort_keys=True, default=str).encode()).hexdigest()
    return f"sft-{cfg.exp_name}-{digest[:12]}"


def warm_start_path(cfg: SFTConfig | None = None, cache_dir: Path | None = None, log_dir: str | None = None) -> Path:
    """The HF folder of the SFT run ``cfg`` (default :class:`ArithWarmStartConfig`), trained first if missing (its
    curves go to ``<log_dir>/<exp_name>/``). Concurrent builders each train into their own folder; the first to
    finish is kept and never replaced, so a reader never sees the folder vanish. A lock file beside the folder makes
    builders on this machine take turns: the second finds the first one's folder instead of training again."""
    cfg = cfg or ArithWarmStartConfig()
    path = Path(cache_dir or cache_root() / "models") / warm_start_key(cfg)
    if (path / "model.safetensors").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(f".{path.name}.lock"))):
        if (path / "model.safetensors").exists():  # built by another process while this one waited
            return path
        _build_warm_start(cfg, path, log_dir)
    return path


def _build_warm_start(cfg: SFTConfig, path: Path, log_dir: str | None) -> None:
    from reasonrl.sft.trainer import train_sft

    logger.info(f"building the SFT warm start {path} once (cached for later runs; a progress bar shows in a terminal)")
    start = time.perf_counter()
    build = path.with_name(f".{path.name}.build-{os.getpid()}-{time.time_ns()}")
    overrides = {"output_dir": str(build), "overwrite": False, "progress_bar": True, "resume": "none"}
    if cfg.pretrain in WARM_START_CONFIGS:
        register_offline_models()  # pretrain=<another warm start> resolves (built first if missing)
    try:
        train_sft(dataclasses.replace(cfg, **overrides, **({"log_dir": log_dir} if log_dir else {})))
        try:
            os.rename(build, path)
        except OSError:
            if not (path / "model.safetensors").exists():
                raise  # not a lost race: a real error
    finally:
        shutil.rmtree(build, ignore_errors=True)
    logger.info(f"SFT warm start {path.name} ready in {time.perf_counter() - start:.0f} s")


def student_warm_start_path(cache_dir: Path | None = None, log_dir: str | None = None) -> Path:
    """``pretrain=arith-sft-student``: :func:`warm_start_path` of :class:`ArithStudentWarmStartConfig`."""
    return warm_start_path(ArithStudentWarmStartConfig(), cache_dir=cache_dir, log_dir=log_dir)


def teacher_warm_start_path(cache_dir: Path | None = None, log_dir: str | None = None) -> Path:
    """``pretrain=arith-sft-teacher``: :func:`warm_start_path` of :class:`ArithTeacherWarmStartConfig` (which
    continues ``arith-sft``, from the default cache: built first if missing)."""
    return warm_start_path(ArithTeacherWarmStartConfig(), cache_dir=cache_dir, log_dir=log_dir)


def code_warm_start_path(cache_dir: Path | None = None, log_dir: str | None = None) -> Path:
    """``pretrain=code-sft``: :func:`warm_start_path` of :class:`CodeWarmStartConfig`."""
    return warm_start_path(CodeWarmStartConfig(), cache_dir=cache_dir, log_dir=log_dir)


def tools_warm_start_path(cache_dir: Path | None = None, log_dir: str | None = None) -> Path:
    """``pretrain=tools-sft``: :func:`warm_start_path` of :class:`ToolsWarmStartConfig`."""
    return warm_start_path(ToolsWarmStartConfig(), cache_dir=cache_dir, log_dir=log_dir)


def tools_notool_warm_start_path(cache_dir: Path | None = None, log_dir: str | None = None) -> Path:
    """``pretrain=tools-sft-notool``: :func:`warm_start_path` of :class:`ToolsNoToolWarmStartConfig`."""
    return warm_start_path(ToolsNoToolWarmStartConfig(), cache_dir=cache_dir, log_dir=log_dir)


def vision_warm_start_path(cache_dir: Path | None = None, log_dir: str | None = None) -> Path:
    """``pretrain=vision-sft``: :func:`warm_start_path` of :class:`VisionWarmStartConfig`."""
    return warm_start_path(VisionWarmStartConfig(), cache_dir=cache_dir, log_dir=log_dir)


WARM_START_BUILDERS = {
    "arith-sft": warm_start_path,
    "arith-sft-student": student_warm_start_path,
    "arith-sft-teacher": teacher_warm_start_path,
    "vision-sft": vision_warm_start_path,
    "code-sft": code_warm_start_path,
    "tools-sft": tools_warm_start_path,
    "tools-sft-notool": tools_notool_warm_start_path,
}
"""name -> builder of the warm starts (each trained on first use from a model of ``reasonrl.models.named``, or
from another warm start: ``arith-sft-teacher`` continues ``arith-sft``)."""

WARM_START_CONFIGS = {
    "arith-sft": ArithWarmStartConfig,
    "arith-sft-student": ArithStudentWarmStartConfig,
    "arith-sft-teacher": ArithTeacherWarmStartConfig,
    "vision-sft": VisionWarmStartConfig,
    "code-sft": CodeWarmStartConfig,
    "tools-sft": ToolsWarmStartConfig,
    "tools-sft-notool": ToolsNoToolWarmStartConfig,
}
"""name -> the SFT config of each warm start (the cache key of a warm start continued from another includes the
base's key)."""


def register_offline_models() -> None:
    """Register every offline model's builder: ``reasonrl.models.named.BUILDERS`` (the warm starts' bases) and
    :data:`WARM_START_BUILDERS`. Called by the runners (the RL run's tokenizer loader, ``reasonrl.eval``,
    ``python -m reasonrl.sft``) before they resolve a model; again: a no-op."""
    register_offline_builders({**named.BUILDERS, **WARM_START_BUILDERS})

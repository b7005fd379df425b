"""``SFTConfig``: one supervised fine-tuning run, its ``field=value`` overrides and its validation.

Imports no torch, ray, deepspeed or vllm: a bad config fails in well under a second, before anything starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from reasonrl.config.errors import ConfigError, _close
from reasonrl.config.fields import _dat, _evl, _exp, _log, _mod, _opt, _res
from reasonrl.config.names import (
    ATTN_IMPLEMENTATIONS,
    DEVICES,
    LR_SCHEDULES,
    PROMPT_TEMPLATES,
    ZERO_STAGES,
)
from reasonrl.utils.tracking import TRACKERS

BAND_METRICS = ("exact", "code")  # reasonrl.sft.band: how a greedy response is judged

# In-memory data: set in Python only (not on the command line, not in a config= file, not in --help).
PYTHON_ONLY_FIELDS = ("rows", "eval_rows", "generator")

# Fields that do not change the trained weights (where things go, how often things are logged or saved).
NOT_WEIGHT_FIELDS = (
    "output_dir",
    "overwrite",
    "exp_name",
    "log_dir",
    "log_interval",
    "eval_interval",
    "eval_max_rows",
    "eval_rows",
    "eval_data",
    "progress_bar",
    "tracker",
    "wandb_project",
    "wandb_run_name",
    "ray_address",
    "torch_threads",
    "ckpt_dir",
    "save_interval",
    "keep_last_ckpts",
    "resume",
)


@dataclasses.dataclass
class SFTConfig:
    """One SFT run. Data comes from ``rows`` (in memory), ``generator`` (a callable returning rows) or
    ``train_data`` (sources of ``reasonrl.data.load_rows``: built-in names or files), in that order of precedence.
    Held-out loss uses ``eval_rows`` / ``eval_data``, else the last ``eval_frac`` of the training rows.

    Subclass it for a recipe (``playground/sft_arith.py``) exactly like ``BasePPOExpConfig``."""

    pretrain: str = _mod(
        "tiny",
        "model to fine-tune: a local HF folder (an existing path wins), a Hub id owner/name or owner/name@revision "
        "(from the HF cache; downloaded first unless HF_HUB_OFFLINE=1), or tiny / tiny-demo / smollm2",
    )
    lora_rank: int = _mod(0, "LoRA rank of adapters to train instead of every weight (docs/lora.md); 0 = off")
    lora_alpha: float = _mod(16.0, "LoRA alpha: the update is scaled by lora_alpha / lora_rank")
    lora_dropout: float = _mod(0.0, "dropout on the adapters' input, in [0, 1)")
    lora_target_modules: list[str] = _mod(
        doc="linear layers that get adapters (q_proj,v_proj, self_attn.o_proj) or all-linear; checked before Ray",
        factory=lambda: ["all-linear"],
    )
    output_dir: str = _exp("ckpt/sft_hf", "the exported Hugging Face folder (pretrain=<it> starts RL from it)")
    overwrite: bool = _exp(False, "replace an existing output_dir (else: refused before training)")
    exp_name: str = _exp("sft", "run name: checkpoints go to <ckpt_dir>/<exp_name>/, curves to <log_dir>/<exp_name>/")
    log_dir: str = _exp("logs", "root folder of the logs and curves")
    seed: int = _exp(42, "seed of the model's init, the data order and the held-out split")
    # data
    rows: list[dict] | None = _dat(None, "in-memory training rows (Python only)")
    generator: Callable[[], Iterable[dict]] | None = _dat(None, "a callable returning training rows (Python only)")
    train_data: list[str] = _dat(
        doc="training sources of reasonrl.data.load_rows: built-in names, .jsonl/.json/.parquet files, folders",
        factory=list,
    )
    eval_rows: list[dict] | None = _dat(None, "in-memory held-out rows (Python only)")
    eval_data: list[str] = _dat(
        doc="held-out sources (as train_data); none: the last eval_frac of the rows", factory=list
    )
    eval_frac: float = _dat(0.02, "held-out share of the training rows when no eval rows/data are given")
    eval_max_rows: int = _dat(512, "at most this many held-out rows")
    prompt_template: str = _dat("plain", "plain / chat / orz / r1_zero / a jinja2 file (as the RL config's)")
    prompt_field: str = _dat("question", "the row field the template renders as the question")
    response_field: str = _dat(
        "answer",
        "the row field holding the target text (whitespace stripped; EOS is appended), or messages: train on a chat "
        "row's turns after its prompt, loss on the assistant turns only (tool turns masked; prompt_template=chat)",
    )
    max_prompt_len: int = _dat(256, "prompt tokens kept (left-truncated, like the RL trainer)")
    max_response_len: int = _dat(256, "longer targets (with EOS) are dropped and counted")
    # optimisation
    lr: float = _opt(1e-5, "peak learning rate (AdamW); 1e-5 suits full fine-tuning of 0.1B-7B LLMs")
    lr_schedule: str = _opt("cosine", "constant / linear / cosine (to 0 at the last step)")
    warmup_steps: int = _opt(20, "linear warmup from 0 over this many optimizer steps")
    weight_decay: float = _opt(0.0, "AdamW weight decay")
    grad_clip: float = _opt(1.0, "clip the global gradient 2-norm to this (0 = no clipping)")
    num_epochs: int = _opt(1, "passes over the training rows (when max_steps is None)")
    max_steps: int | None = _opt(None, "stop after this many optimizer steps (cycling the data if needed)")
    train_batch_size: int = _opt(64, "pairs per optimizer step, over all ranks")
    max_tokens_per_micro_batch: int = _opt(8192, "token budget of each rank's micro-batches (padded prompt+response)")
    packing: bool = _opt(
        False,
        "padding-free micro-batches where the backend each worker resolves supports it (flash_attention_2; "
        "sdpa/eager pack exactly but slower)",
    )
    # resources
    num_nodes: int = _res(1, "nodes of the data-parallel group")
    devices_per_node: int = _res(1, "ranks per node; data-parallel ranks = num_nodes x devices_per_node")
    zero_stage: int = _res(3, "DeepSpeed ZeRO stage 0..3")
    offload_optimizer: bool = _res(False, "optimizer states in host memory (ZeRO-1..3)")
    bf16: bool = _res(False, "bf16 weights and compute (GPU); else fp32")
    gradient_checkpointing: bool = _res(False, "recompute activations in the backward pass (less memory, slower)")
    attn_implementation: str = _res(
        "sdpa",
        "auto / flash_attention_2 / sdpa / eager; auto is resolved on each worker (flash-attention on a GPU "
        "in bf16 where flash_attn imports, else sdpa)",
    )
    device: str = _res("auto", "auto / cpu / gpu")
    ray_address: str | None = _res(None, "join this Ray cluster (auto: the one `ray start` recorded); None = local")
    cpus_per_bundle: float = _res(1.0, "CPUs of each rank's placement bundle")
    torch_threads: int | None = _res(None, "CPU threads of each worker's torch; None = Ray's default (its num_cpus)")
    # checkpoints (DeepSpeed states of every rank under <ckpt_dir>/<exp_name>/step_<n>/, as RL runs)
    ckpt_dir: str = _exp("ckpt", "checkpoints go to <ckpt_dir>/<exp_name>/step_<n>/ (every rank's DeepSpeed states)")
    save_interval: int = _exp(0, "save every N steps (0 = never: only the final HF export in output_dir)")
    keep_last_ckpts: int = _exp(2, "keep this many newest checkpoints")
    resume: str = _exp("auto", "auto (newest complete checkpoint, if any) / none / a step_<n> folder")
    # accuracy band: stop once the greedy accuracy on band_data first enters [band_low, band_high] (reasonrl.sft.band)
    band_low: float | None = _evl(None, "stop once greedy accuracy on band_data first reaches this (None = no band)")
    band_high: float | None = _evl(None, "the band's top: landing above it is reported as an overshoot")
    band_data: str | None = _evl(None, "the band's validation rows (a data source; never the set you report)")
    band_metric: str = _evl("exact", "exact (response == answer, ended by EOS) / code (every test passes)")
    band_eval_interval: int = _evl(10, "greedy accuracy every N steps while a band is set")
    band_eval_from: int = _evl(0, "first step at which the band's accuracy is measured")
    band_max_new_tokens: int = _evl(16, "greedy tokens per band_data question")
    # logging
    log_interval: int = _log(10, "log the training metrics every N steps")
    eval_interval: int = _evl(100, "held-out loss every N steps (0 = only before and after training)")
    progress_bar: bool = _log(True, "a tqdm progress bar on the driver")
    tracker: str = _log(
        "tensorboard", "where scalars go besides metrics.jsonl: tensorboard, wandb or both (as in RL configs)"
    )
    wandb_project: str = _log("reasonrl", "W&B project of the run (tracker=wandb/both)")
    wandb_run_name: str | None = _log(None, "W&B run name; None = exp_name")

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.devices_per_node

    # ------------------------------------------------------------------------------------------ construction
    def with_overrides(self, overrides: dict[str, Any]) -> SFTConfig:
        """A copy with ``field=value`` overrides parsed by field type (as ``BasePPOExpConfig.with_overrides``)."""
        from reasonrl.config.overrides import apply_overrides

        return apply_overrides(self, overrides)

    @classmethod
    def from_cli(cls, argv: Sequence[str] | None = None) -> SFTConfig:
        """An instance from the command line (default ``sys.argv[1:]``): the recipe's defaults, then the values of
        ``config=<file.json|file.yaml>`` if given (e.g. a checkpoint's sft_config.json), then the ``field=value``
        overrides. ``-h`` / ``--help`` prints :meth:`help_text` and exits."""
        from reasonrl.config.overrides import config_from_cli

        return config_from_cli(cls, argv, python_only=PYTHON_ONLY_FIELDS, debug_mode=False)

    @classmethod
    def help_text(cls) -> str:
        """Every field a command line can set, with its type, default and meaning, by group (what ``--help``
        prints; the same layout as the RL recipes')."""
        from reasonrl.config.render import field_help_lines

        lines = [
            f"{cls.__name__}: override any field with field=value (e.g. lr=2e-5 train_data=pairs.jsonl max_steps=9).",
            "In-memory data (rows, eval_rows, generator) is set in Python only.",
        ]
        lines += field_help_lines(cls, skip=PYTHON_ONLY_FIELDS)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (in-memory data is summarised by its size)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("rows", "eval_rows"):
                value = None if value is None else f"<{len(value)} rows>"
            elif f.name == "generator":
                value = None if value is None else getattr(value, "__qualname__", repr(value))
            out[f.name] = value
        return out

    def weights_fingerprint(self) -> dict[str, Any]:
        """The fields that decide the trained weights (model, data, schedule, seed, parallel layout): checked on
        resume and hashed by the warm-start cache. In-memory data is summarised (see ``to_dict``)."""
        fields = {k: v for k, v in self.to_dict().items() if k not in NOT_WEIGHT_FIELDS}
        if not self.lora_rank:  # full fine-tuning: the LoRA fields decide nothing (and old cache keys stay valid)
            fields = {k: v for k, v in fields.items() if not k.startswith("lora_")}
        if self.band_low is None:  # no accuracy band: its fields decide nothing (and old cache keys stay valid)
            fields = {k: v for k, v in fields.items() if not k.startswith("band_")}
        return fields

    # ------------------------------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise :class:`ConfigError` listing every problem (field, value, fix); touches no heavy library."""
        from reasonrl.config.probes import _model_max_positions, _model_problems
        from reasonrl.config.validate import tracker_problems

        problems = []
        ints = ("train_batch_size", "max_tokens_per_micro_batch", "max_prompt_len", "max_response_len", "num_epochs")
        for name in (*ints, "log_interval", "num_nodes", "devices_per_node"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)!r} must be >= 1")
        if self.max_steps is not None and self.max_steps < 1:
            problems.append(f"max_steps={self.max_steps!r} must be >= 1 (or None: num_epochs over the data)")
        if self.keep_last_ckpts < 1:
            problems.append(f"keep_last_ckpts={self.keep_last_ckpts!r} must be >= 1")
        for name in ("warmup_steps", "eval_interval", "eval_max_rows", "weight_decay", "grad_clip", "save_interval"):
            if getattr(self, name) < 0:
                problems.append(f"{name}={getattr(self, name)!r} must be >= 0")
        if not self.lr > 0:
            problems.append(f"lr={self.lr!r} must be > 0")
        if not 0 <= self.eval_frac < 1:
            problems.append(f"eval_frac={self.eval_frac!r} must be in [0, 1)")
        if self.lora_rank < 0:
            problems.append(f"lora_rank={self.lora_rank!r} must be >= 0 (0 = full fine-tuning)")
        if self.lora_rank and not self.lora_alpha > 0:
            problems.append(f"lora_alpha={self.lora_alpha!r} must be > 0")
        if not 0 <= self.lora_dropout < 1:
            problems.append(f"lora_dropout={self.lora_dropout!r} must be in [0, 1)")
        if self.lora_rank and not self.lora_target_modules:
            problems.append("lora_target_modules is empty: name at least one linear layer, or all-linear")
        for name, allowed in (
            ("lr_schedule", LR_SCHEDULES),
            ("zero_stage", ZERO_STAGES),
            ("device", DEVICES),
            ("attn_implementation", ATTN_IMPLEMENTATIONS),
            ("tracker", TRACKERS),
        ):
            if getattr(self, name) not in allowed:
                value = getattr(self, name)
                problems.append(f"{name}={value!r} is not one of {list(allowed)}{_close(value, allowed)}")
        if self.prompt_template not in PROMPT_TEMPLATES and not Path(self.prompt_template).expanduser().is_file():
            problems.append(
                f"prompt_template={self.prompt_template!r} is neither one of {list(PROMPT_TEMPLATES)} nor a jinja2 file"
            )
        if self.response_field == "messages" and self.prompt_template != "chat":
            problems.append(
                f"response_field='messages' (SFT on conversations) needs prompt_template=chat, got "
                f"{self.prompt_template!r}: the reply turns are rendered by the tokenizer's chat template"
            )
        if self.cpus_per_bundle <= 0:
            problems.append(f"cpus_per_bundle={self.cpus_per_bundle!r} must be > 0")
        if self.torch_threads is not None and self.torch_threads < 1:
            problems.append(f"torch_threads={self.torch_threads!r} must be >= 1 (or None)")
        if self.offload_optimizer and self.zero_stage == 0:
            problems.append("offload_optimizer=true needs zero_stage 1, 2 or 3 (ZeRO-0 keeps the optimizer on device)")
        problems += self._band_problems()
        problems += tracker_problems(self.tracker)
        problems += _model_problems("pretrain", self.pretrain)
        context = _model_max_positions(self.pretrain)
        if context is not None and self.max_prompt_len + self.max_response_len > context:
            problems.append(
                f"max_prompt_len + max_response_len = {self.max_prompt_len + self.max_response_len} exceeds the "
                f"{context}-token context of pretrain={self.pretrain!r}: lower one of them"
            )
        problems += self._data_problems()
        problems += self._output_problems()
        if problems:
            raise ConfigError(problems, title="invalid SFT config")

    def _band_problems(self) -> list[str]:
        if self.band_low is None and self.band_high is None:
            return []
        if self.band_low is None or self.band_high is None:
            return ["band_low and band_high go together: set both (a band such as 0.55 and 0.65) or neither"]
        problems = []
        if not 0 <= self.band_low < self.band_high <= 1:
            problems.append(f"band_low={self.band_low!r}, band_high={self.band_high!r}: need 0 <= low < high <= 1")
        if not self.band_data:
            problems.append("band_data is empty: name the band's validation rows (never the set you report)")
        elif self.band_data in (*self.train_data, *self.eval_data):
            problems.append(
                f"band_data={self.band_data!r} is also a train_data/eval_data source: use a split of its own"
            )
        if self.prompt_template != "plain":
            problems.append(
                f"a band needs prompt_template='plain' (got {self.prompt_template!r}): its greedy check feeds each "
                "band_data question as the bare prompt"
            )
        if self.band_metric not in BAND_METRICS:
            problems.append(f"band_metric={self.band_metric!r} is not one of {list(BAND_METRICS)}")
        for name in ("band_eval_interval", "band_max_new_tokens"):
            if getattr(self, name) < 1:
                problems.append(f"{name}={getattr(self, name)!r} must be >= 1")
        if self.band_eval_from < 0:
            problems.append(f"band_eval_from={self.band_eval_from!r} must be >= 0")
        return problems

    def _output_problems(self) -> list[str]:
        out = Path(self.output_dir).expanduser().resolve()
        problems = []
        for name, other in (
            ("the checkpoint folder", Path(self.ckpt_dir) / self.exp_name),
            ("log_dir", Path(self.log_dir)),
        ):
            other = other.expanduser().resolve()
            if out == other or other in out.parents or out in other.parents:
                problems.append(
                    f"output_dir={self.output_dir!r} overlaps {name} {str(other)!r}: the export replaces its folder "
                    "as a whole, so keep them apart (e.g. output_dir=ckpt/<name>_hf)"
                )
        if out.exists() and not self.overwrite:
            problems.append(
                f"output_dir={self.output_dir!r} already exists: choose another folder or pass overwrite=true "
                "(the old folder is replaced only after the new export is complete)"
            )
        elif out.exists() and not (out / "config.json").is_file() and any(out.iterdir()):
            problems.append(
                f"output_dir={self.output_dir!r} is a non-empty folder that is not a model export (no config.json): "
                "overwrite=true replaces only model folders; choose another output_dir"
            )
        return problems

    def _data_problems(self) -> list[str]:
        from reasonrl.data.source_checks import data_source_problems

        in_memory = self.rows is not None or self.generator is not None
        return data_source_problems(self, required=not in_memory)

"""``pretrain=arith-sft``: the SFT warm start of the CPU learning demo, trained on first use and cached.

A small random Qwen2 (``tiny-demo``, ~5M parameters) is fine-tuned by :func:`reasonrl.sft.train_sft` on 2-digit
addition (``arith_add2_train``: ``"47+85="`` -> ``"132"``) for a deliberately SHORT schedule, so that it stops at
a partial held-out accuracy (~60% greedy on ``arith_add2_heldout``, measured on a 2-core CPU) that RL then
improves. Built once per machine (~2 min on 2 cores), reused afterwards::

    path = warm_start_path()                 # <cache>/models/sft-<hash>/, an HF folder vLLM and transformers load

The folder name hashes every field that changes the weights (model, data, schedule, seed) plus
:data:`BUILD_VERSION`, so a changed recipe builds a new folder and a stale one is never reused. The SFT run is
deterministic by seed on a given torch build; other machines may land a few points away from 60%.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from loguru import logger

from reasonrl.sft.config import SFTConfig
from reasonrl.utils.paths import cache_root

BUILD_VERSION = 1  # bump when train_sft or the task generator change what the same config produces

# Fields that do not change the trained weights (where things go, how often they are logged).
_NOT_IN_KEY = (
    "output_dir",
    "overwrite",
    "exp_name",
    "log_dir",
    "log_interval",
    "eval_interval",
    "progress_bar",
    "ray_address",
    "torch_threads",
    "ckpt_dir",
    "save_interval",
    "keep_last_ckpts",
    "resume",
)


@dataclasses.dataclass
class ArithWarmStartConfig(SFTConfig):
    """The SFT run behind ``pretrain=arith-sft`` (also the base of the ``playground.sft_arith`` recipe).

    Constant learning rate: a decayed one would settle the model, leaving RL less to fix; 400 steps of 64 pairs
    stop while held-out accuracy is still rising steeply."""

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
    max_steps: int | None = 400
    train_batch_size: int = 64
    zero_stage: int = 0
    device: str = "cpu"


def warm_start_key(cfg: SFTConfig) -> str:
    """``sft-<hash>`` of the fields of ``cfg`` that change its trained weights."""
    fields = {k: v for k, v in cfg.to_dict().items() if k not in _NOT_IN_KEY}
    blob = json.dumps(fields | {"build": BUILD_VERSION}, sort_keys=True, default=str)
    return f"sft-{cfg.exp_name}-{hashlib.sha1(blob.encode()).hexdigest()[:12]}"


def warm_start_path(cfg: SFTConfig | None = None, cache_dir: Path | None = None, log_dir: str | None = None) -> Path:
    """The HF folder of the SFT run ``cfg`` (default :class:`ArithWarmStartConfig`), trained first if missing (its
    curves go to ``<log_dir>/<exp_name>/``). Concurrent builders are safe: the folder appears complete or not."""
    cfg = cfg or ArithWarmStartConfig()
    path = Path(cache_dir or cache_root() / "models") / warm_start_key(cfg)
    if not (path / "model.safetensors").exists():
        from reasonrl.sft import train_sft

        logger.info(f"building the SFT warm start {path} once (cached for later runs)")
        overrides = {"output_dir": str(path), "overwrite": True, "progress_bar": False, "resume": "none"}
        train_sft(dataclasses.replace(cfg, **overrides, **({"log_dir": log_dir} if log_dir else {})))
    return path

"""Supervised fine-tuning (SFT) on (prompt, response) pairs, on the same Ray + DeepSpeed workers as the RL roles.

    cfg = SFTConfig(pretrain="tiny", rows=rows, output_dir="ckpt/sft_demo", max_steps=200)
    result = train_sft(cfg)          # -> SFTResult; result.output_dir is an HF folder: pretrain=<it> starts RL

Each row is rendered into a prompt with the same templates as RL (``prompt_template``: plain / chat / orz / a
jinja2 file) and tokenized exactly like the RL trainer does (no extra special tokens, left-truncated to
``max_prompt_len``); the target is ``row[response_field]`` tokenized alone plus EOS. The loss is the token-mean
negative log-likelihood over RESPONSE tokens only (prompt tokens are context, never targets)::

    L = - (1 / N) * sum_{i in batch} sum_{t < |y_i|} log p_theta(y_i,t | x_i, y_i,<t),    N = sum_i |y_i|

Each optimizer step takes ``train_batch_size`` pairs, split round-robin over the data-parallel ranks (Ray actors
of :class:`SFTWorker`, ZeRO-0..3 over gloo/nccl) and, inside a rank, into token-budget micro-batches. ``N`` counts
the whole global batch, so every micro-batch's loss is an exact share of ``L``; each rank multiplies its share by
the world size because DeepSpeed averages gradients over ranks (as the PPO workers do). At the end the full
weights are gathered and written as a Hugging Face folder (config, safetensors, generation config, tokenizer)
that transformers and vLLM load, plus ``reasonrl_sft.json`` (config and final losses).

Logs (``log_dir/exp_name/``, the RL tracker's layout): ``sft/loss``, ``sft/lr``, ``sft/grad_norm``,
``eval/<eval_name>/loss`` (token-mean NLL on the held-out pairs), ``time/step``; ``summary.png`` at the end.
Command line: ``python -m playground.sft_arith [field=value ...]``.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from loguru import logger

from reasonrl.distributed.ppo_workers import WorkerConfig, _ModelWorker
from reasonrl.utils.rng import derive_seed

Sample = tuple[list[int], list[int]]  # (prompt token ids, response token ids incl. EOS)


@dataclasses.dataclass
class SFTConfig:
    """One SFT run. Data comes from ``rows`` (in memory), ``generator`` (a callable returning rows) or
    ``train_data`` (sources of ``reasonrl.data.load_rows``: built-in names or files), in that order of precedence.
    Held-out loss uses ``eval_rows`` / ``eval_data``, else the last ``eval_frac`` of the training rows."""

    pretrain: str = "tiny"  # model folder, or 'tiny' / 'smollm2' (reasonrl.models)
    output_dir: str = "ckpt/sft"  # the exported HF folder
    overwrite: bool = False  # replace an existing output_dir (else: refuse before training)
    exp_name: str = "sft"
    log_dir: str = "logs"
    seed: int = 42
    # data
    rows: list[dict] | None = None
    generator: Callable[[], Iterable[dict]] | None = None
    train_data: list[str] = dataclasses.field(default_factory=list)
    eval_rows: list[dict] | None = None
    eval_data: list[str] = dataclasses.field(default_factory=list)
    eval_frac: float = 0.02
    eval_max_rows: int = 512
    prompt_template: str = "plain"  # plain / chat / orz / a jinja2 file (as the RL config's)
    response_field: str = "answer"  # the target text of a row; EOS is appended
    max_prompt_len: int = 256
    max_response_len: int = 256  # longer targets (with EOS) are dropped and counted
    # optimisation
    lr: float = 1e-3
    lr_schedule: str = "cosine"  # constant / linear / cosine (to 0 at the last step)
    warmup_steps: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    num_epochs: int = 1
    max_steps: int | None = None  # stop after this many optimizer steps (cycling the data if needed)
    train_batch_size: int = 64  # pairs per optimizer step, over all ranks
    max_tokens_per_micro_batch: int = 8192
    # resources
    num_nodes: int = 1
    devices_per_node: int = 1  # data-parallel ranks = num_nodes x devices_per_node
    zero_stage: int = 3
    bf16: bool = False
    gradient_checkpointing: bool = False
    attn_implementation: str = "sdpa"
    device: str = "auto"  # auto / cpu / gpu
    ray_address: str | None = None
    cpus_per_bundle: float = 1.0
    # logging
    log_interval: int = 10
    eval_interval: int = 100  # 0 = only before and after training
    progress_bar: bool = True

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.devices_per_node

    def with_overrides(self, overrides: dict[str, Any]) -> SFTConfig:
        """A copy with ``field=value`` overrides parsed by field type (as ``BasePPOExpConfig.with_overrides``)."""
        from reasonrl.config.overrides import apply_overrides

        return apply_overrides(self, overrides)

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


@dataclasses.dataclass
class SFTResult:
    output_dir: Path
    steps: int
    train_loss_first: float
    train_loss_last: float  # mean of the last min(10, steps) steps
    eval_loss_before: float
    eval_loss_after: float
    train_seconds: float  # optimisation only (no start-up, no export)
    total_seconds: float
    num_train_pairs: int
    dropped_pairs: int


# ---------------------------------------------------------------------------------------------------- data
def encode_pairs(
    rows: Sequence[dict],
    tokenizer,
    template,
    *,
    response_field: str = "answer",
    max_prompt_len: int = 256,
    max_response_len: int = 256,
) -> tuple[list[Sample], int]:
    """``(samples, dropped)``: per row ``(prompt_ids, response_ids + [eos])``, tokenized as the RL trainer tokenizes
    prompts (``template.render(row)``, no special tokens, left-truncated). Rows whose response would exceed
    ``max_response_len`` tokens (EOS included) are dropped and counted."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id: SFT targets must end with EOS so generation stops")
    samples, dropped = [], 0
    for row in rows:
        prompt = tokenizer(template.render(row), add_special_tokens=False).input_ids[-max_prompt_len:]
        response = tokenizer(str(row[response_field]), add_special_tokens=False).input_ids + [eos]
        if len(response) > max_response_len or not prompt:
            dropped += 1
            continue
        samples.append((list(prompt), response))
    return samples, dropped


def _load(sources: Sequence[str]) -> list[dict]:
    from reasonrl.data import load_rows

    return [row for source in sources for row in load_rows(source).rows]


def split_rows(cfg: SFTConfig) -> tuple[list[dict], list[dict]]:
    """``(train_rows, eval_rows)`` from the config's data fields (see :class:`SFTConfig`)."""
    if cfg.rows is not None:
        rows = list(cfg.rows)
    elif cfg.generator is not None:
        rows = list(cfg.generator())
    else:
        rows = _load(cfg.train_data)
    if not rows:
        raise ValueError("SFT has no training rows: set rows, generator or train_data")
    if cfg.eval_rows is not None:
        eval_rows = list(cfg.eval_rows)
    elif cfg.eval_data:
        eval_rows = _load(cfg.eval_data)
    else:
        n = int(len(rows) * cfg.eval_frac)
        rows, eval_rows = (rows[:-n], rows[-n:]) if n else (rows, [])
    return rows, eval_rows[: cfg.eval_max_rows]


def batch_order(num_samples: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """Sample indices of each optimizer step: epochs of a seeded shuffle (epoch ``e`` uses ``derive_seed(seed, e)``),
    cut into full batches (the last partial batch of an epoch is dropped), until ``steps`` batches."""
    if num_samples < batch_size:
        raise ValueError(f"train_batch_size={batch_size} exceeds the {num_samples} training pairs")
    out: list[list[int]] = []
    epoch = 0
    while len(out) < steps:
        order = list(range(num_samples))
        random.Random(derive_seed(seed, "sft-epoch", epoch)).shuffle(order)
        out += [order[i : i + batch_size] for i in range(0, num_samples - batch_size + 1, batch_size)]
        epoch += 1
    return out[:steps]


# ---------------------------------------------------------------------------------------------------- worker
class SFTWorker(_ModelWorker):
    """One DeepSpeed rank of the SFT model: response-only NLL, one optimizer step per call, HF export."""

    def setup(self, config: WorkerConfig) -> int:
        from reasonrl.distributed import deepspeed_engine as ds

        self.config = config
        torch.manual_seed(config.seed)
        model, self._hf_ds_config = ds.load_causal_lm(
            config.model_path, self._train_ds_config(), attn_implementation=config.attn_implementation
        )
        self._build_trainable(model)
        return sum(p.numel() for p in self.engine.module.parameters())

    def _nll(self, samples: Sequence[Sample]) -> tuple[torch.Tensor, int]:
        """Summed NLL of the response tokens of one micro-batch and their count."""
        from reasonrl.models import response_logprobs

        batch = self._padded(samples)
        logprobs, _ = response_logprobs(self.engine, batch, 1.0)  # [batch, T], zeros at padding
        return -(logprobs * batch.action_mask).sum(), int(batch.action_mask.sum())

    def train_step(self, samples: Sequence[Sample], global_tokens: int) -> dict[str, float]:
        """One optimizer step over this rank's share of the global batch (collective). ``global_tokens`` = N,
        the response tokens of the whole global batch. Returns this rank's ``loss_share`` (its part of L; the
        shares of all ranks sum to L), ``tokens``, ``grad_norm`` and the ``lr`` used."""
        from reasonrl.distributed import deepspeed_engine as ds

        self.engine.train()
        micro_batches = self._micro_batches(samples)
        loss_share, tokens = 0.0, 0
        for i, (idx, mb) in enumerate(micro_batches):
            nll, n = self._nll(mb)
            loss = nll / global_tokens * (1.0 if idx else 0.0)  # dummy micro-batches keep collectives aligned
            ds.backward(self.engine, loss * self.world_size, is_last=i == len(micro_batches) - 1)
            loss_share += float(loss.detach())
            tokens += n if idx else 0
        lr = ds.step(self.engine)
        return {"loss_share": loss_share, "tokens": tokens, "grad_norm": ds.grad_norm(self.engine), "lr": lr}

    @torch.no_grad()
    def eval_nll(self, samples: Sequence[Sample]) -> tuple[float, int]:
        """``(summed response NLL, response tokens)`` of this rank's samples (collective)."""
        self.engine.eval()
        total, tokens = 0.0, 0
        for idx, mb in self._micro_batches(samples):
            nll, n = self._nll(mb)
            if idx:
                total, tokens = total + float(nll), tokens + n
        return total, tokens

    def export_hf(self, out_dir: str) -> str | None:
        """Gather the full weights (collective) and write the HF folder on rank 0."""
        from reasonrl.distributed import deepspeed_engine as ds

        path = ds.export_hf(self.engine, out_dir)
        return None if path is None else str(path)


# ---------------------------------------------------------------------------------------------------- driver
class SFTTrainer:
    """Drives the :class:`SFTWorker` group: batches, evaluation, logging, export. Use :func:`train_sft`."""

    def __init__(self, cfg: SFTConfig, group, tokenizer, train: list[Sample], evals: list[Sample], tracker):
        self.cfg, self.group, self.tokenizer, self.tracker = cfg, group, tokenizer, tracker
        self.train, self.evals = train, evals
        per_epoch = len(train) // cfg.train_batch_size
        self.total_steps = cfg.max_steps or cfg.num_epochs * per_epoch
        self.order = batch_order(len(train), cfg.train_batch_size, self.total_steps, cfg.seed)

    def _shards(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        world = self.group.world_size
        return [list(samples[r::world]) for r in range(world)]

    def evaluate(self) -> float:
        """Token-mean response NLL on the held-out pairs (nan without any)."""
        if not self.evals:
            return float("nan")
        parts = self.group.call_sharded("eval_nll", self._shards(self.evals))
        return sum(p[0] for p in parts) / max(sum(p[1] for p in parts), 1)

    def fit(self) -> tuple[list[float], float, float, float]:
        """Train ``total_steps`` steps. Returns (train losses, eval loss before, eval loss after, seconds)."""
        cfg, eval_key = self.cfg, "eval/heldout/loss"
        before = self.evaluate()
        self.tracker.log_metrics(0, {eval_key: before})
        losses: list[float] = []
        start = time.perf_counter()
        for step, idx in enumerate(self.order, start=1):
            step_start = time.perf_counter()
            batch = [self.train[i] for i in idx]
            global_tokens = sum(len(r) for _, r in batch)
            parts = self.group.call_sharded("train_step", self._shards(batch), global_tokens)
            losses.append(sum(p["loss_share"] for p in parts))
            m = {"sft/loss": losses[-1], "sft/lr": parts[0]["lr"], "sft/grad_norm": parts[0]["grad_norm"]}
            if cfg.eval_interval and step % cfg.eval_interval == 0 and step != self.total_steps:
                m[eval_key] = self.evaluate()
            m["time/step"] = time.perf_counter() - step_start
            m["perf/tokens_per_s_train_policy"] = global_tokens / m["time/step"]
            if step % cfg.log_interval == 0 or eval_key in m:
                self.tracker.log_metrics(step, m)
            self.tracker.advance(step, {"loss": losses[-1]})
        seconds = time.perf_counter() - start
        after = self.evaluate()
        self.tracker.log_metrics(self.total_steps, {eval_key: after})
        return losses, before, after, seconds

    def export(self, out_dir: Path) -> None:
        """Write the HF folder (weights from rank 0's gather, tokenizer from the driver)."""
        self.group.call("export_hf", str(out_dir))
        self.tokenizer.save_pretrained(out_dir)


def _resolve_device(cfg: SFTConfig) -> str:
    if cfg.device != "auto":
        return cfg.device
    return "gpu" if torch.cuda.is_available() else "cpu"


def train_sft(cfg: SFTConfig) -> SFTResult:
    """Run SFT end to end: data -> Ray workers -> training -> HF export to ``cfg.output_dir`` (atomic)."""
    import ray
    from transformers import AutoTokenizer

    from reasonrl.config import BasePPOExpConfig
    from reasonrl.data import get_template
    from reasonrl.distributed.placement import RoleResources, build_placement
    from reasonrl.distributed.ray_cluster import init_ray
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.utils.paths import atomic_directory
    from reasonrl.utils.tracking import Tracker

    total_start = time.perf_counter()
    out_dir = Path(cfg.output_dir).expanduser()
    if out_dir.exists() and not cfg.overwrite:
        raise FileExistsError(f"output_dir {out_dir} exists: pass overwrite=True or choose another folder")
    model_path = BasePPOExpConfig.resolve_model_path(cfg.pretrain)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    template = get_template(cfg.prompt_template, tokenizer=tokenizer)
    train_rows, eval_rows = split_rows(cfg)
    encode = dict(
        response_field=cfg.response_field, max_prompt_len=cfg.max_prompt_len, max_response_len=cfg.max_response_len
    )
    train, dropped = encode_pairs(train_rows, tokenizer, template, **encode)
    evals, _ = encode_pairs(eval_rows, tokenizer, template, **encode)
    if dropped:
        logger.warning(f"SFT: dropped {dropped} pair(s) longer than max_response_len={cfg.max_response_len}")
    logger.info(f"SFT: {len(train)} training pairs, {len(evals)} held-out pairs, model {model_path}")

    started_ray = not ray.is_initialized()
    init_ray(cfg.ray_address)
    plan = group = None
    try:
        plan = build_placement(
            {"policy": RoleResources(cfg.num_nodes, cfg.devices_per_node)},
            device=_resolve_device(cfg),
            cpus_per_bundle=cfg.cpus_per_bundle,
        )
        group = WorkerGroup(SFTWorker, plan["policy"], name="sft")
        trainer_steps = cfg.max_steps or cfg.num_epochs * (len(train) // cfg.train_batch_size)
        worker_cfg = WorkerConfig(
            model_path=model_path,
            zero_stage=cfg.zero_stage,
            bf16=cfg.bf16,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            warmup_steps=cfg.warmup_steps,
            total_steps=max(trainer_steps, cfg.warmup_steps + 1),
            lr_schedule=cfg.lr_schedule,
            grad_clip=cfg.grad_clip,
            gradient_checkpointing=cfg.gradient_checkpointing,
            attn_implementation=cfg.attn_implementation,
            max_tokens_per_micro_batch=cfg.max_tokens_per_micro_batch,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
            seed=cfg.seed,
        )
        group.call("setup", worker_cfg)
        with Tracker(cfg.log_dir, cfg.exp_name, progress_total=trainer_steps, progress_bar=cfg.progress_bar) as tracker:
            tracker.log_table_at_start(json.dumps(cfg.to_dict(), indent=1, default=str))
            trainer = SFTTrainer(cfg, group, tokenizer, train, evals, tracker)
            losses, before, after, seconds = trainer.fit()
            if out_dir.exists():
                shutil.rmtree(out_dir)  # overwrite=True (checked above)
            with atomic_directory(out_dir) as tmp:
                trainer.export(tmp)
                result = SFTResult(
                    output_dir=out_dir,
                    steps=len(losses),
                    train_loss_first=losses[0],
                    train_loss_last=sum(losses[-10:]) / len(losses[-10:]),
                    eval_loss_before=before,
                    eval_loss_after=after,
                    train_seconds=seconds,
                    total_seconds=time.perf_counter() - total_start,
                    num_train_pairs=len(train),
                    dropped_pairs=dropped,
                )
                info = {"config": cfg.to_dict(), "result": dataclasses.asdict(result) | {"output_dir": str(out_dir)}}
                (tmp / "reasonrl_sft.json").write_text(json.dumps(info, indent=1, default=str))
    finally:
        if group is not None:
            group.kill()
        if plan is not None:
            plan.remove()
        if started_ray and not cfg.ray_address:
            ray.shutdown()
    logger.info(
        f"SFT done: {result.steps} steps, train loss {result.train_loss_first:.3f} -> {result.train_loss_last:.3f}, "
        f"held-out loss {before:.3f} -> {after:.3f}, {seconds:.0f} s training; saved {out_dir}"
    )
    return result

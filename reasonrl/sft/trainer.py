"""The SFT driver: data -> a Ray group of :class:`SFTWorker` ranks -> training with held-out loss -> HF export.

    cfg = SFTConfig(pretrain="tiny", rows=rows, output_dir="ckpt/sft_demo", max_steps=200)
    result = train_sft(cfg)          # -> SFTResult; result.output_dir is an HF folder: pretrain=<it> starts RL

Each optimizer step takes ``train_batch_size`` pairs, split round-robin over the data-parallel ranks (ZeRO-0..3
over gloo/nccl) and, inside a rank, into token-budget micro-batches. At the end the full weights are gathered and
written as a Hugging Face folder (config, safetensors, generation config, tokenizer) that transformers and vLLM
load, plus ``reasonrl_sft.json`` (config and result). The folder appears complete or not at all; an existing one
(``overwrite=true``) is replaced only after the new export is complete.

Logs (``log_dir/exp_name/``, the RL tracker's layout): ``sft/loss``, ``sft/lr``, ``sft/grad_norm``,
``eval/heldout/loss`` (token-mean NLL on the held-out pairs), ``time/step``; ``summary.png`` / ``summary.html``.
Checkpoints (``save_interval``): every rank's DeepSpeed states under ``<ckpt_dir>/<exp_name>/step_<n>/``, written
atomically like RL checkpoints; ``resume=auto`` continues from the newest one. The batch order is a function of
the seed and the step, so a resumed run repeats the uninterrupted run's losses exactly (tested).
Command line: ``python -m reasonrl.sft [field=value ...]`` or a recipe, ``python -m playground.sft_arith``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from loguru import logger

from reasonrl.sft.config import NOT_WEIGHT_FIELDS, SFTConfig
from reasonrl.sft.data import Sample, batch_order, encode_pairs, split_rows, trained_tokens

EVAL_KEY = "eval/heldout/loss"
BAND_KEY = "eval/band/accuracy"  # the greedy accuracy on band_data (reasonrl.sft.band)
SFT_CONFIG_FILE = "sft_config.json"  # the config of a checkpoint (its weights-relevant fields are checked on resume)


@dataclasses.dataclass
class SFTResult:
    output_dir: Path
    steps: int  # the global step reached (= total steps)
    resumed_from_step: int  # 0 unless this session continued a checkpoint
    train_loss_first: float  # first step of this session
    train_loss_last: float  # mean of the last min(10, steps) steps
    eval_loss_before: float  # where this session started
    eval_loss_after: float
    train_seconds: float  # optimisation and evaluation (no start-up, no export)
    total_seconds: float
    num_train_pairs: int
    dropped_pairs: int


class SFTTrainer:
    """Drives the :class:`SFTWorker` group: batches, evaluation, logging, checkpoints, export. Use
    :func:`train_sft`."""

    def __init__(self, cfg: SFTConfig, group, tokenizer, train: list[Sample], evals: list[Sample], tracker, ckpts):
        self.cfg, self.group, self.tokenizer, self.tracker, self.checkpoints = cfg, group, tokenizer, tracker, ckpts
        self.train, self.evals = train, evals
        from reasonrl.config import BasePPOExpConfig

        self.model_path = BasePPOExpConfig.resolve_model_path(cfg.pretrain)  # a VLM exports its processor too
        self.total_steps = total_steps(cfg, len(train))
        self.order = batch_order(len(train), cfg.train_batch_size, self.total_steps, cfg.seed)

    def state(self, step: int) -> dict:
        """What a checkpoint records besides the DeepSpeed states (see :func:`run_state`)."""
        return run_state(self.cfg, len(self.train), step)

    def save_checkpoint(self, step: int) -> Path:
        """Every rank's DeepSpeed states (params, optimizer, LR schedule) + the trainer state, committed atomically."""
        from reasonrl.config.model_paths import pin_record
        from reasonrl.utils.checkpoint import save_trainer_state

        staging = self.checkpoints.begin(step)
        try:
            self.group.call("save_checkpoint", str(staging / "model"), "ds")
            save_trainer_state(staging, self.state(step))
            saved = {**pin_record(self.cfg), **self.cfg.to_dict()}  # with what pretrain was given as, if pinned
            (staging / SFT_CONFIG_FILE).write_text(json.dumps(saved, indent=1, default=str))
        except BaseException:
            self.checkpoints.abort(staging)
            raise
        path = self.checkpoints.commit(step, staging, {"exp_name": self.cfg.exp_name})  # also prunes old ones
        logger.info(f"SFT checkpoint saved: {path}")
        return path

    def load_checkpoint(self, path: Path) -> int:
        """Restore a checkpoint of THIS run (checked by :func:`check_resume` before Ray started); returns its step."""
        from reasonrl.utils.checkpoint import load_trainer_state

        self.group.call("load_checkpoint", str(path / "model"), "ds")
        step = int(load_trainer_state(path)["global_step"])
        logger.info(f"SFT resumed from {path} at step {step}")
        return step

    def _shards(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        world = self.group.world_size
        return [list(samples[r::world]) for r in range(world)]

    def evaluate(self) -> float:
        """Token-mean response NLL on the held-out pairs (nan without any)."""
        if not self.evals:
            return float("nan")
        parts = self.group.call_sharded("eval_nll", self._shards(self.evals))
        return sum(p[0] for p in parts) / max(sum(p[1] for p in parts), 1)

    def fit(self, start_step: int = 0, band=None) -> tuple[list[float], float, float, float]:
        """Train steps ``start_step + 1 .. total_steps`` (0: from the beginning; else after a resumed checkpoint),
        or until ``band`` (an :class:`reasonrl.sft.band.AccuracyBand`) is entered: then ``total_steps`` becomes that
        step. Returns (train losses of this session, eval loss before them, eval loss after, seconds)."""
        cfg = self.cfg
        self.tracker.set_phase("eval")  # what the run is doing, next to the progress bar
        before = self.evaluate()
        if start_step == 0:
            self.tracker.log_metrics(0, {EVAL_KEY: before})
        losses: list[float] = []
        start = time.perf_counter()
        for step, idx in enumerate(self.order[start_step:], start=start_step + 1):
            step_start = time.perf_counter()
            batch = [self.train[i] for i in idx]
            global_tokens = sum(trained_tokens(s) for s in batch)
            parts = self.group.call_sharded("train_step", self._shards(batch), global_tokens)
            losses.append(sum(p["loss_share"] for p in parts))
            m = {"sft/loss": losses[-1], "sft/lr": parts[0]["lr"], "sft/grad_norm": parts[0]["grad_norm"]}
            m["time/step"] = time.perf_counter() - step_start
            m["perf/tokens_per_s_train_policy"] = global_tokens / m["time/step"]
            if band is not None and band.due(step):
                self.tracker.set_phase("band")
                m[BAND_KEY] = band.measure(step)
                if band.result.entered:
                    self.total_steps = step  # the run ends here (the schedule was planned for max_steps)
            if cfg.eval_interval and step % cfg.eval_interval == 0 and step != self.total_steps:
                self.tracker.set_phase("eval")
                m[EVAL_KEY] = self.evaluate()
            if step % cfg.log_interval == 0 or EVAL_KEY in m or BAND_KEY in m or step == self.total_steps:
                self.tracker.log_metrics(step, m)
            self.tracker.advance(step, {"loss": losses[-1]})
            if cfg.save_interval and step % cfg.save_interval == 0 and step != self.total_steps:
                self.tracker.set_phase("checkpoint")
                self.save_checkpoint(step)
            if step == self.total_steps:
                break
        self.tracker.set_phase("eval")
        after = self.evaluate()
        seconds = time.perf_counter() - start
        self.tracker.log_metrics(self.total_steps, {EVAL_KEY: after})
        return losses, before, after, seconds

    def export(self, out_dir: Path) -> None:
        """Write the HF folder (weights from rank 0's gather, tokenizer from the driver)."""
        self.tracker.set_phase("export")
        self.group.call("export_hf", str(out_dir))
        from reasonrl.models.vision import save_tokenizer_files

        save_tokenizer_files(self.tokenizer, self.model_path, out_dir)  # a VLM: its processor too


def total_steps(cfg: SFTConfig, num_pairs: int) -> int:
    return cfg.max_steps or cfg.num_epochs * (num_pairs // cfg.train_batch_size)


def run_state(cfg: SFTConfig, num_pairs: int, step: int) -> dict:
    """The trainer state of a checkpoint: the step, plus what makes a resume exact (same weights-relevant config,
    hence the same batch order; same data size and step count; same world size for the DeepSpeed partitions)."""
    blob = json.dumps(cfg.weights_fingerprint(), sort_keys=True, default=str)
    return {
        "global_step": step,
        "total_steps": total_steps(cfg, num_pairs),
        "num_train_pairs": num_pairs,
        "world_size": cfg.world_size,
        "config_sha1": hashlib.sha1(blob.encode()).hexdigest(),
    }


def check_resume(cfg: SFTConfig, path: Path, num_pairs: int) -> int:
    """The step of checkpoint ``path`` if this run can continue it exactly, else :class:`ConfigError` saying what
    differs: each weights-relevant field (compared with the checkpoint's ``sft_config.json`` by the comparison RL
    resumes use, ``reasonrl.config.resume``; a checkpoint without that file is compared by its config hash), the
    data size, the step count and the world size. Runs before Ray starts and before any log is touched."""
    from reasonrl.config import ConfigError
    from reasonrl.config.resume import config_changes, field_defaults, read_saved_config
    from reasonrl.utils.checkpoint import load_trainer_state

    state = load_trainer_state(path)
    want = run_state(cfg, num_pairs, int(state["global_step"]))
    differ = []
    if (path / SFT_CONFIG_FILE).is_file():
        saved = read_saved_config(path, SFT_CONFIG_FILE)
        changes = config_changes(saved, cfg.to_dict(), defaults=field_defaults(type(cfg)), ignore=NOT_WEIGHT_FIELDS)
        differ += [c.describe() for c in changes]
        want.pop("config_sha1")  # the fields above say what differs; the hash only says that something does
    differ += [f"{k}: checkpoint {state.get(k)!r}, this run {v!r}" for k, v in want.items() if state.get(k) != v]
    if differ:
        raise ConfigError(
            [f"cannot resume from {path}: " + "; ".join(differ)]
            + ["use resume=none (or another exp_name / ckpt_dir) to start afresh, or the config that wrote it"],
            title="resume refused",
        )
    return int(state["global_step"])


def pin_pretrain(cfg: SFTConfig, resume_from: Path | None) -> dict[str, str]:
    """Pin a Hub-id ``pretrain`` in place to its commit (``reasonrl.config.model_paths``): a resume takes the
    commit its checkpoint's ``sft_config.json`` recorded when ``pretrain`` is given as that run gave it, a fresh
    run the commit it resolves to now. Returns ``{"pretrain": pinned id}`` when changed."""
    from reasonrl.config.model_paths import adopt_saved_pins, pin_model_fields
    from reasonrl.config.resume import read_saved_config

    pinned = {}
    if resume_from is not None and (Path(resume_from) / SFT_CONFIG_FILE).is_file():
        pinned = adopt_saved_pins(cfg, read_saved_config(resume_from, SFT_CONFIG_FILE), ("pretrain",))
    return pinned | pin_model_fields(cfg, ("pretrain",))


def _resolve_device(cfg: SFTConfig, cluster_resources: dict[str, float]) -> str:
    """``gpu`` or ``cpu``: ``auto`` asks the Ray cluster (after ``ray.init``), never the driver's own CUDA
    visibility: a GPU-less head node drives GPU workers."""
    if cfg.device != "auto":
        return cfg.device
    return "gpu" if cluster_resources.get("GPU", 0) > 0 else "cpu"


def _encode(cfg: SFTConfig, tokenizer, template, processor=None) -> tuple[list[Sample], list[Sample], int]:
    """Training and held-out samples and the number of dropped training pairs; raises before any worker starts.
    ``processor``: a vision-language model's, which encodes the rows that have images."""
    train_rows, eval_rows = split_rows(cfg)
    encode = dict(
        response_field=cfg.response_field,
        max_prompt_len=cfg.max_prompt_len,
        max_response_len=cfg.max_response_len,
        processor=processor,
    )
    train, dropped = encode_pairs(train_rows, tokenizer, template, where="training data", **encode)
    evals, _ = encode_pairs(eval_rows, tokenizer, template, where="held-out data", **encode)
    from reasonrl.config import ConfigError

    if not train:
        raise ConfigError(f"all {dropped} training pairs exceed max_response_len={cfg.max_response_len}: raise it")
    if dropped:
        logger.warning(f"SFT: dropped {dropped} pair(s) longer than max_response_len={cfg.max_response_len}")
    if len(train) < cfg.train_batch_size:
        raise ConfigError(f"train_batch_size={cfg.train_batch_size} exceeds the {len(train)} training pairs")
    return train, evals, dropped


def train_sft(cfg: SFTConfig) -> SFTResult:
    """Run SFT end to end (validated first; data problems are raised before Ray starts)."""
    import ray
    from transformers import AutoTokenizer

    from reasonrl.config import BasePPOExpConfig, ConfigError, register_offline_builders
    from reasonrl.data import get_template
    from reasonrl.distributed.model_check import ModelsNotOnNodesError, check_models_on_nodes
    from reasonrl.distributed.placement import RoleResources, build_placement
    from reasonrl.distributed.ppo_workers import WorkerConfig
    from reasonrl.distributed.ray_cluster import RayClusterError, init_ray
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.models import attention_summary, named
    from reasonrl.models.vision import is_vision_model, load_processor
    from reasonrl.sft.band import AccuracyBand, band_validation_rows
    from reasonrl.sft.worker import SFTWorker
    from reasonrl.utils.checkpoint import CheckpointManager
    from reasonrl.utils.paths import atomic_directory
    from reasonrl.utils.tracking import Tracker

    total_start = time.perf_counter()
    cfg.validate()
    out_dir = Path(cfg.output_dir).expanduser()
    checkpoints = CheckpointManager.for_run(cfg)
    resume_from = checkpoints.resolve_resume(cfg.resume)  # a bad resume path fails here, before Ray
    register_offline_builders(named.BUILDERS)  # pretrain=tiny-demo & co. (a warm start's: its runner registered it)
    pin_pretrain(cfg, resume_from)  # a Hub id -> owner/name@<commit> (a resume: the checkpoint's commit)
    model_path = BasePPOExpConfig.resolve_model_path(cfg.pretrain)
    if cfg.lora_rank:  # the targets exist in the model: before Ray, on a meta-device model
        from reasonrl.models.lora import lora_problems

        problems = lora_problems(model_path, cfg.lora_target_modules)
        if problems:
            raise ConfigError(problems, title="LoRA adapters cannot be added")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    template = get_template(cfg.prompt_template, tokenizer=tokenizer)
    processor = load_processor(model_path) if is_vision_model(model_path) else None
    train, evals, dropped = _encode(cfg, tokenizer, template, processor)
    band_rows = band_validation_rows(cfg)  # before Ray: a missing or empty band_data fails here
    steps = total_steps(cfg, len(train))
    start_step = check_resume(cfg, resume_from, len(train)) if resume_from else 0
    if cfg.save_interval:  # this run saves: checkpoints of another history are moved aside (not deleted)
        checkpoints.start_from(resume_from)
    logger.info(f"SFT: {len(train)} training pairs, {len(evals)} held-out pairs, {steps} steps, model {model_path}")

    started_ray = not ray.is_initialized()
    try:
        init_ray(cfg.ray_address)
    except RayClusterError as err:  # distributed/ has its own error type; here it is a config error on ray_address
        raise ConfigError(err.problems, title=err.title) from err
    plan = group = None
    try:
        plan = build_placement(
            {"policy": RoleResources(cfg.num_nodes, cfg.devices_per_node)},
            device=_resolve_device(cfg, ray.cluster_resources()),
            cpus_per_bundle=cfg.cpus_per_bundle,
        )
        source = BasePPOExpConfig.model_source(cfg.pretrain)  # each rank resolves a Hub id on its own node
        try:
            check_models_on_nodes(plan, {"policy": source})  # every node has it, before any rank starts
        except ModelsNotOnNodesError as err:
            raise ConfigError(err.problems, title="models missing on some nodes") from None
        group = WorkerGroup(SFTWorker, plan["policy"], name="sft")
        worker_cfg = WorkerConfig(
            model_path=source,
            zero_stage=cfg.zero_stage,
            bf16=cfg.bf16,
            lr=cfg.lr,
            weight_decay=cfg.weight_decay,
            warmup_steps=cfg.warmup_steps,
            total_steps=max(steps, cfg.warmup_steps + 1),
            lr_schedule=cfg.lr_schedule,
            grad_clip=cfg.grad_clip,
            gradient_checkpointing=cfg.gradient_checkpointing,
            attn_implementation=cfg.attn_implementation,
            offload_optimizer=cfg.offload_optimizer,
            max_tokens_per_micro_batch=cfg.max_tokens_per_micro_batch,
            packing="on" if cfg.packing else "off",  # wherever the backend the workers resolve supports it
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
            seed=cfg.seed,
            lora_rank=cfg.lora_rank,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            lora_target_modules=list(cfg.lora_target_modules),
        )
        group.call("setup", worker_cfg, cfg.torch_threads)
        attention = attention_summary("sft", group.call("attention"))  # what the workers resolved for themselves
        tracker = Tracker(
            cfg.log_dir,
            cfg.exp_name,
            progress_total=steps,
            progress_bar=cfg.progress_bar,
            start_step=start_step + 1 if resume_from else 0,  # a resumed run drops rows logged after its checkpoint
            tracker=cfg.tracker,
            wandb_project=cfg.wandb_project,
            wandb_run_name=cfg.wandb_run_name,
            run_config=cfg.to_dict(),
        )
        with tracker:
            logger.info(attention)  # inside: the run's train.log has it
            tracker.log_table_at_start(json.dumps(cfg.to_dict(), indent=1, default=str))
            trainer = SFTTrainer(cfg, group, tokenizer, train, evals, tracker, checkpoints)
            if resume_from:
                trainer.load_checkpoint(resume_from)
            band = AccuracyBand(cfg, band_rows, trainer.export) if band_rows is not None else None
            losses, before, after, seconds = trainer.fit(start_step, band)
            result = SFTResult(
                output_dir=out_dir,
                steps=trainer.total_steps,
                resumed_from_step=start_step,
                train_loss_first=losses[0],
                train_loss_last=sum(losses[-10:]) / len(losses[-10:]),
                eval_loss_before=before,
                eval_loss_after=after,
                train_seconds=seconds,
                total_seconds=0.0,  # set below
                num_train_pairs=len(train),
                dropped_pairs=dropped,
            )
            with atomic_directory(out_dir, replace=True) as tmp:  # overwrite=true: the old folder goes last
                trainer.export(tmp)
                if band is not None:
                    band.write(tmp)
                if not (tmp / "config.json").is_file() or not list(tmp.glob("*.safetensors")):
                    raise RuntimeError(
                        f"the export in {tmp} has no config.json / safetensors: rank 0 wrote it on another node; put "
                        "output_dir on a filesystem every node sees (the previous output_dir, if any, is untouched)"
                    )
                result.total_seconds = time.perf_counter() - total_start  # up to the export
                info = {"config": cfg.to_dict(), "result": dataclasses.asdict(result) | {"output_dir": str(out_dir)}}
                (tmp / "reasonrl_sft.json").write_text(json.dumps(info, indent=1, default=str))
    finally:
        if group is not None:
            group.kill()
        if plan is not None:
            plan.remove()
        if started_ray and not cfg.ray_address:
            ray.shutdown()
    result.total_seconds = time.perf_counter() - total_start
    logger.info(
        f"SFT done: {result.steps} steps, train loss {result.train_loss_first:.3f} -> {result.train_loss_last:.3f}, "
        f"held-out loss {before:.3f} -> {after:.3f}, {seconds:.0f} s training; saved {out_dir}"
    )
    return result


def run_sft_recipe(cfg_cls: type[SFTConfig] = SFTConfig, argv: Sequence[str] | None = None) -> SFTResult:
    """Entry point of an SFT recipe: ``python -m playground.sft_<name> [field=value ...]``. A bad config or bad
    data prints what to fix and exits with status 2 before any worker starts."""
    from reasonrl.config import ConfigError
    from reasonrl.data import DataFormatError

    try:
        cfg = cfg_cls.from_cli(argv)
        cfg.validate()
        result = train_sft(cfg)
    except (ConfigError, DataFormatError) as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"\nSFT {cfg.exp_name}: {result.steps} steps in {result.train_seconds:.0f} s | held-out loss "
        f"{result.eval_loss_before:.3f} -> {result.eval_loss_after:.3f} | model: {result.output_dir} "
        f"(use pretrain={result.output_dir}) | curves: {Path(cfg.log_dir) / cfg.exp_name / 'summary.png'}"
    )
    return result

"""Ray actors for the PPO roles, one DeepSpeed rank each: policy, reference, critic and reward model.

Workers compute; the trainer orchestrates. Every method that runs a forward pass is *collective* over the role's
data-parallel group (ZeRO-3 gathers parameters layer by layer during the forward), so the driver calls it on all
ranks at once, each with its own shard, and every rank runs the same number of micro-batches: a rank with fewer
samples repeats a zero-weighted micro-batch (see :func:`equalised_micro_batches`).

Math lives in ``reasonrl.algos`` (losses, aggregation, KL) and ``reasonrl.models`` (log-probs, values, batching);
DeepSpeed calls live in ``reasonrl.distributed.deepspeed_engine``.

Data plane: the forward passes take a :class:`reasonrl.dataplane.experience.RaggedShard` of token ids and return flat
per-response-token outputs (``ragged_logprobs`` / ``ragged_values``). For the updates, each rank receives its shard
of the whole step once (``set_step_data``); every optimizer step then names only the positions of its mini-batch
in that shard (``update_mini_batch``). ``update(experience, ...)`` takes a whole mini-batch directly.

Masks: a micro-batch's forward runs over the response span (``batch.action_mask`` of the padded/packed batch); its
losses, metrics and token counts use the experience's loss mask (``Experience.action_mask``, a subset of the span
that may have holes: tool output), via :func:`_loss_mask`.

Sequence parallelism (``sequence_parallel_size`` > 1, Ulysses): groups of consecutive ranks run each member's
micro-batches together, one "group round" per member (``reasonrl.distributed.sp_rounds``); at 1 nothing changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
from loguru import logger

from reasonrl.algos.loss_settings import PolicyLossConfig, PolicyStepCoefs, ValueLossConfig
from reasonrl.dataplane.experience import Experience, RaggedShard, Sample, flatten_padded
from reasonrl.distributed import deepspeed_engine as ds
from reasonrl.distributed import hf_export, sp_rounds
from reasonrl.distributed.attention_choice import resolve_here
from reasonrl.distributed.ds_config import build_ds_config
from reasonrl.distributed.optim_setup import make_lr_scheduler
from reasonrl.distributed.platform import dist_backend
from reasonrl.distributed.workers import DistributedWorker
from reasonrl.models.vision import VisionInputs, is_vision_model
from reasonrl.utils.hub import ModelNotOnNodeError, local_model_folder


@dataclasses.dataclass
class WorkerConfig:
    """How one role's model is loaded and trained (the experiment config maps onto this)."""

    # A local folder, or a Hub id (pinned: owner/name@<commit>) that each rank resolves in its own node's HF cache
    # right before loading (reasonrl.utils.hub.local_model_folder).
    model_path: str
    zero_stage: int = 3
    bf16: bool = False
    lr: float = 1e-6
    weight_decay: float = 0.0
    warmup_steps: int = 0
    total_steps: int = 1000
    lr_schedule: str = "constant"
    grad_clip: float = 1.0
    gradient_checkpointing: bool = False
    # the user's choice, unresolved: each worker resolves "auto" for its own placement (_ModelWorker._configure)
    attn_implementation: str = "sdpa"
    offload_params: bool = False
    offload_optimizer: bool = False
    max_tokens_per_micro_batch: int = 8192
    # padding-free micro-batches, decided by each worker for the backend it resolved (reasonrl.models.decide_packing):
    # "off", "auto" (only where it pays: flash-attention), "on" (wherever the backend keeps sequences apart)
    packing: str = "off"
    pad_token_id: int = 0
    seed: int = 0
    # LoRA adapters on the policy (reasonrl.models.lora); 0 = every weight trains
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = dataclasses.field(default_factory=lambda: ["all-linear"])
    freeze_vision_tower: bool = False  # a vision-language policy: its image encoder does not train
    # Ulysses: ranks per sequence (groups of consecutive ranks run each micro-batch together; sp_rounds); 1 = off
    sequence_parallel_size: int = 1
    # the policy's only: the reference's settings when each policy rank also holds the frozen reference
    # (reference_process, reasonrl.config.reference_process); None = a reference role of its own, or none
    reference: WorkerConfig | None = None

    def lora_settings(self):
        from reasonrl.models.lora import LoraSettings

        if not self.lora_rank:
            return None
        targets = tuple(self.lora_target_modules)
        return LoraSettings(self.lora_rank, self.lora_alpha, self.lora_dropout, targets)


def equalised_micro_batches(
    samples: Sequence[Sample], max_tokens: int, device="cpu", *, padded: bool = False
) -> list[list[int]]:
    """Token-budget micro-batches of this rank, padded to the group's maximum count.

    The budget counts the tokens of the layout that runs (``padded``: the ``[count, P+T]`` grid of
    :func:`pad_batch`, whose padding on long chains of thought can be several times the real tokens, so padded
    micro-batches group samples of similar length, :func:`reasonrl.models.plan_micro_batches`; else the packed
    row, in batch order). Ranks agree on the count with an all-reduce (MAX). Missing micro-batches are empty lists: the
    caller runs a zero-weighted forward on a dummy sample so the collective parameter gathers of every rank line up.
    """
    import torch.distributed as dist

    from reasonrl.models import plan_micro_batches

    lengths = [len(p) + len(r) for p, r in samples]
    prompts = [len(p) for p, _ in samples]
    batches = plan_micro_batches(lengths, max_tokens, padded=padded, prompt_lengths=prompts) if samples else []
    count = torch.tensor([len(batches)], dtype=torch.long, device=device)  # NCCL reduces device tensors only
    if dist.is_initialized():
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return batches + [[] for _ in range(int(count.item()) - len(batches))]


DUMMY_SAMPLE: Sample = ([0, 0], [0])
NO_STEP_COEFS = PolicyStepCoefs()  # no KL loss, no entropy bonus
AGG_KWARGS = ("agg_mode", "global_num_tokens", "global_num_seqs", "norm_constant")


class _ModelWorker(DistributedWorker):
    """Shared plumbing: load under the configured ZeRO stage, forward over equalised micro-batches."""

    config: WorkerConfig
    attn_implementation: str | None = None  # resolved by _configure, on this worker
    packing: bool = False  # whether this worker's micro-batches are packed (decided by _configure)
    vision = None  # a vision-language model's VisionInputs (decided by _configure)
    sp_group = None  # this rank's Ulysses SP process group (sequence_parallel_size > 1), set at setup

    def _configure(self, config: WorkerConfig) -> None:
        """Keep ``config`` and decide HERE what the driver cannot know (``attention_choice.resolve_here``):
        ``attn_implementation=auto`` from this worker's placement, dtype and whether ``flash_attn`` imports on this
        node, then packing from the resolved backend. An explicit ``flash_attention_2`` that cannot run here
        fails here, naming the node."""
        self.config = config
        self._attention = resolve_here(
            config.attn_implementation, config.bf16, config.packing, f"{type(self).__name__} rank {self.rank}"
        )
        self.attn_implementation, self.packing = self._attention["attn_implementation"], self._attention["packing"]
        self.vision = None  # a vision-language model's pixel inputs (reasonrl.models.vision), None for a text model
        try:
            folder = local_model_folder(config.model_path)
        except ModelNotOnNodeError:
            folder = None  # loading the model names the problem
        if folder is not None and is_vision_model(folder):
            self.vision = VisionInputs(folder)
            self._vision_dummy = self.vision.dummy_sample(config.pad_token_id)
            if self.packing:
                logger.info(f"{type(self).__name__} rank {self.rank}: a vision-language model; micro-batches padded")
            self.packing = False  # 3-D rotary positions (Qwen2-VL) are per sequence: VLM batches are never packed

    def attention(self) -> dict[str, Any]:
        """What this worker runs: the backend it resolved, whether it packs, its device and node (the driver logs
        it: ``reasonrl.models.attention_summary``)."""
        sp = {} if self.sp_group is None else {"sequence_parallel_ranks": self.config.sequence_parallel_size}
        return self._attention | {"packing": self.packing} | sp

    def _micro_batches(
        self, samples: Sequence[Sample], padded: bool | None = None, images: Sequence | None = None
    ) -> list[tuple[list[int], list[Sample], list | None]]:
        """``(indices, samples, images)`` per micro-batch, planned for the layout :meth:`_batch` builds
        (``padded=True``: for a caller that always pads, the reward model). ``images``: each sample's images (a
        vision-language model), cut the same way; None for text. A zero-weighted dummy micro-batch of a call with
        images holds an image too, so that every rank runs the vision tower (ZeRO-3 gathers its layers
        collectively)."""
        padded = not self.packing if padded is None else padded
        with_images = images is not None and self.vision is not None
        out = []
        for idx in equalised_micro_batches(samples, self.config.max_tokens_per_micro_batch, self.device, padded=padded):
            if idx:
                out.append((idx, [samples[i] for i in idx], [images[i] for i in idx] if with_images else None))
            elif with_images:
                dummy, dummy_images = self._vision_dummy
                out.append((idx, [dummy], [dummy_images]))
            else:
                out.append((idx, [DUMMY_SAMPLE], None))
        return out

    def _batch(self, samples: Sequence[Sample], images: Sequence | None = None):
        """The micro-batch layout: packed (one row, no padding; with ``cu_seqlens`` for the forward on
        flash-attention) when this worker packs, else padded; a vision-language model's batch carries the pixel
        inputs of ``images`` (each sample's images; None: a text-only forward, e.g. the weight-sync probe)."""
        from reasonrl.models import pack_batch, pad_batch
        from reasonrl.models.attention import is_flash

        if self.packing:
            return pack_batch(samples, flash_varlen=is_flash(self.attn_implementation)).to(self.device)
        batch = pad_batch(samples, self.config.pad_token_id)
        if self.vision is not None and images is not None:
            positions = None if self.vision.rope_positions_from_model else batch.position_ids
            batch = dataclasses.replace(batch, vision=self.vision(images, batch.input_ids), position_ids=positions)
        return batch.to(self.device)

    def _setup_sequence_parallel(self, model) -> None:
        """Ulysses at setup (``sequence_parallel_size`` > 1): ``model``, whose attention runs, switched and the SP
        groups created (``sp_rounds.setup_sequence_parallel``); a no-op at 1."""
        self.sp_group = sp_rounds.setup_sequence_parallel(self, model)

    def _forward_rounds(self, samples: Sequence[Sample], images: Sequence | None = None):
        """``(indices, samples, images)`` per forward: the micro-batches (:meth:`_micro_batches`), or under SP their
        group rounds, ``indices`` empty for a round whose outputs this rank does not keep."""
        micro_batches = self._micro_batches(samples, images=images)
        if self.sp_group is None:
            yield from micro_batches
            return
        for r in sp_rounds.group_rounds(micro_batches, self.sp_group):
            yield (r.payload if r.own and r.payload else []), r.samples, None

    def _update_rounds(self, experience: Experience):
        """``(batch, mb, own, last)`` per forward/backward of an update: the micro-batch's batch, its Experience
        slice (None: a zero-weighted dummy), whether its metrics are this rank's, whether it ends the accumulation.
        Under SP: the group rounds, the slices exchanged within the group (``sp_rounds``)."""
        micro_batches = self._micro_batches(experience.samples, images=experience.images)
        if self.sp_group is None:
            for i, (idx, samples, images) in enumerate(micro_batches):
                batch = self._batch(samples, images)
                mb = experience.select(idx, batch.num_actions) if idx else None
                yield batch, mb, True, i == len(micro_batches) - 1
            return

        def payload(idx, samples):
            return experience.select(idx, self._batch(samples).num_actions)

        for r in sp_rounds.group_rounds(micro_batches, self.sp_group, payload):
            yield self._batch(r.samples), r.payload, r.own, r.last

    def _logprobs(self, batch, temperature: float, with_entropy: bool, engine=None):
        """``response_logprobs`` of ``engine`` (default: this worker's engine) on ``batch``, or its SP form over the
        group."""
        from reasonrl.models import response_logprobs
        from reasonrl.models.sequence_parallel import sp_response_logprobs

        engine = self.engine if engine is None else engine
        if self.sp_group is None:
            return response_logprobs(engine, batch, temperature, with_entropy)
        return sp_response_logprobs(engine, batch, self.sp_group, temperature, with_entropy)

    def _values(self, batch):
        """``response_values`` of this worker's critic engine on ``batch``, or its SP form over the group."""
        from reasonrl.models import response_values
        from reasonrl.models.sequence_parallel import sp_response_values

        if self.sp_group is None:
            return response_values(self.engine, batch)
        return sp_response_values(self.engine, batch, self.sp_group)

    @property
    def device(self) -> torch.device:
        return self.engine.device if self.engine is not None else torch.device("cpu")

    # ---------------------------------------------------------------- the step's data, sent once
    def set_step_data(self, shard: RaggedShard, step: int) -> int:
        """Keep this rank's shard of step ``step`` (token ids and per-token fields) for the step's mini-batches.
        Replaces the previous step's. Returns the number of samples."""
        self._step_data = (step, shard)
        return len(shard)

    def update_mini_batch(
        self, indices: Sequence[int], step: int, cfg, global_tokens: int, global_seqs: int, coefs=None
    ) -> dict[str, float]:
        """:meth:`update` over the samples ``indices`` (positions in the shard :meth:`set_step_data` kept for
        ``step``; possibly none: the rank still takes part in the collective step). Collective. ``coefs``: the
        policy's :class:`PolicyStepCoefs` of this step (None for the critic, whose loss has none)."""
        held = getattr(self, "_step_data", None)
        if held is None or held[0] != step:
            raise RuntimeError(f"update_mini_batch: no data for step {step} (set_step_data first)")
        # one conversion to a padded Experience; the micro-batches then only slice it
        experience = held[1].subset(indices).to_experience()
        per_step = () if coefs is None else (coefs,)
        return self.update(experience, cfg, global_tokens, global_seqs, *per_step)

    def _train_ds_config(self, micro_batch_size: int = 1) -> dict[str, Any]:
        c = self.config
        return build_ds_config(
            zero_stage=c.zero_stage,
            bf16=c.bf16,
            world_size=self.world_size,
            micro_batch_size_per_rank=micro_batch_size,
            grad_clip=c.grad_clip,
            offload_optimizer=c.offload_optimizer,
        )

    def _build_trainable(self, model) -> None:
        c = self.config
        if c.gradient_checkpointing:
            ds.enable_gradient_checkpointing(model)
        ds_config = self._train_ds_config()
        optimizer = ds.make_optimizer(model, lr=c.lr, weight_decay=c.weight_decay, ds_config=ds_config)
        scheduler = make_lr_scheduler(optimizer, c.warmup_steps, c.total_steps, schedule=c.lr_schedule)
        self.engine = ds.initialize(model, ds_config, optimizer, lr_scheduler=scheduler)

    def offload(self) -> list[str]:
        """Move this rank's DeepSpeed states off the device while another role uses it (colocation on GPU).
        A logged no-op on CPU. Returns what was offloaded."""
        return ds.offload_states(self.engine)

    def reload(self) -> bool:
        """Bring the states :meth:`offload` moved back onto the device."""
        return ds.reload_states(self.engine)

    def empty_cache(self) -> bool:
        """Return the device allocator's cached blocks between colocated phases (``torch.cuda.empty_cache()``).
        A logged no-op without CUDA. Returns whether a cache was emptied."""
        if not torch.cuda.is_available():
            logger.debug("empty_cache: no CUDA device, nothing to free")
            return False
        torch.cuda.empty_cache()
        return True

    def save_checkpoint(self, ckpt_dir: str, tag: str, client_state: dict | None = None) -> str:
        """Full training state of this rank (params, optimizer, scheduler) via DeepSpeed. Collective."""
        return str(ds.save_checkpoint(self.engine, ckpt_dir, tag, client_state))

    def load_checkpoint(self, ckpt_dir: str, tag: str) -> dict:
        """Restore what :meth:`save_checkpoint` wrote (same world size). Collective. Returns the client state."""
        return ds.load_checkpoint(self.engine, ckpt_dir, tag)

    def _frozen_ds_config(self, config: WorkerConfig | None = None) -> dict[str, Any]:
        c = config or self.config
        return build_ds_config(
            zero_stage=c.zero_stage,
            bf16=c.bf16,
            world_size=self.world_size,
            offload_params=c.offload_params,
            train=False,
        )

    def _load_frozen(self, config: WorkerConfig):
        """The frozen causal LM of ``config`` (a reference) in an engine without optimizer, on this worker's resolved
        attention. Returns ``(engine, hf_ds_config)``: keep both referenced."""
        model, hf_ds_config = ds.load_causal_lm(
            local_model_folder(config.model_path),
            self._frozen_ds_config(config),
            attn_implementation=self.attn_implementation,
        )
        return ds.initialize_frozen(model, self._frozen_ds_config(config)), hf_ds_config


class PolicyWorker(_ModelWorker):
    """The actor model: log-probs for the rollout, the PPO update, and weights for the vLLM engines."""

    ref_engine = None  # the frozen reference this rank holds (WorkerConfig.reference), set by setup

    def setup(self, config: WorkerConfig) -> int:
        self._configure(config)
        torch.manual_seed(config.seed)
        model, self._hf_ds_config = ds.load_causal_lm(
            local_model_folder(config.model_path),
            self._train_ds_config(),
            attn_implementation=self.attn_implementation,
        )
        lora = config.lora_settings()
        if config.freeze_vision_tower:  # the image encoder keeps its weights (and, with LoRA, gets no adapter)
            from reasonrl.models.vision import freeze_vision_tower, vision_tower_prefixes

            frozen = freeze_vision_tower(model)
            logger.info(f"policy rank {self.rank}: vision tower frozen ({frozen} tensors)")
            if lora is not None:
                lora = dataclasses.replace(lora, exclude_prefixes=tuple(vision_tower_prefixes(model)))
        if lora is not None:  # only the adapters train; the adapter switched off is the reference
            from reasonrl.models.lora import add_adapters

            model = add_adapters(model, lora)
        self._build_trainable(model)
        self._setup_sequence_parallel(self.engine.module)
        if config.reference is not None:
            if self.sp_group is not None:
                raise ValueError(
                    f"policy rank {self.rank}: a reference in the policy's process runs whole sequences only "
                    "(sequence_parallel_size=1); give the reference its own ranks (reference_process=own)"
                )
            with torch.random.fork_rng(devices=[]):  # loading it leaves the policy's random state as it was
                self.ref_engine, self._ref_hf_ds_config = self._load_frozen(config.reference)
            logger.info(f"policy rank {self.rank}: the frozen reference runs in this process (reference_process)")
        return sum(p.numel() for p in self.engine.module.parameters())

    @torch.no_grad()
    def compute_logprobs(
        self, samples: Sequence[Sample], temperature: float = 1.0, with_entropy: bool = False, images=None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) of the response tokens (``images``: each sample's images, a VLM). Collective.
        Returns [batch, T] CPU tensors."""
        self.engine.eval()
        return _forward_logprobs(self, samples, temperature, with_entropy, images)

    @torch.no_grad()
    def ragged_logprobs(self, shard: RaggedShard, temperature: float = 1.0) -> tuple[torch.Tensor, None]:
        """Log-probs of the response tokens as float32 ``[sum of response lengths]`` (no padding). Collective.
        A tuple like :meth:`compute_logprobs`'s (no entropy)."""
        logprobs, _ = self.compute_logprobs(shard.samples, temperature, images=shard.images)
        return flatten_padded(logprobs, shard.response_lengths), None

    @torch.no_grad()
    def ragged_ref_logprobs(self, shard: RaggedShard, temperature: float = 1.0) -> tuple[torch.Tensor, None]:
        """The reference's log-probs as float32 ``[sum of response lengths]``: from the frozen reference this rank
        holds (``WorkerConfig.reference``), else :meth:`ragged_logprobs` with the LoRA adapter switched off (the
        base model). Collective."""
        from reasonrl.models.lora import adapter_disabled, is_adapted

        if self.ref_engine is not None:
            logprobs = _forward_logprobs(self, shard.samples, temperature, False, shard.images, self.ref_engine)[0]
            return flatten_padded(logprobs, shard.response_lengths), None
        if not is_adapted(self.engine.module):
            raise RuntimeError(
                "ragged_ref_logprobs: this policy holds no reference (WorkerConfig.reference) and no LoRA adapter "
                "(lora_rank=0); use a reference role"
            )
        with adapter_disabled(self.engine.module):
            return self.ragged_logprobs(shard, temperature)

    def update(
        self,
        experience: Experience | RaggedShard,
        cfg: PolicyLossConfig,
        global_tokens: int,
        global_seqs: int,
        coefs: PolicyStepCoefs = NO_STEP_COEFS,
    ):
        """One optimizer step over this rank's part of the mini-batch (all micro-batches accumulated). Collective.
        ``cfg``: the run's loss settings; ``coefs``: this step's KL-loss and entropy coefficients (none by default).

        Returns token-weighted metric means of this rank plus ``loss_share``: this rank's part of the global
        mini-batch loss (the shares of all ranks sum to the loss of the whole mini-batch).

        ``global_tokens`` / ``global_seqs`` count the whole mini-batch over all ranks, so every micro-batch's
        aggregated loss is a share of the global loss (exact for every aggregation mode). DeepSpeed averages
        gradients over ranks, so each rank's loss is multiplied by the world size to get the global sum.
        """
        from reasonrl.algos import aggregate_loss, get_policy_loss, kl_loss

        self.engine.train()
        loss_fn = get_policy_loss(cfg.loss)
        metrics: dict[str, float] = {}
        tokens_seen, loss_share = 0, 0.0
        for batch, mb, own, last in self._update_rounds(experience):
            weight = 1.0 if mb is not None else 0.0  # dummy micro-batches keep collectives aligned, contribute nothing
            logprobs, entropy = self._logprobs(batch, cfg.temperature, with_entropy=True)
            mask = _loss_mask(batch, mb)  # the loss mask (holes allowed) on the forward's response grid
            agg = (cfg.agg_mode, global_tokens, global_seqs, cfg.norm_constant)
            if mb is None:
                loss, stats = logprobs.sum() * 0.0, {}
            else:
                if cfg.reuse_current_logprobs:
                    old = logprobs.detach()
                elif mb.old_logprobs is None:
                    raise ValueError("update: experience has no old_logprobs and reuse_current_logprobs is False")
                else:
                    old = mb.old_logprobs.to(logprobs)
                token_weights, correction_stats = _rollout_correction(cfg, old, mb.rollout_logprobs, mask)
                loss, stats = loss_fn(
                    logprobs,
                    old,
                    mb.advantages.to(logprobs),
                    mask,
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    dual_clip_c=cfg.dual_clip_c,
                    token_weights=token_weights,
                    **dict(zip(AGG_KWARGS, agg, strict=True)),
                )
                stats |= correction_stats
                if coefs.kl_loss_coef:
                    ref = mb.ref_logprobs.to(logprobs)
                    kl, kl_stats = kl_loss(
                        logprobs, ref, mask, estimator=cfg.kl_estimator, **dict(zip(AGG_KWARGS, agg, strict=True))
                    )
                    loss = loss + coefs.kl_loss_coef * kl
                    stats |= kl_stats
                if coefs.entropy_coef:
                    loss = loss - coefs.entropy_coef * aggregate_loss(entropy, mask, *agg)
            ds.backward(self.engine, loss * weight * self.world_size, is_last=last)
            if not own:  # another member's round (SP): its metrics are that member's
                continue
            loss_share += float(loss.detach()) * weight
            n = int(mask.sum()) if mb is not None else 0
            if n:
                stats["entropy"] = (entropy.detach() * mask).sum() / n
                _accumulate(metrics, stats, n)
                tokens_seen += n
        lr = ds.step(self.engine)
        out = {k: v / max(tokens_seen, 1) for k, v in metrics.items()}
        extra = {"grad_norm": ds.grad_norm(self.engine), "lr": lr, "tokens": tokens_seen, "loss_share": loss_share}
        return out | extra

    # ---------------------------------------------------------------- weights for vLLM
    # The worker's part of the weight sync; ``weight_sync.WeightSyncer`` (the driver) runs the protocol.
    def _bucket_sender(self):
        from reasonrl.distributed.bucket_sender import BucketSender

        if getattr(self, "_sender", None) is None:
            self._sender = BucketSender(self.engine.module, self.rank, dist_backend())
        return self._sender

    def sync_layout(self, trainable_only: bool = False) -> list[tuple[str, tuple[int, ...], str, str]]:
        """``(name, full shape, dtype, reload unit)`` of every parameter (``trainable_only``: of those that train), in
        order (the driver plans buckets from it; ``BucketSender.layout``)."""
        return self._bucket_sender().layout(trainable_only)

    def join_weight_group(self, address: str, port: int, world_size: int, timeout_s: float = 600) -> None:
        """Rank 0: join the weight-broadcast group with the engines' workers, as its root."""
        self._bucket_sender().join(address, port, world_size, timeout_s)

    def send_bucket(self, names: Sequence[str], transport: str, keep, share_ranks: int = 1):
        """Gather one bucket and send it (``BucketSender.send``; ``keep``: a ``bucket_sender.KeepSent``). Collective."""
        return self._bucket_sender().send(names, transport, keep, share_ranks)

    def release_shared(self) -> int:
        """``ipc`` transport: free the buffers this rank shared with its engine workers (``BucketSender``)."""
        return self._bucket_sender().release_shared()

    def sent_probe_logprobs(self, probe_ids: Sequence[int], images=None) -> list[float] | None:
        """Rank 0: the probe's log-probs under the weights just sent (a host model; no collective). ``images``: a
        VLM probe's pictures (``probe_ids`` then hold their expanded image tokens)."""
        return self._bucket_sender().sent_logprobs(probe_ids, images, self.vision)

    def probe_logprobs(self, probe_ids: Sequence[int], images=None) -> list[float]:
        """The training model's log-probs of ``probe_ids[1:]`` (collective: ZeRO-3 gathers every layer), with a VLM
        probe's pictures (``images``) when given."""
        sample = (list(probe_ids[:1]), list(probe_ids[1:]))
        return self.compute_logprobs([sample], images=[list(images)] if images else None)[0][0].tolist()

    def full_state_dict(self):
        return ds.gather_full_state_dict(self.engine.module)

    def export_hf(self, out_dir: str) -> str | None:
        """Write the full policy as a Hugging Face folder (rank 0 writes; collective gather). With LoRA: the merged
        model under the base names."""
        path = hf_export.export_hf(self.engine, out_dir)
        return None if path is None else str(path)

    def adapter_files(self) -> dict[str, Any] | None:
        """LoRA adapter-only sync: the adapter as PEFT saves it, ``{"files": {file name: bytes}, "tensors": n}`` on
        rank 0 (None elsewhere). Collective: gathers the adapter only (~1% of the model at rank 32 on 7B)."""
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory(prefix="reasonrl-adapter-") as folder:
            if self.export_adapter(folder) is None:
                return None
            files = {p.name: p.read_bytes() for p in Path(folder).iterdir() if p.name.startswith("adapter_")}
        from reasonrl.models.lora import adapter_param_names

        return {"files": files, "tensors": len(adapter_param_names(self.engine.module))}

    def export_adapter(self, out_dir: str) -> str | None:
        """LoRA: write the adapter alone, as PEFT saves it (rank 0 writes; collective gather of the adapter only)."""
        from reasonrl.models.lora import adapter_param_names, save_adapter

        module = self.engine.module
        tensors = ds.gather_params(module, adapter_param_names(module), rank0_only=True)
        if self.rank != 0:
            return None
        save_adapter(module, tensors, out_dir)
        return out_dir


class ReferenceWorker(_ModelWorker):
    """A frozen copy of the initial policy: reference log-probs for the KL term."""

    def setup(self, config: WorkerConfig) -> int:
        self._configure(config)
        self.engine, self._hf_ds_config = self._load_frozen(config)
        self._setup_sequence_parallel(self.engine.module)
        return sum(p.numel() for p in self.engine.module.parameters())

    @torch.no_grad()
    def compute_logprobs(self, samples: Sequence[Sample], temperature: float = 1.0, images=None):
        return _forward_logprobs(self, samples, temperature, False, images)[0]

    @torch.no_grad()
    def ragged_logprobs(self, shard: RaggedShard, temperature: float = 1.0) -> torch.Tensor:
        """Reference log-probs as float32 ``[sum of response lengths]`` (no padding). Collective."""
        logprobs = self.compute_logprobs(shard.samples, temperature, images=shard.images)
        return flatten_padded(logprobs, shard.response_lengths)


class CriticWorker(_ModelWorker):
    """The value model: per-token values V(s_t) and the clipped value update."""

    def setup(self, config: WorkerConfig) -> int:
        from reasonrl.models import load_critic

        self._configure(config)
        torch.manual_seed(config.seed)
        self._hf_ds_config = ds.hf_zero3_config(self._train_ds_config())
        critic = load_critic(
            local_model_folder(config.model_path), attn_implementation=self.attn_implementation, seed=config.seed
        )
        self._build_trainable(critic)
        self._setup_sequence_parallel(self.engine.module.backbone)
        return sum(p.numel() for p in self.engine.module.parameters())

    @torch.no_grad()
    def compute_values(self, samples: Sequence[Sample], images=None) -> torch.Tensor:
        """Values [batch, T] (zeros at padding; ``images``: each sample's, a VLM critic). Collective."""
        self.engine.eval()
        return _stitch(self, samples, lambda batch: (self._values(batch),), images)[0]

    @torch.no_grad()
    def ragged_values(self, shard: RaggedShard) -> torch.Tensor:
        """Values as float32 ``[sum of response lengths]`` (no padding). Collective."""
        return flatten_padded(self.compute_values(shard.samples, shard.images), shard.response_lengths)

    def update(self, experience: Experience | RaggedShard, cfg: ValueLossConfig, global_tokens: int, global_seqs: int):
        """One optimizer step of the clipped value loss over this rank's part of the mini-batch. Collective."""
        from reasonrl.algos import value_loss

        self.engine.train()
        metrics: dict[str, float] = {}
        tokens_seen, loss_share = 0, 0.0
        for batch, mb, own, last in self._update_rounds(experience):
            values = self._values(batch)
            mask = _loss_mask(batch, mb)  # the loss mask (holes allowed) on the forward's response grid
            if mb is not None:
                loss, stats = value_loss(
                    values,
                    mb.old_values.to(values),
                    mb.returns.to(values),
                    mask,
                    clip_eps=cfg.clip_eps,
                    agg_mode=cfg.agg_mode,
                    global_num_tokens=global_tokens,
                    global_num_seqs=global_seqs,
                    norm_constant=cfg.norm_constant,
                )
            else:
                loss, stats = values.sum() * 0.0, {}
            ds.backward(self.engine, loss * self.world_size, is_last=last)
            if not own:  # another member's round (SP): its metrics are that member's
                continue
            loss_share += float(loss.detach())
            n = int(mask.sum()) if mb is not None else 0
            if n:
                _accumulate(metrics, stats, n)
                tokens_seen += n
        lr = ds.step(self.engine)
        out = {k: v / max(tokens_seen, 1) for k, v in metrics.items()}
        return out | {"grad_norm": ds.grad_norm(self.engine), "lr": lr, "tokens": tokens_seen, "loss_share": loss_share}


class RewardModelWorker(_ModelWorker):
    """Optional learned reward: a sequence-classification model scoring (prompt + response)."""

    def _configure(self, config: WorkerConfig) -> None:
        super()._configure(config)
        self.packing = False  # score() always pads: the last token is located from the padded layout

    def setup(self, config: WorkerConfig) -> int:
        from transformers import AutoModelForSequenceClassification

        self._configure(config)
        ds_config = self._frozen_ds_config()
        self._hf_ds_config = ds.hf_zero3_config(ds_config)
        model = AutoModelForSequenceClassification.from_pretrained(
            local_model_folder(config.model_path),
            num_labels=1,
            dtype=torch.float32,
            attn_implementation=self.attn_implementation,
        )
        self.engine = ds.initialize_frozen(model, ds_config)
        return sum(p.numel() for p in self.engine.module.parameters())

    @torch.no_grad()
    def score(self, samples: Sequence[Sample]) -> torch.Tensor:
        """One scalar per sample: the score head at the last response token. [batch] float32. Collective.

        The last token is located from our own layout (right-padded responses), not from ``pad_token_id`` as
        transformers' pooling does, which picks the wrong token when the pad id doubles as EOS.
        """
        module = self.engine.module
        backbone, head = getattr(module, module.base_model_prefix), getattr(module, "score", None)
        if head is None:
            raise TypeError(f"{type(module).__name__} has no `score` head (decoder-LM sequence classifiers have one)")
        from reasonrl.models import pad_batch

        scores = torch.zeros(len(samples))
        for idx, mb_samples, _ in self._micro_batches(samples, padded=True):
            batch = pad_batch(mb_samples, self.config.pad_token_id).to(self.device)
            hidden = backbone(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                position_ids=batch.position_ids,
                use_cache=False,
            ).last_hidden_state  # [mb, seq, hidden]
            last = batch.prompt_width + batch.action_mask.sum(-1) - 1  # [mb]: column of the last real token
            values = head(hidden[torch.arange(len(mb_samples)), last])[:, 0]  # [mb]
            if idx:
                scores[idx] = values.float().cpu()
        return scores


# -------------------------------------------------------------------------------------------------- helpers
def _forward_logprobs(worker, samples, temperature, with_entropy, images=None, engine=None):
    forward = lambda batch: worker._logprobs(batch, temperature, with_entropy, engine)  # noqa: E731
    return _stitch(worker, samples, forward, images)


def _stitch(worker, samples, forward, images=None) -> list[torch.Tensor | None]:
    """Run ``forward(batch)`` over equalised micro-batches (under SP: their group rounds) and place each kept
    output's rows in [batch, T] tensors."""
    width = max((len(r) for _, r in samples), default=0)
    outputs: list[torch.Tensor | None] | None = None
    for idx, mb_samples, mb_images in worker._forward_rounds(samples, images):
        results = forward(worker._batch(mb_samples, mb_images))
        if outputs is None:
            outputs = [None if r is None else torch.zeros(len(samples), width) for r in results]
        if idx:
            for out, r in zip(outputs, results, strict=True):
                if out is not None:
                    out[idx, : r.shape[1]] = r.float().cpu()
    return outputs or [torch.zeros(len(samples), width)]


def _loss_mask(batch, mb: Experience | None) -> torch.Tensor:
    """The loss mask of one micro-batch on ``batch``'s device, ``[mb, T]`` bool: ``mb.action_mask`` (the
    experience's loss mask, holes allowed) checked against the response span the forward ran over
    (``batch.action_mask``, same width); the span itself for a zero-weighted dummy micro-batch (``mb`` None)."""
    span = batch.action_mask
    if mb is None:
        return span
    mask = mb.action_mask.to(span.device).bool()
    if mask.shape != span.shape or bool((mask & ~span).any()):
        raise ValueError(f"the loss mask {tuple(mask.shape)} is not within the response span {tuple(span.shape)}")
    return mask


def _rollout_correction(cfg: PolicyLossConfig, old_logprobs, rollout_logprobs, mask):
    """``(token_weights or None, metrics)`` of one micro-batch: the rollout-policy correction of the policy loss
    (``reasonrl.algos.rollout_correction``: the trainer's ``old_logprobs`` [batch, T] against the engine's
    ``rollout_logprobs`` [batch, T]). Every mode works per sequence, and a micro-batch holds whole sequences, so
    the weights equal those of the full batch. ``off``: no weights, no metrics; ``monitor``: metrics, weight 1."""
    if cfg.rollout_correction == "off":
        return None, {}
    if rollout_logprobs is None:
        raise ValueError(
            f"rollout_correction={cfg.rollout_correction!r} needs the engines' log-probs, and the experience has none"
        )
    from reasonrl.algos import rollout_correction

    mode = "none" if cfg.rollout_correction == "monitor" else cfg.rollout_correction
    weights, _, metrics = rollout_correction(
        old_logprobs.detach(),
        rollout_logprobs.to(old_logprobs),
        mask,
        mode,
        cfg.rollout_correction_cap,
        cfg.rollout_correction_lower,
        cfg.rollout_correction_upper,
    )
    return (None if mode == "none" else weights), metrics


def _accumulate(total: dict[str, float], stats: dict[str, Any], weight: int) -> None:
    """Token-weighted running sums of scalar metrics (divided by the token count at the end)."""
    for key, value in stats.items():
        total[key] = total.get(key, 0.0) + float(value) * weight

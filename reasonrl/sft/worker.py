"""``SFTWorker``: one DeepSpeed rank of supervised fine-tuning, on the same worker base as the RL roles.

The loss is the token-mean negative log-likelihood over RESPONSE tokens only (prompt tokens are context)::

    L = - (1 / N) * sum_{i in batch} sum_{t < |y_i|} log p_theta(y_i,t | x_i, y_i,<t),    N = sum_i |y_i|

``N`` counts the whole GLOBAL batch, so every micro-batch's loss is an exact share of ``L``; each rank multiplies
its share by the world size because DeepSpeed averages gradients over ranks (as the PPO workers do).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonrl.distributed.ppo_workers import DUMMY_SAMPLE, WorkerConfig, equalised_micro_batches
from reasonrl.distributed.workers import DistributedWorker
from reasonrl.sft.data import Sample


class SFTWorker(DistributedWorker):
    """Response-only NLL, one optimizer step per call, HF export.

    Every method that runs a forward pass is collective (ZeRO-3 gathers layers): ranks agree on the micro-batch
    count (``equalised_micro_batches``) and a rank with fewer runs zero-weighted dummy micro-batches.
    """

    def setup(self, config: WorkerConfig, torch_threads: int | None = None) -> int:
        """Load the model (partitioned under ZeRO-3), AdamW + LR schedule, DeepSpeed engine. Returns local params.
        ``torch_threads`` overrides the intra-op thread count Ray gives the actor (``OMP_NUM_THREADS=num_cpus``)."""
        from reasonrl.distributed import deepspeed_engine as ds

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self.config = c = config
        torch.manual_seed(c.seed)
        ds_config = ds.build_ds_config(
            zero_stage=c.zero_stage, bf16=c.bf16, world_size=self.world_size, grad_clip=c.grad_clip
        )
        model, self._hf_ds_config = ds.load_causal_lm(
            c.model_path, ds_config, attn_implementation=c.attn_implementation
        )
        if c.gradient_checkpointing:
            ds.enable_gradient_checkpointing(model)
        optimizer = ds.make_optimizer(model, lr=c.lr, weight_decay=c.weight_decay, ds_config=ds_config)
        scheduler = ds.make_lr_scheduler(optimizer, c.warmup_steps, c.total_steps, schedule=c.lr_schedule)
        self.engine = ds.initialize(model, ds_config, optimizer, lr_scheduler=scheduler)
        return sum(p.numel() for p in self.engine.module.parameters())

    def _micro_batches(self, samples: Sequence[Sample]) -> list[tuple[list[int], list[Sample]]]:
        lengths = [len(p) + len(r) for p, r in samples]
        out = []
        for idx in equalised_micro_batches(lengths, self.config.max_tokens_per_micro_batch, self.engine.device):
            out.append((idx, [samples[i] for i in idx] if idx else [DUMMY_SAMPLE]))
        return out

    def _nll(self, samples: Sequence[Sample]) -> tuple[torch.Tensor, int]:
        """Summed NLL of the response tokens of one micro-batch (a scalar tensor) and their count."""
        from reasonrl.models import pad_batch, response_logprobs

        batch = pad_batch(samples, self.config.pad_token_id).to(self.engine.device)
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

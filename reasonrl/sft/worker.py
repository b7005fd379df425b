"""``SFTWorker``: one DeepSpeed rank of supervised fine-tuning. It IS a :class:`PolicyWorker` (same loading,
ZeRO stages, micro-batching, checkpointing and HF export) trained with a different loss.

The loss is the token-mean negative log-likelihood over RESPONSE tokens only (prompt tokens are context)::

    L = - (1 / N) * sum_{i in batch} sum_{t < |y_i|} log p_theta(y_i,t | x_i, y_i,<t),    N = sum_i |y_i|

``N`` counts the whole GLOBAL batch, so every micro-batch's loss is an exact share of ``L``; each rank multiplies
its share by the world size because DeepSpeed averages gradients over ranks (as the PPO update does). A sample with
a loss mask (a conversation: ``(prompt, response, mask)``, :mod:`reasonrl.sft.conversation`) counts only the
response tokens its mask keeps, in the sum and in ``N``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonrl.distributed import deepspeed_engine as ds
from reasonrl.distributed.ppo_workers import PolicyWorker, WorkerConfig
from reasonrl.sft.data import Sample


class SFTWorker(PolicyWorker):
    """Response-only NLL, one optimizer step per call; ``save_checkpoint`` / ``load_checkpoint`` / ``export_hf``
    come from :class:`PolicyWorker`.

    Every method that runs a forward pass is collective (ZeRO-3 gathers layers): ranks agree on the micro-batch
    count (``equalised_micro_batches``) and a rank with fewer runs zero-weighted dummy micro-batches.
    """

    def setup(self, config: WorkerConfig, torch_threads: int | None = None) -> int:
        """The policy's setup (model partitioned under ZeRO-3, AdamW + LR schedule, DeepSpeed engine). Returns the
        local parameter count. ``torch_threads`` overrides the thread count Ray gives the actor (its num_cpus)."""
        if torch_threads:
            torch.set_num_threads(torch_threads)
        return super().setup(config)

    def _micro_batches(self, samples: Sequence[Sample], padded: bool | None = None, images=None):
        """The policy's micro-batches planned on the (prompt, response) pairs; each keeps its samples' masks."""
        pairs = [tuple(s[:2]) for s in samples]
        if images is None and any(len(s) > 3 for s in samples):  # vision-language samples carry their images
            images = [list(s[3]) if len(s) > 3 else [] for s in samples]
        planned = super()._micro_batches(pairs, padded, images)
        return [(idx, [samples[i] for i in idx] if idx else dummy, mb_images) for idx, dummy, mb_images in planned]

    def _nll(self, samples: Sequence[Sample], images=None) -> tuple[torch.Tensor, int]:
        """Summed NLL of the trained response tokens of one micro-batch (a scalar tensor) and their count."""
        from reasonrl.models import response_logprobs

        batch = self._batch([tuple(s[:2]) for s in samples], images)
        logprobs, _ = response_logprobs(self.engine, batch, 1.0)  # [batch, T], zeros at padding
        mask = loss_mask(samples, batch.action_mask)
        return -(logprobs * mask).sum(), int(mask.sum())

    def train_step(self, samples: Sequence[Sample], global_tokens: int) -> dict[str, float]:
        """One optimizer step over this rank's share of the global batch (collective). ``global_tokens`` = N,
        the response tokens of the whole global batch. Returns this rank's ``loss_share`` (its part of L; the
        shares of all ranks sum to L), ``tokens``, ``grad_norm`` and the ``lr`` used."""
        self.engine.train()
        micro_batches = self._micro_batches(samples)
        loss_share, tokens = 0.0, 0
        for i, (idx, mb, mb_images) in enumerate(micro_batches):
            nll, n = self._nll(mb, mb_images)
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
        for idx, mb, mb_images in self._micro_batches(samples):
            nll, n = self._nll(mb, mb_images)
            if idx:
                total, tokens = total + float(nll), tokens + n
        return total, tokens


def loss_mask(samples: Sequence[Sample], span: torch.Tensor) -> torch.Tensor:
    """``[batch, T]`` bool: the response span of the batch (``span``, its ``action_mask``) where a sample has no
    mask of its own, else that sample's mask (a conversation's assistant tokens) on its span."""
    mask = span.clone()
    for i, sample in enumerate(samples):
        if len(sample) > 2 and sample[2] is not None:
            own = torch.tensor(sample[2], dtype=torch.bool, device=span.device)
            if own.numel() != int(span[i].sum()):
                raise ValueError(f"sample {i}: {own.numel()} loss-mask entries for {int(span[i].sum())} tokens")
            mask[i, : own.numel()] = own
    return mask

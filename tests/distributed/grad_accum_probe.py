"""Run by test_distributed_ds_adapter.py in a subprocess (1 rank, gloo): ZeRO-3 bf16 gradient accumulation error.

A bf16 linear layer is trained for one optimizer step of ``N`` micro-batches with SGD (lr 1, no clipping), so the
fp32 master weights move by exactly the accumulated gradient. That gradient is compared with the fp64 sum of the
same bf16 micro-batch gradients, for the config ``build_ds_config`` gives bf16 training (fp32 accumulation) and for
DeepSpeed's default (bf16 accumulation). Prints one JSON line ``{"auto": err, "bf16": err, "dtype_auto": ...}``.

Usage: python grad_accum_probe.py <num_micro_batches>
"""

from __future__ import annotations

import json
import socket
import sys

from reasonrl.distributed import ds_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(n: int) -> None:
    import torch
    from deepspeed.utils import safe_get_full_fp32_param

    from reasonrl.distributed import deepspeed_engine as ds

    ds.init_distributed(0, 1, "127.0.0.1", free_port(), timeout_s=120)
    dim = 64
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(8, dim, generator=g) for _ in range(n)]
    ts = [torch.randn(8, dim, generator=g) for _ in range(n)]
    init = torch.randn(dim, dim, generator=g) * 0.1

    # fp64 sum of the bf16 micro-batch gradients of loss_i / n (DeepSpeed scales each loss by 1 / n)
    w = init.to(torch.bfloat16).requires_grad_(True)
    reference = torch.zeros(dim, dim, dtype=torch.float64)
    for x, t in zip(xs, ts, strict=True):
        w.grad = None
        ((x.bfloat16() @ w.T) * t.bfloat16()).sum().div(n).backward()
        reference += w.grad.double()

    result = {}
    for name, dtype in (("auto", "auto"), ("bf16", None)):
        model = torch.nn.Linear(dim, dim, bias=False)
        with torch.no_grad():
            model.weight.copy_(init)
        config = ds_config.build_ds_config(
            zero_stage=3,
            bf16=True,
            grad_accum_steps=n,
            micro_batch_size_per_rank=8,
            grad_clip=0.0,
            grad_accum_dtype=dtype,
        )
        result[f"dtype_{name}"] = config.get("data_types", {}).get("grad_accum_dtype")
        engine = ds.initialize(model, config, torch.optim.SGD(model.parameters(), lr=1.0))
        before = safe_get_full_fp32_param(engine.module.weight).double().clone()
        for x, t in zip(xs, ts, strict=True):
            loss = (engine(x.to(torch.bfloat16)) * t.bfloat16()).sum()
            engine.backward(loss)
            engine.step()
        grad = before - safe_get_full_fp32_param(engine.module.weight).double()
        result[name] = float((grad - reference).norm() / reference.norm())
    print(json.dumps(result))


if __name__ == "__main__":
    main(int(sys.argv[1]))

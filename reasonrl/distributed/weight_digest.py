"""Exact fingerprints of weight tensors, computed where the tensors are (GPU or CPU), for the weight-sync check.

The weight sync compares what the trainer sent with what every engine worker received and loaded, tensor by tensor.
A fingerprint must therefore be exact (one changed bit changes it), cheap on a device (no host copy of the model),
identical on every device and for every reduction order, and composable over concatenation, so that a fused vLLM
parameter (``qkv_proj`` = rows of ``q_proj``, ``k_proj``, ``v_proj``) can be checked against its sources.

Definition, over the tensor's bytes read as integers ``x_i`` of the element's width (bf16 -> int16, fp32 -> int32,
...), ``i = 0 .. n-1`` in row-major order::

    fingerprint(t) = (n, S, W)   with   S = sum_i x_i  mod 2^64,   W = sum_i (i + 1) * x_i  mod 2^64

Integer sums are exact and order-free, so the value does not depend on the device or on chunking. ``W`` weighs each
element by its position, so swapped elements or rows change it. Concatenation composes (``compose``)::

    fingerprint(cat(a, b)) = (n_a + n_b,  S_a + S_b,  W_a + W_b + n_a * S_b)

It is a check against faults (a missed bucket, a stale layer, a corrupted copy), not a cryptographic hash.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

Fingerprint = tuple[int, int, int]  # (numel, S, W), S and W mod 2^64
MASK = (1 << 64) - 1
_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_ROW = 1024  # elements per matrix row: a row's weighted sum stays below 2^53, exact in float64
# rows converted to float64 at a time: 8 MiB on CPU, where a pass that fits the cache is ~9x faster for a large
# tensor than 32 MiB passes (SmolLM2's 113 MB embedding: 9 ms against 75 ms on 2 cores); 32 MiB on a GPU (fewer
# kernel launches)
_ROWS_PER_PASS = {"cpu": 1024}
_ROWS_PER_PASS_DEVICE = 4096


def fingerprint(tensor: torch.Tensor) -> Fingerprint:
    """``(n, S, W)`` of ``tensor`` (see the module docstring), computed on the tensor's own device.

    Elements of up to 4 bytes are read as rows of :data:`_ROW` integers and reduced by one float64 matrix product
    with ``[1, j + 1]`` per row: every row sum is an integer below 2^53, so exact in any summation order (a BLAS or
    GPU kernel), and the rows combine in int64 (``W += row * _ROW * S_row``; int64 wraps, the mod 2^64 of the
    definition). One host synchronisation per tensor."""
    flat = tensor.detach().contiguous().reshape(-1)
    n = flat.numel()
    if n == 0:
        return (0, 0, 0)
    ints = flat.view(_INT_OF_WIDTH[flat.element_size()])
    s = torch.zeros((), dtype=torch.int64, device=flat.device)
    w = torch.zeros((), dtype=torch.int64, device=flat.device)
    rows = n // _ROW if flat.element_size() <= 4 else 0
    if rows:
        weights = torch.stack(
            [torch.ones(_ROW, dtype=torch.float64, device=flat.device), torch.arange(1, _ROW + 1, device=flat.device)]
        ).T.to(torch.float64)  # [_ROW, 2]
        matrix = ints[: rows * _ROW].view(rows, _ROW)
        per_pass = _ROWS_PER_PASS.get(flat.device.type, _ROWS_PER_PASS_DEVICE)
        for first in range(0, rows, per_pass):
            part = matrix[first : first + per_pass]
            sums = (part.to(torch.float64) @ weights).to(torch.int64)  # [rows of the pass, 2]: S_row, sum (j+1) x
            offsets = torch.arange(first, first + part.shape[0], dtype=torch.int64, device=flat.device) * _ROW
            s += sums[:, 0].sum()
            w += (offsets * sums[:, 0]).sum() + sums[:, 1].sum()
    if rows * _ROW < n:  # the tail (and 8-byte elements): int64 directly
        x = ints[rows * _ROW :].to(torch.int64)
        position = torch.arange(rows * _ROW + 1, n + 1, dtype=torch.int64, device=flat.device)
        s += x.sum()
        w += (x * position).sum()
    s_value, w_value = torch.stack([s, w]).tolist()
    return (n, s_value & MASK, w_value & MASK)


def compose(parts: Iterable[Fingerprint]) -> Fingerprint:
    """The fingerprint of the concatenation (flattened, in order) of tensors with fingerprints ``parts``."""
    n_total, s_total, w_total = 0, 0, 0
    for n, s, w in parts:
        w_total = (w_total + w + n_total * s) & MASK
        s_total = (s_total + s) & MASK
        n_total += n
    return (n_total, s_total, w_total)


def named_fingerprints(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> dict[str, Fingerprint]:
    """``{name: fingerprint}`` of a bucket's tensors."""
    return {name: fingerprint(tensor) for name, tensor in named_tensors}


def differences(sent: dict[str, Fingerprint], received: dict[str, Fingerprint]) -> dict[str, list[str]]:
    """What a receiver got wrong: ``missing`` (sent, never received), ``differ`` (received with other contents),
    ``unexpected`` (received, never sent); each a sorted list of tensor names (empty lists when all agree)."""
    return {
        "missing": sorted(set(sent) - set(received)),
        # tuple(): a fingerprint that crossed vLLM's RPC may come back as a list
        "differ": sorted(n for n in sent.keys() & received.keys() if tuple(sent[n]) != tuple(received[n])),
        "unexpected": sorted(set(received) - set(sent)),
    }


def fused_sources(
    param_name: str, packed_modules: dict[str, Sequence[str]], sent_names: Iterable[str]
) -> list[str] | None:
    """The sent (HF-named) tensors a vLLM parameter is made of, in concatenation order, or None if unknown.

    ``packed_modules``: the vLLM model's ``packed_modules_mapping`` (``{"qkv_proj": ["q_proj", "k_proj",
    "v_proj"], ...}``). ``model.layers.0.self_attn.qkv_proj.weight`` -> the sent ``...q_proj.weight``,
    ``...k_proj.weight``, ``...v_proj.weight``; an unfused parameter is its own source when it was sent."""
    sent = set(sent_names)
    if param_name in sent:
        return [param_name]
    parts = param_name.split(".")
    for i, part in enumerate(parts):
        if part in packed_modules:
            names = [".".join(parts[:i] + [source] + parts[i + 1 :]) for source in packed_modules[part]]
            return names if all(name in sent for name in names) else None
    return None

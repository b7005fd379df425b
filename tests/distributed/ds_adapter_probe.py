"""Run in subprocesses (gloo) to exercise the DeepSpeed adapter on real ZeRO-3 models.

torch.distributed state and transformers' global ``HfDeepSpeedConfig`` would leak into a shared pytest process,
hence separate ones. Two modes:

* ``python ds_adapter_probe.py <out_dir> <model_dir>`` (test_distributed_ds_checkpoint.py, world size 1): trains,
  checkpoints, resumes, gathers, exports; writes ``<out_dir>/result.json`` with measured values.
* ``python ds_adapter_probe.py export <out_dir> <rank> <world_size> <port> <model_dir>...``
  (test_distributed_ds_adapter.py, one process per rank): loads each model partitioned under ZeRO-3 and exports
  it three ways into ``<out_dir>/<i>/``: ``reference`` (the full gather + ``save_pretrained`` that the streaming
  export replaced), ``single`` (:func:`export_hf`, default shard size) and ``sharded`` (tiny shards and
  buckets). Writes ``<out_dir>/rank<r>.json`` with what each call returned; the test checks the folders.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from reasonrl.distributed import ds_config, optim_setup

T0 = time.perf_counter()
TIMINGS: dict[str, float] = {}


def lap(name: str, since: float) -> float:
    now = time.perf_counter()
    TIMINGS[name] = round(now - since, 3)
    return now


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def batch(seed: int, size: int = 4, seq: int = 24, vocab: int = 2048):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (size, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[0, -4:] = 0
    return ids, mask


def lm_loss(model, ids, mask):
    return model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss


def main(out_dir: str, model_dir: str) -> None:
    import torch

    from reasonrl.distributed import deepspeed_engine as ds
    from reasonrl.distributed import hf_export

    torch.manual_seed(0)
    out = Path(out_dir)
    result: dict = {}
    t = time.perf_counter()
    ds.init_distributed(0, 1, "127.0.0.1", free_port(), timeout_s=120)
    t = lap("init_distributed", t)

    cfg = ds_config.build_ds_config(zero_stage=3, micro_batch_size_per_rank=4, world_size=1, grad_clip=1.0)
    sched_kw = dict(warmup_steps=2, total_steps=8, schedule="cosine", min_lr_ratio=0.1)
    base_lr = 1e-3

    def train_engine(config=cfg, gradient_checkpointing=True, **sched):
        model, hf_cfg = ds.load_causal_lm(model_dir, config)
        if gradient_checkpointing:
            ds.enable_gradient_checkpointing(model)
        opt = ds.make_optimizer(model, lr=base_lr, weight_decay=0.1)
        engine = ds.initialize(model, config, opt, optim_setup.make_lr_scheduler(opt, **(sched or sched_kw)))
        return engine, hf_cfg

    def step(engine, k):
        engine.train()
        lr = engine.get_lr()[0]
        loss = lm_loss(engine, *batch(k))
        engine.backward(loss)
        engine.step()
        return float(loss.detach()), lr

    engine, hf_keep = train_engine()
    t = lap("engine_a_init", t)
    module = engine.module
    result["gradient_checkpointing"] = bool(module.is_gradient_checkpointing)
    result["partitioned_shape"] = list(dict(module.named_parameters())["model.embed_tokens.weight"].shape)
    result["optimizer"] = type(engine.optimizer.optimizer).__name__
    result["param_group_decay"] = [g["weight_decay"] for g in engine.optimizer.optimizer.param_groups]

    # With checkpointing, backward re-runs each layer's forward: 2 calls per step, not 1. (A pre-hook: the
    # non-reentrant recompute stops early, once the saved tensors are rebuilt, so post-forward hooks may not fire.)
    layer_calls = []
    hook = module.model.layers[0].register_forward_pre_hook(lambda *_: layer_calls.append(1))
    losses_a, lrs_a = [], []
    for k in range(3):
        loss, lr = step(engine, k)
        if k == 0:
            result["layer0_calls_per_step"] = len(layer_calls)
            hook.remove()
        losses_a.append(loss)
        lrs_a.append(lr)
        if k == 0:  # exercise DeepSpeed's offload/reload path on CPU (force: nothing is freed on a CPU host)
            result["offload_skipped_on_cpu"] = ds.offload_states(engine) == []
            result["offloaded"] = ds.offload_states(engine, force=True)
            result["reloaded"] = ds.reload_states(engine)
            result["reload_again"] = ds.reload_states(engine)
    t = lap("train_3_steps", t)
    ckpt = out / "ckpt"
    ds.save_checkpoint(engine, ckpt, "step3", client_state={"step": 3, "note": "hello"})
    t = lap("save_checkpoint", t)
    saved_params = ds.gather_full_state_dict(engine.module)
    result["ckpt_files"] = sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file())
    for k in (3, 4):
        loss, lr = step(engine, k)
        losses_a.append(loss)
        lrs_a.append(lr)
    result["losses_a"], result["lrs_a"] = losses_a, lrs_a
    t = lap("train_2_more", t)
    try:  # a failure mid-save (unpicklable client state) must raise, and must not move ckpt/latest
        ds.save_checkpoint(engine, ckpt, "bad", client_state={"fn": lambda: 0})
        result["failed_save_raises"] = False
    except Exception as exc:
        result["failed_save_raises"] = type(exc).__name__
    result["latest_after_failed_save"] = (ckpt / "latest").read_text()

    engine_b, hf_keep_b = train_engine()
    try:
        ds.load_checkpoint(engine_b, ckpt, "missing")
        result["missing_raises"] = False
    except FileNotFoundError:
        result["missing_raises"] = True
    client_state = ds.load_checkpoint(engine_b, ckpt, "step3")
    result["client_state"] = client_state
    result["global_steps_b"] = engine_b.global_steps
    t = lap("engine_b_init_and_load", t)
    losses_b, lrs_b = [], []
    for k in (3, 4):
        loss, lr = step(engine_b, k)
        losses_b.append(loss)
        lrs_b.append(lr)
    result["losses_b"], result["lrs_b"] = losses_b, lrs_b
    t = lap("train_2_resumed", t)

    # Parameters-only load (warm start): same weights, fresh optimizer and schedule.
    engine_e, hf_keep_e = train_engine()
    ds.load_checkpoint(engine_e, ckpt, "step3", load_optimizer=False)
    params_e = ds.gather_full_state_dict(engine_e.module)
    result["params_only_max_diff"] = max(float((params_e[k] - saved_params[k]).abs().max()) for k in saved_params)
    result["params_only_lr"] = engine_e.get_lr()[0]
    del engine_e, hf_keep_e
    t = lap("params_only_load", t)

    # backward(is_last)/step: an update from two half micro-batches equals one from the full batch. ZeRO-2 is the
    # discriminating case: without the boundary marking it drops the first micro-batch's gradient (ZeRO-3 does not).
    # The weights are compared as updates: Adam's first steps move an entry by about lr * g / (|g| + eps), so an
    # entry whose gradient is rounding-level (~eps) moves by anything up to lr, and which entries those are follows
    # the float order (measured: max |diff| up to 4e-6 with MKL's AVX-512 kernels, 1.7e-4 with MKL limited to AVX2).
    # So besides the largest difference: the difference of the whole update relative to its size, and the share of
    # entries off by more than lr / 2; the same two numbers for the failure they guard (the first micro-batch's
    # gradient dropped, what ZeRO-2 did without the boundary marking), emulated on ZeRO-0.
    def update_gap(p0, want, got) -> dict:
        diff2 = sum(float(((got[k] - want[k]).double() ** 2).sum()) for k in want)
        size2 = sum(float(((want[k] - p0[k]).double() ** 2).sum()) for k in want)
        off = sum(int(((got[k] - want[k]).abs() > 0.5 * base_lr).sum()) for k in want)
        return {"rel": (diff2 / size2) ** 0.5, "frac_off": off / sum(t.numel() for t in want.values())}

    for stage in (0, 2, 3):  # ZeRO-0: the grad norm is ours (DeepSpeed keeps none there)
        cfg_s = ds_config.build_ds_config(zero_stage=stage, micro_batch_size_per_rank=4, world_size=1, grad_clip=1.0)
        engine_f, hf_keep_f = train_engine(cfg_s, gradient_checkpointing=False)
        engine_g, hf_keep_g = train_engine(cfg_s, gradient_checkpointing=False)
        p0 = ds.gather_full_state_dict(engine_g.module)  # both start from the model folder
        engine_h, hf_keep_h = train_engine(cfg_s, gradient_checkpointing=False) if stage == 0 else (None, None)
        norms, lrs = {"split": [], "full": []}, []
        for k in range(2):
            ids, _ = batch(10 + k)
            full_mask = torch.ones_like(ids)  # equal token counts per row: mean of halves == full mean
            for j, rows in enumerate((slice(0, 2), slice(2, 4))):
                loss = lm_loss(engine_f, ids[rows], full_mask[rows]) * 0.5
                ds.backward(engine_f, loss, is_last=j == 1)
            lrs.append(ds.step(engine_f))
            norms["split"].append(ds.grad_norm(engine_f))
            ds.backward(engine_g, lm_loss(engine_g, ids, full_mask))
            ds.step(engine_g)
            norms["full"].append(ds.grad_norm(engine_g))
            if engine_h is not None:  # the bug: only the second micro-batch's gradient reaches the step
                ds.backward(engine_h, lm_loss(engine_h, ids[2:4], full_mask[2:4]) * 0.5)
                ds.step(engine_h)
        pf, pg = ds.gather_full_state_dict(engine_f.module), ds.gather_full_state_dict(engine_g.module)
        if engine_h is not None:
            result["accum_dropped_first"] = update_gap(p0, pg, ds.gather_full_state_dict(engine_h.module))
        result[f"accum_z{stage}"] = {
            "max_param_diff": max(float((pf[k] - pg[k]).abs().max()) for k in pf),
            "update_gap": update_gap(p0, pg, pf),
            "grad_norms": norms,
            "step_lrs": lrs,
            "global_steps": engine_f.global_steps,
            "next_lr": ds.current_lr(engine_f),
            "partitioned": list(dict(engine_f.module.named_parameters())["lm_head.weight"].shape) == [0],
        }
        del engine_f, engine_g, engine_h, hf_keep_f, hf_keep_g, hf_keep_h
    t = lap("micro_batch_accumulation", t)

    # Reference run without offload/reload and without gradient checkpointing: same first 3 losses.
    engine_c, hf_keep_c = train_engine(gradient_checkpointing=False)
    result["losses_reference"] = [step(engine_c, k)[0] for k in range(3)]
    del engine_c, hf_keep_c
    t = lap("reference_run", t)

    # bf16 with fp32 gradient accumulation and 2 micro-batches per optimizer step (constant LR, 4 warmup steps).
    cfg_bf16 = ds_config.build_ds_config(
        zero_stage=3, bf16=True, grad_accum_dtype="fp32", micro_batch_size_per_rank=4, grad_accum_steps=2
    )
    engine_d, hf_keep_d = train_engine(cfg_bf16, warmup_steps=4)
    result["bf16_losses"] = [step(engine_d, k)[0] for k in range(4)]
    result["bf16_global_steps"] = engine_d.global_steps
    result["bf16_lr_after"] = engine_d.get_lr()[0]
    result["bf16_param_dtype"] = str(next(engine_d.module.parameters()).dtype)
    del engine_d, hf_keep_d
    t = lap("bf16_run", t)

    # Bucketed gather: identical to the full state dict, buckets within the limit, same order as named_parameters.
    limit = 300_000
    buckets = list(ds.iter_full_params(engine_b.module, limit))
    full = ds.gather_full_state_dict(engine_b.module)
    sizes = [(len(b), sum(x.numel() * x.element_size() for _, x in b)) for b in buckets]
    result["bucket_count"] = len(buckets)
    result["buckets_within_limit"] = all(n == 1 or s <= limit for n, s in sizes)
    names = [n for b in buckets for n, _ in b]
    result["bucket_names_match"] = names == [n for n, _ in engine_b.module.named_parameters()]
    result["bucket_tensors_equal"] = all(torch.equal(x, full[n]) for b in buckets for n, x in b)
    result["bucket_tensors_full"] = all(x.numel() > 0 for b in buckets for _, x in b)
    t = lap("gather", t)

    from transformers import AutoTokenizer

    eval_ids, eval_mask = batch(99)
    engine_b.eval()
    with torch.no_grad():
        engine_eval_loss = float(lm_loss(engine_b, eval_ids, eval_mask))
    hf_dir = hf_export.export_hf(engine_b, out / "hf", tokenizer=AutoTokenizer.from_pretrained(model_dir))
    result["hf_files"] = sorted(p.name for p in hf_dir.iterdir())
    t = lap("export_hf", t)

    # Frozen ZeRO-3 engine with parameter offload (before load_plain_model, which unsets the global HF config).
    eval_cfg = ds_config.build_ds_config(zero_stage=3, micro_batch_size_per_rank=4, train=False, offload_params=True)
    frozen_model, hf_keep_frozen = ds.load_causal_lm(model_dir, eval_cfg)
    frozen = ds.initialize_frozen(frozen_model, eval_cfg)
    with torch.no_grad():
        frozen_logits = frozen(input_ids=eval_ids, attention_mask=eval_mask).logits
    result["frozen_offload_skipped"] = ds.offload_states(frozen, force=True) == []
    result["frozen_training"] = frozen.module.training
    t = lap("frozen_engine", t)

    plain = ds.load_plain_model(model_dir)
    exported = ds.load_plain_model(str(hf_dir))
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    result["zero3_flag_restored"] = is_deepspeed_zero3_enabled()  # the live ZeRO-3 models keep their integration
    with torch.no_grad():
        plain_logits = plain(input_ids=eval_ids, attention_mask=eval_mask).logits
        result["export_loss_diff"] = abs(float(lm_loss(exported, eval_ids, eval_mask)) - engine_eval_loss)
    result["frozen_max_abs_diff"] = float((frozen_logits - plain_logits).abs().max())
    t = lap("plain_compare", t)
    TIMINGS["total_in_process"] = round(time.perf_counter() - T0, 3)
    result["timings"] = TIMINGS
    del hf_keep, hf_keep_b, hf_keep_frozen
    (out / "result.json").write_text(json.dumps(result, indent=1))
    print("probe-done", json.dumps(TIMINGS), flush=True)


EXPORT_SHARD_BYTES = 1_500_000  # the tiny model (~9 MB fp32) in several shards; a 2 MB embedding alone in one
EXPORT_BUCKET_BYTES = 600_000  # several all-gathers per shard


def allgathered_state(model) -> dict | None:
    """Every parameter through DeepSpeed's own ``GatheredParameters`` all-gather (the reference for the adapter's
    gather-to-rank-0 over gloo), rank 0 only."""
    import deepspeed
    import torch.distributed as dist

    state = {}
    for name, param in model.named_parameters():
        with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
            state[name] = param.data.detach().cpu().clone()
    return state if dist.get_rank() == 0 else None


def fast_gather_equals_allgather(model) -> bool | None:
    """``gather_params`` (one ``dist.gather`` of the partitions to rank 0 over gloo) is bit-equal to DeepSpeed's
    all-gather, in several buckets. ``None`` on other ranks."""
    import torch

    from reasonrl.distributed import deepspeed_engine as ds

    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    assert ds._gathers_partitions_to_rank0(list(params.values())), "gloo + ZeRO-3: the gather-to-rank-0 path runs"
    fast = {}
    for bucket in (names[:3], names[3:]):
        fast |= ds.gather_params(model, bucket)
    reference = allgathered_state(model)
    if reference is None:
        return None
    return sorted(fast) == sorted(reference) and all(torch.equal(fast[n], reference[n]) for n in reference)


def fast_gather_equal_after_a_step(model_dir: str, world: int) -> bool | None:
    """The same after an optimizer step (partitions updated by ZeRO-3's optimizer, persistent ones re-gathered)."""
    import torch

    from reasonrl.distributed import deepspeed_engine as ds

    cfg = ds_config.build_ds_config(zero_stage=3, micro_batch_size_per_rank=1, world_size=world)
    model, keep = ds.load_causal_lm(model_dir, cfg)
    engine = ds.initialize(model, cfg, ds.make_optimizer(model, 1e-2, ds_config=cfg))
    first = [n for n, _ in engine.module.named_parameters()][:1]
    before = ds.gather_params(engine.module, first)
    ids, mask = batch(0)
    ds.backward(engine, lm_loss(engine, ids, mask))
    ds.step(engine)
    equal = fast_gather_equals_allgather(engine.module)
    after = ds.gather_params(engine.module, first)  # collective: every rank
    del engine, model, keep
    if equal is None:
        return None
    return equal and all(not torch.equal(before[n], after[n]) for n in before)


def export_main(out_dir: str, rank: str, world_size: str, port: str, *model_dirs: str) -> None:
    from reasonrl.distributed import deepspeed_engine as ds
    from reasonrl.distributed import hf_export

    rank_, world = int(rank), int(world_size)
    ds.init_distributed(rank_, world, "127.0.0.1", int(port), timeout_s=120)
    cfg = ds_config.build_ds_config(zero_stage=3, micro_batch_size_per_rank=1, world_size=world, train=False)
    result = []
    for i, model_dir in enumerate(model_dirs):
        out = Path(out_dir) / str(i)
        model, hf_keep = ds.load_causal_lm(model_dir, cfg)
        state = allgathered_state(model)  # the former export: the whole model on rank 0 (DeepSpeed's all-gather) ...
        if state is not None:
            model.save_pretrained(out / "reference", state_dict=state)  # ... handed to save_pretrained
        del state
        single = hf_export.export_hf(model, out / "single")
        sharded = hf_export.export_hf(
            model, out / "sharded", max_shard_bytes=EXPORT_SHARD_BYTES, bucket_bytes=EXPORT_BUCKET_BYTES
        )
        # rank 0 cannot write (the folder is a file): it must still join every gather, then raise
        blocked = out / "blocked"
        if rank_ == 0:
            blocked.write_text("a file, not a folder")
        try:
            failed = hf_export.export_hf(model, blocked, max_shard_bytes=EXPORT_SHARD_BYTES)
            failed = failed and str(failed)
        except Exception as exc:
            failed = type(exc).__name__
        result.append(
            {
                "fast_gather_equal": fast_gather_equals_allgather(model),
                "fast_gather_equal_after_step": fast_gather_equal_after_a_step(model_dir, world) if i == 0 else None,
                "partitioned": list(dict(model.named_parameters())["model.embed_tokens.weight"].shape) == [0],
                "single": single and str(single),
                "sharded": sharded and str(sharded),
                "max_shard_bytes": EXPORT_SHARD_BYTES,
                "blocked": failed,
            }
        )
        del model, hf_keep
    (Path(out_dir) / f"rank{rank_}.json").write_text(json.dumps(result))
    # Both ranks leave the gloo group together, then exit without the interpreter's teardown: a C++ thread of the
    # communication stack aborted it about one run in ten ("terminate called without an active exception", -6),
    # after every result had been written.
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    print("probe-done", flush=True)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "export":
        export_main(*sys.argv[2:])
    else:
        main(*sys.argv[1:3])

"""Faults injected into a real weight sync, for the tests that prove the exact check names them (no production
code path exists for them): a bucket an engine never loads, and a layer an engine receives but does not apply.

The functions sent to the engine actors are closures, so Ray pickles them by value (this module is not importable
in the actors)."""

from __future__ import annotations

import ray

from reasonrl.distributed.weight_sync import WeightSyncer


class SkippingSyncer(WeightSyncer):
    """Sends every bucket, but the engines never load bucket ``skip`` (object-store transport: nothing waits)."""

    def __init__(self, *args, skip: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.skip = skip

    def engine_loads(self, k, layout, sent):
        if sent is None:
            raise ValueError("SkippingSyncer needs the object-store transport (a skipped broadcast would hang)")
        return [] if k == self.skip else super().engine_loads(k, layout, sent)


def drop_layer_on_apply(engine, prefix: str | None) -> None:
    """Every worker of ``engine`` records what it receives but applies nothing whose name starts with ``prefix``
    (a stale layer); ``prefix=None`` restores the real apply."""

    def patch(wrapper):
        worker = getattr(wrapper, "worker", wrapper)  # vLLM hands a callable its WorkerWrapperBase
        if prefix is None:
            worker.__dict__.pop("_reasonrl_apply", None)
            return
        real = type(worker)._reasonrl_apply

        def apply_without_layer(named):
            real(worker, [(name, tensor) for name, tensor in named if not name.startswith(prefix)])

        worker._reasonrl_apply = apply_without_layer

    ray.get(engine.__ray_call__.remote(lambda actor: actor.llm.collective_rpc(patch)))


def check_sync_faults(policy, engine, train_step, syncer: WeightSyncer) -> None:
    """On a real policy group and engine: after a training step each, (1) a sync whose engine never loads one
    bucket and (2) a sync whose engine leaves one decoder layer stale both raise WeightSyncError naming the
    tensors; (3) a correct sync then passes, with parameters checked and no partial-reload warning left."""
    import pytest

    from reasonrl.distributed.sync_checks import WeightSyncError

    syncer.run(None)  # the plan, and a correct sync of the current weights
    skip = len(syncer.buckets) // 2
    skipped = SkippingSyncer(
        policy,
        [engine],
        bucket_bytes=syncer.bucket_bytes,
        tol=syncer.tol,
        exact=syncer.exact,
        transport="object_store",
        verify_with=syncer.verify_with,
        skip=skip,
    )
    train_step()
    with pytest.raises(WeightSyncError, match=f"never received .*\\(bucket {skip}\\)") as missed:
        skipped.run(None)
    print(f"skipped bucket {skip}: {missed.value}")

    train_step()
    drop_layer_on_apply(engine, "model.layers.1.")
    try:
        with pytest.raises(WeightSyncError, match="model.layers.1.* do not hold what was received") as stale:
            syncer.run(None)
    finally:
        drop_layer_on_apply(engine, None)
    print(f"stale layer: {stale.value}")

    report = syncer.run(None)
    assert report.params_checked > 0
    print(f"correct sync: {report.params_checked} parameters checked, {report.reload_warnings_dropped} dropped")

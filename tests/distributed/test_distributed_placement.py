"""Placement groups of every mode started on real CPU bundles, refused before anything waits, or timed out and cleaned
up (the plans and the feasibility check themselves: ``tests/planning/test_planning_placement.py``)."""

from __future__ import annotations

import time

import pytest

from reasonrl.distributed.placement import build_placement, remove_placement
from reasonrl.planning.placement_layout import PlacementError, RoleResources, VLLMResources

R, V = RoleResources, VLLMResources


# ------------------------------------------------------------------------------------------- real Ray, CPU bundles
def live_groups() -> set[str]:
    from ray.util.placement_group import placement_group_table

    return {pg_id for pg_id, info in placement_group_table().items() if info["state"] != "REMOVED"}


# Small sizes: every actor is a new process, and this box has 2 cores (multi-bundle layouts are unit-tested above).
MODES = {
    "colocate_all": (  # five actors in one bundle, 1/5 of it each
        dict(colocate_all=True),
        dict(policy=R(1, 1), ref=R(1, 1), critic=R(1, 1), reward=R(1, 1), vllm=V(1, 1)),
        [("policy", "ref", "critic", "reward", "vllm")],
    ),
    "colocate_policy_ref": (
        dict(colocate_policy_ref=True),
        dict(policy=R(1, 2), ref=R(1, 2), critic=R(1, 1), reward=R(0, 1), vllm=V(1, 1)),
        [("policy", "ref"), ("critic",), ("vllm",)],
    ),
    "colocate_critic_reward": (
        dict(colocate_critic_reward=True),
        dict(policy=R(1, 1), ref=R(0, 1), critic=R(1, 2), reward=R(1, 2), vllm=V(1, 1)),
        [("policy",), ("critic", "reward"), ("vllm",)],
    ),
    "separate": (  # one engine with tp 2: two bundles, its actor on the first
        {},
        dict(policy=R(1, 2), ref=R(1, 1), critic=R(1, 1), reward=R(0, 1), vllm=V(1, 2)),
        [("policy",), ("ref",), ("critic",), ("vllm",)],
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize("mode", list(MODES))
def test_each_mode_starts_actors_on_cpu_bundles(ray_cluster, mode):
    import ray

    flags, roles, expected_sets = MODES[mode]
    before = live_groups()

    @ray.remote
    class Probe:
        def where(self) -> str:
            return ray.get_runtime_context().get_placement_group_id()

    # half a logical CPU per bundle: at most 3 CPUs, leaving room for the session's other placement group
    plan = build_placement(roles, device="cpu", cpus_per_bundle=0.5, ready_timeout_s=30, **flags)
    actors = []
    try:
        assert plan.device == "cpu"
        assert sorted(tuple(sorted(req.roles)) for req, _ in plan.groups) == sorted(
            tuple(sorted(s)) for s in expected_sets
        )
        assert set(plan.roles) == {r for s in expected_sets for r in s}
        assert len(live_groups() - before) == len(expected_sets)
        calls = {}
        for role, placement in plan.roles.items():
            expected = roles[role].num_engines if role == "vllm" else roles[role].world_size
            assert placement.num_actors == expected
            k = len(placement.colocated_with) + 1
            assert placement.num_gpus_per_actor == 0 and placement.num_cpus_per_actor == pytest.approx(0.5 / k, 1e-3)
            for i in range(placement.num_actors):
                actor = Probe.options(**placement.actor_options(i)).remote()
                actors.append(actor)
                calls[role, i] = actor.where.remote()
        results = dict(zip(calls, ray.get(list(calls.values()), timeout=60), strict=True))

        for (role, _), pg_id in results.items():  # every actor started, inside its role's group, and answered
            assert pg_id == plan[role].placement_group.id.hex()
        for group in expected_sets:  # colocated roles: same group, same bundles
            for role in group[1:]:
                assert plan[role].placement_group.id == plan[group[0]].placement_group.id
                if role != "vllm":
                    assert plan[role].bundle_indices == plan[group[0]].bundle_indices
        if "vllm" in roles and roles["vllm"].tensor_parallel_size > 1:
            tp = roles["vllm"].tensor_parallel_size
            assert plan["vllm"].engine_bundle_indices == [
                list(range(e * tp, (e + 1) * tp)) for e in range(roles["vllm"].num_engines)
            ]
        if mode == "colocate_all":  # the bundle hosts one rank of every role and the engine
            assert all(plan[r].bundle_indices == [0] for r in roles)
    finally:
        for actor in actors:
            ray.kill(actor)
        plan.remove()
    assert live_groups() == before
    plan.remove()  # idempotent


@pytest.mark.integration
@pytest.mark.parametrize(
    "roles, kwargs, words",
    [
        (dict(policy=R(1, 100)), dict(device="cpu"), ["policy: 1 node x 100 CPU devices", "100 CPU requested"]),
        (
            dict(policy=R(1, 2), ref=R(1, 2), vllm=V(1, 1)),
            dict(device="gpu", colocate_policy_ref=True),
            ["policy+ref (colocated): 1 node x 2 GPU = 2 GPU bundles", "3 GPU requested, the cluster has 0"],
        ),
    ],
)
def test_impossible_request_fails_fast_and_creates_nothing(ray_cluster, roles, kwargs, words):
    before = live_groups()
    start = time.perf_counter()
    with pytest.raises(PlacementError) as err:
        build_placement(roles, ready_timeout_s=60, **kwargs)
    elapsed = time.perf_counter() - start
    assert elapsed < 2, f"took {elapsed:.1f}s"
    msg = str(err.value)
    for word in words:
        assert word in msg, f"{word!r} missing from:\n{msg}"
    assert f"cluster has: 1 alive node with 0 GPU, {ray_cluster['CPU']:g} CPU" in msg
    assert live_groups() == before


@pytest.mark.integration
def test_resources_held_elsewhere_time_out_and_clean_up(ray_cluster):
    """The cluster is big enough but another group holds part of it: a bounded wait, then an error naming the role."""
    import ray
    from ray.util.placement_group import placement_group

    blocker = placement_group([{"CPU": 0.5}])
    ray.get(blocker.ready(), timeout=30)
    total = ray_cluster["CPU"]
    try:
        before = live_groups()
        start = time.perf_counter()
        # two groups of half the node's CPUs each: feasible, but both cannot be free while the blocker lives
        with pytest.raises(PlacementError) as err:
            build_placement(
                dict(policy=R(1, 1), ref=R(1, 1)), device="cpu", cpus_per_bundle=total / 2, ready_timeout_s=1
            )
        assert time.perf_counter() - start < 5
        msg = str(err.value)
        assert "not ready after" in msg and "held by other" in msg, msg
        bundle = f"1 node x 1 CPU devices = 1 CPU bundles of {{CPU: {total / 2:g}}}"
        assert f"waiting: policy: {bundle}" in msg or f"waiting: ref: {bundle}" in msg, msg
        assert live_groups() == before  # both groups of the failed call were removed
    finally:
        remove_placement([blocker])
    assert blocker.id.hex() not in live_groups()


@pytest.mark.gpu
@pytest.mark.integration
def test_colocated_roles_share_one_gpu(ray_cluster):
    """On a GPU host: policy, ref and one engine on one 1-GPU bundle, each holding a third of the same GPU."""
    import ray

    @ray.remote
    class Probe:
        def gpus(self) -> list:
            return [str(g) for g in ray.get_gpu_ids()]

    plan = build_placement(
        dict(policy=R(1, 1), ref=R(1, 1), vllm=V(1, 1)), colocate_all=True, device="gpu", ready_timeout_s=60
    )
    try:
        assert all(plan[r].num_gpus_per_actor == 0.3333 for r in ("policy", "ref", "vllm"))
        actors = [Probe.options(**plan[r].actor_options(0)).remote() for r in ("policy", "ref", "vllm")]
        seen = ray.get([a.gpus.remote() for a in actors], timeout=60)
        assert seen[0] == seen[1] == seen[2] and len(seen[0]) == 1, seen
        for a in actors:
            ray.kill(a)
    finally:
        plan.remove()

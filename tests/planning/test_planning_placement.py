"""The placement plan of every mode and its feasibility check on fake clusters (pure, no Ray); the groups started on
real CPU bundles: ``tests/distributed/test_distributed_placement.py``."""

from __future__ import annotations

import pytest

from reasonrl.planning.placement_layout import (
    PlacementError,
    RoleResources,
    VLLMResources,
    check_feasible,
    plan_groups,
)

R, V = RoleResources, VLLMResources


def fake_node(gpu: float = 0, cpu: float = 64, addr: str = "10.0.0.1", alive: bool = True) -> dict:
    """One entry shaped like ``ray.nodes()``."""
    resources = {"CPU": cpu, f"node:{addr}": 1.0, "memory": 1e11}
    if gpu:
        resources["GPU"] = gpu
    return {"NodeID": addr.replace(".", ""), "Alive": alive, "NodeManagerAddress": addr, "Resources": resources}


def cluster(*nodes: dict) -> tuple[dict, list[dict]]:
    totals: dict[str, float] = {}
    for n in nodes:
        if n["Alive"]:
            for k, v in n["Resources"].items():
                totals[k] = totals.get(k, 0) + v
    return totals, list(nodes)


def full(n: int, d: int, **extra) -> dict:
    """All four DeepSpeed roles at ``n x d`` plus ``extra`` (e.g. vllm=V(...))."""
    return dict(policy=R(n, d), ref=R(n, d), critic=R(n, d), reward=R(n, d)) | extra


# ------------------------------------------------------------------------------------------- planning (no Ray)
def test_colocate_all_is_one_group_shared_by_every_role_with_fractional_gpus():
    (group,) = plan_groups(full(2, 4, vllm=V(4, 2)), colocate_all=True, device="gpu")
    assert group.roles == ("policy", "ref", "critic", "reward", "vllm")
    assert group.num_bundles == 8 and group.bundle == {"GPU": 1.0, "CPU": 1.0}
    assert group.strategy == "PACK"
    assert all(group.actors[r] == tuple((i,) for i in range(8)) for r in ("policy", "ref", "critic", "reward"))
    assert group.actors["vllm"] == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert group.node_local_blocks == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert group.num_gpus_per_actor == 0.2 and group.num_cpus_per_actor == 0.2
    assert "2 nodes x 4 GPU = 8 GPU bundles" in group.describe()


@pytest.mark.parametrize("k, share", [(2, 0.5), (3, 0.3333), (4, 0.25), (5, 0.2)])
def test_shares_of_a_bundle_always_fit(k, share):
    roles = dict(policy=R(1, 1), ref=R(1, 1), critic=R(1, 1), reward=R(1, 1), vllm=V(1, 1))
    for name in list(roles)[k - 1 : 4]:  # drop DeepSpeed roles until k roles share the bundle
        roles[name] = R(0, 1)
    (group,) = plan_groups(roles, colocate_all=True, device="gpu")
    assert len(group.roles) == k and group.num_gpus_per_actor == share and share * k <= 1


def test_pairs_and_separate_groups():
    roles = dict(policy=R(2, 8), ref=R(2, 8), critic=R(1, 8), reward=R(1, 4), vllm=V(4, 2))
    pair = plan_groups(roles, colocate_policy_ref=True, device="gpu")
    assert [g.roles for g in pair] == [("policy", "ref"), ("critic",), ("reward",), ("vllm",)]
    assert [g.num_bundles for g in pair] == [16, 8, 4, 8]
    assert [g.num_gpus_per_actor for g in pair] == [0.5, 1, 1, 1]
    assert pair[0].describe().startswith("policy+ref (colocated): 2 nodes x 8 GPU = 16 GPU bundles")
    assert pair[3].describe().startswith("vllm: 4 engines x tp 2 = 8 GPU bundles")

    separate = plan_groups(roles | {"reward": R(0, 1)}, device="cpu", cpus_per_bundle=2)
    assert [g.roles for g in separate] == [("policy",), ("ref",), ("critic",), ("vllm",)]
    assert all(g.bundle == {"CPU": 2.0} and g.num_gpus_per_actor == 0 and g.num_cpus_per_actor == 2 for g in separate)

    both = plan_groups(roles | {"reward": R(1, 8)}, colocate_policy_ref=True, colocate_critic_reward=True, device="cpu")
    assert [g.roles for g in both] == [("policy", "ref"), ("critic", "reward"), ("vllm",)]
    # a disabled partner leaves its pair alone (GRPO: no critic; no reward model)
    alone = plan_groups(dict(policy=R(1, 2), ref=R(1, 2), vllm=V(2)), colocate_critic_reward=True, device="cpu")
    assert [g.roles for g in alone] == [("policy",), ("ref",), ("vllm",)]


@pytest.mark.parametrize(
    "roles, flags, words",
    [
        (dict(policy=R(2, 8), ref=R(1, 8)), dict(colocate_policy_ref=True), ["colocate_policy_ref", "policy", "ref"]),
        (
            dict(policy=R(1, 8), critic=R(1, 8), reward=R(1, 4)),
            dict(colocate_critic_reward=True),
            ["colocate_critic_reward", "critic (1 node x 8 GPU)", "reward (1 node x 4 GPU)"],
        ),
        (full(1, 8, critic=R(1, 4)), dict(colocate_all=True), ["colocate_all", "critic"]),
        (dict(policy=R(1, 8), vllm=V(2, 2)), dict(colocate_all=True), ["2 engines x tp 2 = 4", "policy", "= 8"]),
        (dict(policy=R(2, 4), vllm=V(1, 8)), dict(colocate_all=True), ["tensor_parallel_size 8", "devices_per_node 4"]),
        (dict(ref=R(1, 1)), {}, ["policy"]),
        (dict(policy=R(1, 0)), {}, ["policy.devices_per_node"]),
        (dict(policy=R(1, 1), vllm=V(1, 0)), {}, ["vllm.tensor_parallel_size"]),
        (dict(policy=R(-1, 1)), {}, ["policy.num_nodes"]),
        (dict(policy=R(1, 1), actor=R(1, 1)), {}, ["unknown role", "actor"]),
        (dict(policy=V(1, 1)), {}, ["policy", "RoleResources"]),
    ],
)
def test_invalid_requests_name_the_roles(roles, flags, words):
    with pytest.raises(PlacementError) as err:
        plan_groups(roles, device="gpu", **flags)
    for word in words:
        assert word in str(err.value)


# ------------------------------------------------------------------------------------------- feasibility (no Ray)
def test_feasible_requests_pass():
    one_node = cluster(fake_node(gpu=8, cpu=64))
    check_feasible(plan_groups(full(1, 8, vllm=V(8)), colocate_all=True, device="gpu"), *one_node)
    check_feasible(plan_groups(dict(policy=R(1, 4), ref=R(1, 4)), device="gpu"), *one_node)
    check_feasible(plan_groups(dict(policy=R(1, 2), vllm=V(1, 4)), device="gpu"), *one_node)
    two_nodes = cluster(fake_node(8, 64, "10.0.0.1"), fake_node(8, 64, "10.0.0.2"))
    check_feasible(plan_groups(dict(policy=R(2, 8), ref=R(2, 8)), colocate_policy_ref=True, device="gpu"), *two_nodes)
    check_feasible(plan_groups(dict(policy=R(1, 8), vllm=V(2, 4)), device="gpu"), *two_nodes)
    # CPU bundles on a GPU cluster and on an oversubscribed CPU box
    check_feasible(plan_groups(full(1, 4, vllm=V(1)), device="cpu"), *one_node)
    check_feasible(plan_groups(full(1, 2, vllm=V(2)), colocate_all=True, device="cpu"), *cluster(fake_node(cpu=2)))
    # without ray.nodes(), the totals are taken as one node
    check_feasible(plan_groups(dict(policy=R(1, 8)), device="gpu"), {"GPU": 8, "CPU": 8}, None)


def test_the_motivating_example_message():
    reqs = plan_groups(dict(policy=R(2, 8), ref=R(2, 8)), colocate_policy_ref=True, device="gpu")
    with pytest.raises(PlacementError) as err:
        check_feasible(reqs, *cluster(fake_node(gpu=8, cpu=64)))
    msg = str(err.value)
    assert "policy+ref (colocated): 2 nodes x 8 GPU = 16 GPU bundles" in msg
    assert "cluster has: 1 alive node with 8 GPU, 64 CPU" in msg
    assert "16 GPU requested, the cluster has 8" in msg
    assert "ray start --address=" in msg and "num_nodes" in msg


@pytest.mark.parametrize(
    "roles, flags, device, nodes, words",
    [
        # GPU bundles on a CPU-only cluster
        (dict(policy=R(1, 2)), {}, "gpu", [fake_node(cpu=8)], ["0 GPU", "2 GPU requested", "device='cpu'"]),
        # separate groups fit one by one but not together (8 + 8 + 4 GPU on 16)
        (
            dict(policy=R(1, 8), critic=R(1, 8), vllm=V(2, 2)),
            {},
            "gpu",
            [fake_node(8, 64, "a"), fake_node(8, 64, "b")],
            ["policy:", "critic:", "vllm: 2 engines x tp 2", "20 GPU requested, the cluster has 16", "colocate"],
        ),
        # a dead node does not count
        (
            dict(policy=R(2, 8)),
            {},
            "gpu",
            [fake_node(8, 64, "a"), fake_node(8, 64, "b", alive=False)],
            ["1 alive node with 8 GPU", "16 GPU requested"],
        ),
        # enough GPUs in total, but too few CPUs next to them for {GPU: 1, CPU: 4} bundles
        (dict(policy=R(1, 8)), dict(cpus_per_bundle=4), "gpu", [fake_node(8, 16)], ["32 CPU requested"]),
        # enough in total, but each node's CPUs only fit 2 of the 1-GPU bundles
        (
            dict(policy=R(1, 5)),
            dict(cpus_per_bundle=3),
            "gpu",
            [fake_node(4, 8, "a"), fake_node(4, 8, "b")],
            ["room for 4", "per node: [2, 2]"],
        ),
        # tp 8 needs 8 devices on one node; two 4-GPU nodes have 8 in all
        (
            dict(policy=R(1, 1), vllm=V(1, 8)),
            {},
            "gpu",
            [fake_node(4, 64, "a"), fake_node(5, 64, "b")],
            ["vllm: 1 engine x tp 8", "8 tensor-parallel bundles on one node", "largest has 5"],
        ),
        # a CPU bundle bigger than any node
        (dict(policy=R(1, 1)), dict(cpus_per_bundle=16), "cpu", [fake_node(cpu=8)], ["16 CPU requested"]),
        (
            dict(policy=R(2, 1)),
            dict(cpus_per_bundle=6),
            "cpu",
            [fake_node(cpu=8, addr="a"), fake_node(cpu=8, addr="b", alive=False), fake_node(cpu=4, addr="c")],
            ["room for 1", "2 alive nodes with 0 GPU, 12 CPU", "--num-cpus"],
        ),
        # no alive node at all
        (dict(policy=R(1, 1)), {}, "cpu", [fake_node(cpu=8, alive=False)], ["no alive node", "1 CPU requested"]),
    ],
)
def test_infeasible_requests_name_roles_asks_and_cluster(roles, flags, device, nodes, words):
    reqs = plan_groups(roles, device=device, **flags)
    with pytest.raises(PlacementError) as err:
        check_feasible(reqs, *cluster(*nodes))
    msg = str(err.value)
    for word in words:
        assert word in msg, f"{word!r} missing from:\n{msg}"
    assert "to fix:" in msg and "policy" in msg


def test_a_bundle_that_fits_on_no_node_is_named():
    reqs = plan_groups(dict(policy=R(1, 1)), device="gpu", cpus_per_bundle=9)
    with pytest.raises(PlacementError, match="fits on no alive node"):
        check_feasible(reqs, *cluster(fake_node(1, 8, "a"), fake_node(0, 64, "b")))

"""The package layout of ARCHITECTURE.md, checked statically: no import cycle between reasonrl modules, and the
layering: ``dataplane/`` at the bottom, ``distributed/`` below ``config/`` and the loop, the loop (``loop/``: the step
only) below the run layer (``run/``: a run's life, start-up and the checks before start), the run layer below the entry
points only, and what ``config/``, ``algos/`` and ``rewards/`` may import.

Every ``import`` / ``from ... import`` of every module counts, at the top of the file and inside functions (a lazy
import is still a dependency), relative ones resolved; imports under ``if TYPE_CHECKING:`` do not (they never run).
Importing ``a.b.c`` from outside package ``a.b`` also runs ``a.b/__init__.py`` (and ``a/__init__.py``), so the graph
has those edges too. No module is imported: the files are parsed with ``ast``.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

import reasonrl

PACKAGE_ROOT = Path(reasonrl.__file__).parent

# Known import cycles outside the files of this change, each broken here at ONE named edge so that every other cycle
# still fails the test; the lead removes an entry when the cycle is fixed (a stale entry fails the test too).
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}

# What config/ may import besides the standard library and itself (ARCHITECTURE.md: "stdlib; names of other
# packages' registries, never their builders").
CONFIG_THIRD_PARTY = {
    "huggingface_hub",  # reasonrl.config.model_paths: Hub ids -> cached snapshot folders (imported lazily)
    "torch",  # reasonrl.config.probes: counts local GPUs, lazily and only when a GPU driver is present
    "yaml",  # reasonrl.config.overrides: config=<file.yaml>
}
CONFIG_REGISTRY_NAMES = {
    "reasonrl.data.loader.PRESETS",
    "reasonrl.rewards.extract.EXTRACT_MODES",
    "reasonrl.utils.tracking.TRACKERS",
}
# Imports of config/ that reach up for more than a registry's names, each lazy (inside a function) and justified in
# one line; the lead moves each behind a registry (or out of config/) and removes its entry (a stale entry fails).
KNOWN_CONFIG_REACH_UP = {
    # cli.py: `python -m reasonrl.config` (a command, not a check of config/) validates a config as a run does, its
    # data sources too (reasonrl.run.checks.validate_run passes the same checks; validate() itself never reads data)
    "reasonrl.data.source_checks.data_problems",
    # mapping.py: BasePPOExpConfig.policy_loss_config() & co. build the losses' and rewards' own settings from the
    # fields (each DeepSpeed role's WorkerConfig is built in the run layer: reasonrl.run.role_settings)
    "reasonrl.algos.loss_settings.PolicyLossConfig",  # cfg.policy_loss_config(): the losses' settings, once per run
    "reasonrl.algos.loss_settings.ValueLossConfig",  # cfg.value_loss_config()
    "reasonrl.rewards.shaping.RewardConfig",  # cfg.reward_config(): the reward shaping's own dataclass
    "reasonrl.rewards.code.CodeRewardConfig",  # cfg.code_reward_config(): the code reward's own dataclass
}
# Modules below config/ that config/ may build on: standard library and third-party only, no other reasonrl module
# (checked below), so that actors can use them without importing config/ (distributed/ never does).
CONFIG_BUILDS_ON = {
    "reasonrl.utils.hints",  # the "did you mean" hint and the empty-list-item problem, shared with data/'s checks
    "reasonrl.utils.hub",  # Hub ids and the HF cache of this process: the driver pins with it, each actor resolves
    "reasonrl.utils.cpus",  # the logical CPUs of a local Ray instance: init_ray starts it so, validation checks it
    "reasonrl.utils.even_split",  # the one even split: mini-batch bounds here, engines and ranks in the loop
    "reasonrl.utils.pysource",  # what a Python file defines, read with ast: env_fn refused without importing it
}
# The pure planners (memory model, placement layout, feasibility, device phases): below config/ and distributed/, which
# both call them; standard library only (checked below), so they import in milliseconds and know no Ray, torch or vLLM.
PLANNING = "reasonrl.planning"
# The packages distributed/ builds on: it never imports config/ (what a worker, the memory model or the Ray helpers
# need arrives as plain values or dataclasses of distributed/'s own), the loop, sft/ or an entry point.
DISTRIBUTED_BUILDS_ON = {
    "reasonrl.algos",  # the workers' losses
    "reasonrl.dataplane",  # what the workers read and return: Experience, RaggedShard, Sample, Completion
    "reasonrl.models",  # HF model helpers: log-probs, critic head, batching, attention choice
    "reasonrl.planning",  # placement plans, the device phases' residency table
    "reasonrl.utils",  # Hub cache, worker logs
}
# The modules at the top of reasonrl/ that users type (python -m ...): the only importers of the loop from outside it.
ENTRY_POINTS = {
    "reasonrl.exp",
    "reasonrl.eval",
    "reasonrl.demo",
    "reasonrl.gpu_check",
    "reasonrl.prepare",
    "reasonrl.reward_server",
}
# The run layer: between the entry points and the loop. It may import the loop; only the entry points import it.
RUN_LAYER = "reasonrl.run"
# What starts, restarts or checks a run before it starts: the run layer's, never imported by the loop, which holds the
# step only (the step's own Ray calls and checkpoint writes stay in the loop).
START_UP = {
    "reasonrl.distributed.failures",  # dead actors -> restart
    "reasonrl.distributed.model_check",  # the models on every node, before start
    "reasonrl.distributed.shared_dirs",  # the checkpoint folder shared by the nodes that write it, before start
    "reasonrl.distributed.placement",  # placement groups
    "reasonrl.distributed.ray_cluster",  # ray.init / shutdown
    "reasonrl.run",
    "reasonrl.sft",  # the warm start's registration of offline models
    "reasonrl.utils.reaper",  # workers of a killed driver
}
FORBIDDEN_IN_REWARDS = {"ray", "deepspeed", "vllm"}
# The only reasonrl packages rewards/ builds on (ARCHITECTURE.md: "sandbox, stdlib"): never data/, the loop or the run
# layer; what reward routing needs from them arrives as a value (the config's gym: sources: rewards.routing.GymSources).
REWARDS_BUILD_ON = {
    "reasonrl.sandbox",  # code verdicts: programs run in the sandbox
    "reasonrl.utils",  # resolve_callable: file.py:fn / pkg.mod:fn of reward functions
}


@dataclass
class Module:
    name: str  # dotted, e.g. reasonrl.config.base (a package: reasonrl.config)
    path: Path
    imports: list[str] = field(default_factory=list)  # every imported name, dotted: "torch", "reasonrl.sft.config"


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, at any depth, except those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.orelse:
                    visit(ast.Module(body=[statement], type_ignores=[]))
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def _imported_names(module: str, is_package: bool, tree: ast.AST) -> list[str]:
    """Dotted names imported by ``module``: ``import a.b`` -> ``a.b``; ``from a.b import c`` -> ``a.b.c``;
    relative imports resolved against the module's package."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
        names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def load_modules() -> dict[str, Module]:
    modules = {}
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        name, is_package = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules[name] = Module(name, path, _imported_names(name, is_package, tree))
    return modules


def _owner(name: str, modules: dict[str, Module]) -> str | None:
    """The reasonrl module that ``name`` lives in (``reasonrl.config.base.BasePPOExpConfig`` -> ``...base``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def module_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """``module -> modules it makes Python run``: the imported module and the packages above it that do not
    contain the importer (their ``__init__`` runs first)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module in modules.values():
        for name in module.imports:
            target = _owner(name, modules) if name.startswith("reasonrl.") else None
            while target and target != module.name and not module.name.startswith(target + "."):
                graph[module.name].add(target)
                target = target.rpartition(".")[0]
    return graph


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to reasonrl's first-level packages and top-level modules (``reasonrl.config``,
    ``reasonrl.loop.trainer``, ...); ``reasonrl`` itself is left out."""

    def top(name: str) -> str:
        return ".".join(name.split(".")[:2])

    packages: dict[str, set[str]] = {}
    for source, targets in graph.items():
        if source != "reasonrl":
            packages.setdefault(top(source), set()).update(top(t) for t in targets if t != "reasonrl")
    return {name: targets - {name} for name, targets in packages.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle ``[a, b, ..., a]`` of ``graph``, or None (depth-first search, sorted for stable output)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def _top(name: str) -> str:
    return name.split(".")[0]


def _outside(modules: dict[str, Module], package: str) -> dict[str, set[str]]:
    """``imported name -> files`` for every import of ``reasonrl.<package>`` modules that leaves the package and the
    standard library."""
    found: dict[str, set[str]] = {}
    for module in modules.values():
        if module.name != f"reasonrl.{package}" and not module.name.startswith(f"reasonrl.{package}."):
            continue
        for name in module.imports:
            if _top(name) in sys.stdlib_module_names or name.startswith(f"reasonrl.{package}."):
                continue
            found.setdefault(name, set()).add(module.path.name)
    return found


# ------------------------------------------------------------------------------------------------- tests
def test_the_scanner_sees_lazy_relative_and_package_imports():
    modules = load_modules()
    graph = module_graph(modules)
    # lazy (function-level) import: the runner's tokenizer loader fills the offline-model registry
    assert "reasonrl.sft.warm_start" in graph["reasonrl.run.lifecycle"]
    # importing reasonrl.config.errors from outside runs reasonrl/config/__init__.py first
    assert "reasonrl.config" in graph["reasonrl.sft.config"]
    tree = ast.parse("from . import base\nfrom ..utils import paths\nif TYPE_CHECKING:\n    import torch\n")
    assert _imported_names("reasonrl.config.x", False, tree) == ["reasonrl.config.base", "reasonrl.utils.paths"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_between_modules():
    graph = module_graph(load_modules())
    for (source, target), why in KNOWN_CYCLE_EDGES.items():
        assert target in graph[source], f"stale KNOWN_CYCLE_EDGES entry {source} -> {target} ({why}): remove it"
        graph[source].discard(target)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycle_between_packages():
    """Collapsed to reasonrl's packages (and top-level modules), the graph has no cycle either: two packages never
    import each other, directly or around a loop, lazily or not."""
    cycle = find_cycle(package_graph(module_graph(load_modules())))
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def test_package_graph_places_config_at_the_bottom():
    packages = package_graph(module_graph(load_modules()))
    assert "reasonrl.sft" not in packages["reasonrl.config"]  # config never imports the warm start's trainer
    above = {f"reasonrl.{name}" for name in ("distributed", "models", "sft", "loop", "run", "agents", "dataplane")}
    assert not packages["reasonrl.config"] & above, "config/ sits below the packages that start, train or load models"
    assert "reasonrl.config" not in packages["reasonrl.models"]  # models/named.BUILDERS: a table the runners register
    assert "reasonrl.config" in packages["reasonrl.sft"]


def test_config_imports_stdlib_itself_and_registry_names_only():
    outside = _outside(load_modules(), "config")
    stale = KNOWN_CONFIG_REACH_UP - set(outside)
    assert not stale, f"fixed, remove from KNOWN_CONFIG_REACH_UP: {sorted(stale)}"
    bad = {
        name: files
        for name, files in outside.items()
        if _top(name) not in CONFIG_THIRD_PARTY
        and name not in CONFIG_REGISTRY_NAMES | KNOWN_CONFIG_REACH_UP
        and name.rpartition(".")[0] not in CONFIG_BUILDS_ON
        and not name.startswith(PLANNING + ".")
    }
    assert not bad, f"config/ imports beyond the standard library and registry names: {bad}"


def test_what_config_builds_on_imports_no_reasonrl_module():
    modules = load_modules()
    for name in CONFIG_BUILDS_ON:
        inside = [i for i in modules[name].imports if i.startswith("reasonrl.")]
        assert not inside, f"{name} is below config/ and distributed/: it must not import {inside}"


def test_the_planners_import_the_standard_library_only():
    outside = _outside(load_modules(), "planning")
    assert not outside, (
        f"planning/ is pure (standard library only: no Ray, torch, vLLM or other reasonrl package): {outside}"
    )


def test_agents_import_no_reward_code():
    packages = package_graph(module_graph(load_modules()))
    assert "reasonrl.rewards" not in packages["reasonrl.agents"], "agents/ loads specs with reasonrl.utils.callables"


def test_algos_import_torch_only():
    bad = {name: files for name, files in _outside(load_modules(), "algos").items() if _top(name) != "torch"}
    assert not bad, f"algos/ is pure tensor math (torch only): {bad}"


def test_rewards_import_no_ray_deepspeed_or_vllm():
    outside = _outside(load_modules(), "rewards")
    bad = {name: files for name, files in outside.items() if _top(name) in FORBIDDEN_IN_REWARDS}
    bad |= {name: files for name, files in outside.items() if name.startswith("reasonrl.distributed")}
    assert not bad, f"rewards/ must stay free of Ray, DeepSpeed and vLLM: {bad}"


def test_rewards_build_on_the_sandbox_and_utils_only():
    outside = _outside(load_modules(), "rewards")
    bad = {
        name: files
        for name, files in outside.items()
        if name.startswith("reasonrl.") and not any(_in(name, package) for package in REWARDS_BUILD_ON)
    }
    assert not bad, f"rewards/ (reward routing included) imports no other reasonrl package: {bad}"
    assert "reasonrl.rewards.routing" in load_modules()  # the routing of rewards per data_source lives in rewards/


def test_the_top_of_reasonrl_holds_entry_points_and_packages_only():
    top = {path.stem for path in PACKAGE_ROOT.glob("*.py")} - {"__init__"}
    assert {f"reasonrl.{name}" for name in top} == ENTRY_POINTS, (
        "a module at the top of reasonrl/ that is no entry point"
    )


def test_the_data_plane_is_at_the_bottom():
    outside = _outside(load_modules(), "dataplane")
    bad = {name: files for name, files in outside.items() if _top(name) not in {"torch", "numpy"}}
    assert not bad, f"dataplane/ sits below the loop and the workers (torch and numpy only): {bad}"


def test_distributed_imports_neither_config_nor_the_loop():
    packages = package_graph(module_graph(load_modules()))
    bad = packages["reasonrl.distributed"] - DISTRIBUTED_BUILDS_ON
    assert not bad, f"distributed/ reaches up into {sorted(bad)}; pass plain values or its own dataclasses instead"


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _importers(graph: dict[str, set[str]], package: str) -> dict[str, list[str]]:
    """``module -> the modules of package it imports``, for every module outside ``package``."""
    found = {
        module: sorted(t for t in targets if _in(t, package))
        for module, targets in graph.items()
        if not _in(module, package)
    }
    return {module: targets for module, targets in found.items() if targets}


def test_only_the_run_layer_and_entry_points_import_the_loop():
    bad = {
        module: targets
        for module, targets in _importers(module_graph(load_modules()), "reasonrl.loop").items()
        if module not in ENTRY_POINTS and not _in(module, RUN_LAYER)
    }
    assert not bad, f"the loop is imported only by the run layer and the entry points {sorted(ENTRY_POINTS)}: {bad}"


def test_only_entry_points_import_the_run_layer():
    bad = {m: t for m, t in _importers(module_graph(load_modules()), RUN_LAYER).items() if m not in ENTRY_POINTS}
    assert not bad, f"the run layer sits under the entry points {sorted(ENTRY_POINTS)} only: {bad}"


def test_the_loop_holds_the_step_only():
    modules = load_modules()
    graph = module_graph(modules)
    bad = {
        module: sorted(t for t in targets if any(_in(t, s) for s in START_UP))
        for module, targets in graph.items()
        if _in(module, "reasonrl.loop")
    }
    bad = {module: targets for module, targets in bad.items() if targets}
    assert not bad, f"the loop starts, restarts or checks a run (the run layer's job, reasonrl/run/): {bad}"
    assert all(_in(name, RUN_LAYER) for name in START_UP if name.startswith("reasonrl.run"))
    assert {"reasonrl.run.lifecycle", "reasonrl.run.launch"} <= set(modules)


# How a driver calls an actor: Ray's ``actor.method.remote(...)`` (``.options(...)`` before it) and WorkerGroup's
# method-name calls. The loop makes none of them: it calls the typed role handles (reasonrl.distributed.handles).
ACTOR_CALLS = {"remote", "options", "call", "call_async", "call_sharded", "call_sharded_async"}


def test_the_loop_calls_workers_through_typed_handles_only():
    bad: dict[str, list[str]] = {}
    for path in sorted((PACKAGE_ROOT / "loop").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ACTOR_CALLS:
                bad.setdefault(path.name, []).append(f"line {node.lineno}: {ast.unparse(node.func)}")
    assert not bad, f"the loop calls workers by method name (use a handle of distributed/handles.py): {bad}"

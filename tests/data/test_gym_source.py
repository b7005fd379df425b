"""reasoning-gym tasks named as data sources (``gym:<task>:size=..:seed=..:<option>=..``): parsing, checks that
name the source and the fix, deterministic rows, and the identity the train/eval overlap check compares."""

from __future__ import annotations

import builtins

import pytest

pytest.importorskip("reasoning_gym")

from playground.tiny_ppo_cpu import TinyPPOCPUConfig  # noqa: E402
from reasonrl.data.gym_source import (  # noqa: E402
    DEFAULT_SEED,
    DEFAULT_SIZE,
    canonical_gym_source,
    check_gym_source,
    gym_source_identity,
    gym_source_rows,
    is_gym_source,
    parse_gym_source,
)
from reasonrl.data.overlap import shared_sources  # noqa: E402
from reasonrl.data.source_checks import data_source_problems  # noqa: E402
from reasonrl.data.sources import DataFormatError  # noqa: E402


def test_is_gym_source():
    assert is_gym_source("gym:chain_sum") and is_gym_source("gym:")
    assert not is_gym_source("gsm8k_train") and not is_gym_source("data/gym:x.jsonl")


def test_parse_defaults_and_options():
    spec = parse_gym_source("gym:chain_sum")
    assert (spec.task, spec.size, spec.seed, spec.options) == ("chain_sum", DEFAULT_SIZE, DEFAULT_SEED, ())
    assert (DEFAULT_SIZE, DEFAULT_SEED) == (1000, 0)
    spec = parse_gym_source("gym:chain_sum:size=20:seed=7:max_terms=3:allow_negation=true:min_terms=2")
    assert (spec.size, spec.seed) == (20, 7)
    assert spec.options == (("allow_negation", True), ("max_terms", 3))  # min_terms=2 is the default: dropped
    assert parse_gym_source("gym:countdown:operators=+|-").options == (("operators", ["+", "-"]),)
    assert parse_gym_source("gym:leg_counting:max_animals=4").options == (("max_animals", 4),)
    assert parse_gym_source("gym:basic_arithmetic:operators=+|-").options == (("operators", ["+", "-"]),)
    assert not parse_gym_source("gym:simple_integration:allow_unsafe_scorer=true").options


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("gym:", "no task name"),
        ("gym:chain_sums", "no task 'chain_sums'; did you mean chain_sum.*python -m reasonrl.data.gym_source"),
        ("gym:chain_sum:size=0", "size=0 must be >= 1"),
        ("gym:chain_sum:size=big", "size='big' is not an integer"),
        ("gym:chain_sum:seed=-1", "seed=-1 must be >= 0"),
        ("gym:chain_sum:min_term=2", "no option 'min_term'; did you mean 'min_terms'.*max_digits=4"),
        ("gym:chain_sum:min_terms=5:max_terms=3", "not valid for chain_sum: max_terms must be >= min_terms"),
        ("gym:chain_sum:allow_negation=maybe", "is not a boolean"),
        ("gym:chain_sum:seed", "'seed' is not key=value"),
        ("gym:chain_sum:seed=1:seed=2", "'seed' is given twice"),
        ("gym:simple_integration", "eval/sympy parse_expr.*allow_unsafe_scorer=true"),
        ("gym:time_intervals:min_date=2000-01-01", "holds a date, which a source string cannot give"),
        ("gym:aiw:task_types=siblings", "holds a list, which a source string cannot give"),
        ("gym:gsm_symbolic:difficulty=0.5", "not valid for gsm_symbolic: AssertionError at `assert 1.0 <= self.diff"),
    ],
)
def test_check_refuses_with_the_fix(source, message):
    with pytest.raises(DataFormatError, match=message) as info:
        check_gym_source(source)
    assert repr(source) in str(info.value)  # the message names the source


def test_missing_package_says_how_to_install(monkeypatch):
    real_import = builtins.__import__

    def no_gym(name, *args, **kwargs):
        if name.startswith("reasoning_gym"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gym)
    with pytest.raises(DataFormatError, match=r"pip install -e \.\[gym\]"):
        check_gym_source("gym:chain_sum")


def test_rows_are_deterministic_per_seed_and_routable():
    rows = gym_source_rows("gym:chain_sum:size=5:seed=7:max_terms=3")
    assert len(rows) == 5 and rows == gym_source_rows("gym:chain_sum:size=5:seed=7:max_terms=3")
    assert rows != gym_source_rows("gym:chain_sum:size=5:seed=100:max_terms=3")
    assert rows[0]["gym"] == {"name": "chain_sum", "seed": 7, "size": 5, "config": '{"max_terms": 3}', "index": 0}
    assert all(r["question"] and r["answer"] for r in rows)
    # reasoning-gym draws entry i from seed + i: seed 8 starts where seed 7 was one entry in
    assert gym_source_rows("gym:chain_sum:size=2:seed=8:max_terms=3")[0]["question"] == rows[1]["question"]


def test_identity_is_the_range_of_entry_seeds():
    a = gym_source_identity("gym:chain_sum:size=10:seed=0")
    assert len(a) == 10 and a == gym_source_identity("gym:chain_sum:seed=0:size=10:min_terms=2")  # default option
    assert a & gym_source_identity("gym:chain_sum:size=10:seed=9")  # [0, 10) and [9, 19) share seed 9
    assert not a & gym_source_identity("gym:chain_sum:size=10:seed=10")
    assert not a & gym_source_identity("gym:chain_sum:size=10:seed=0:max_terms=3")  # other options: other entries
    assert not a & gym_source_identity("gym:basic_arithmetic:size=10:seed=0")
    with pytest.raises(DataFormatError, match="no task"):
        gym_source_identity("gym:nope")


def test_overlap_check_refuses_shared_seeds():
    shared = shared_sources(["gym:chain_sum:size=100"], ["gym:chain_sum:size=20", "gym:chain_sum:size=20:seed=100"])
    assert [(t, e) for t, e, _ in shared] == [("gym:chain_sum:size=100", "gym:chain_sum:size=20")]
    assert "chain_sum entry of seed" in shared[0][2]


def test_config_with_gym_sources_validates():
    ok = TinyPPOCPUConfig(train_data=["gym:chain_sum:size=200:seed=0"], eval_data=["gym:chain_sum:size=50:seed=200"])
    assert data_source_problems(ok) == []
    same_seed = TinyPPOCPUConfig(train_data=["gym:chain_sum:size=200"], eval_data=["gym:chain_sum:size=50"])
    assert any("would train on its evaluation set" in p for p in data_source_problems(same_seed))
    bad = TinyPPOCPUConfig(train_data=["gym:chain_sum:min_term=3"], eval_data=[])
    assert any("no option 'min_term'" in p for p in data_source_problems(bad))


def test_canonical_spelling():
    canonical = canonical_gym_source("gym:basic_arithmetic:operators=+|-:allow_parentheses=false:min_terms=2")
    assert canonical == "gym:basic_arithmetic:size=1000:seed=0:allow_parentheses=false:operators=+|-"
    assert canonical_gym_source(canonical) == canonical
    assert parse_gym_source(canonical) == parse_gym_source("gym:basic_arithmetic:allow_parentheses=0:operators=+|-")


_ALONE_CHILD = """
import json, sys
from reasonrl.data.gym_source import _task_index, parse_gym_source, DataFormatError
index = _task_index()
sources = ("gym:chain_sum:max_terms=3", "gym:gsm_symbolic", "gym:acre", "gym:knights_knaves")
specs = [parse_gym_source(s) for s in sources]
refused = []
for source in ("gym:chain_summ", "gym:chain_sum:nosuch=1", "gym:chain_sum:min_terms=0"):
    try:
        parse_gym_source(source)
    except DataFormatError as err:
        refused.append(str(err))
left = sorted(m for m in sys.modules if m.split(".")[0] in ("reasoning_gym", "sympy", "matplotlib"))
from reasoning_gym.factory import DATASETS
print(json.dumps(dict(
    index=index, registry={k: v[0].__module__ for k, v in DATASETS.items()}, left=left, refused=refused,
    options=[dict(s.options) for s in specs],
)))
"""


def test_tasks_are_found_and_checked_without_importing_reasoning_gym(tmp_path):
    """A ``gym:`` source is checked without importing the reasoning-gym package (every task: sympy, matplotlib,
    1-2 s): task names from a scan of its sources (the same names and modules its registry has once imported),
    a task's config class from its own module, imported alone and dropped again, so that the package imports as
    usual afterwards (in a fresh interpreter: this test session may have imported reasoning-gym already)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _ALONE_CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["index"] == report["registry"]  # every task, in the module that registers it
    assert report["left"] == []  # nothing of reasoning-gym (nor sympy / matplotlib) stays imported
    assert report["options"][0] == {"max_terms": 3}
    unknown, option, value = report["refused"]
    assert "no task 'chain_summ'; did you mean chain_sum" in unknown
    assert "chain_sum has no option 'nosuch'" in option and "min_terms=2" in option
    assert "not valid for chain_sum: min_terms must be positive" in value

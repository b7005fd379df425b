"""``build_inputs``: every hook's result is checked, and a bad one is named with what it must return (no model,
no tokenizer, no Ray: milliseconds)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from reasonrl.config import ConfigError
from reasonrl.data import get_template
from reasonrl.run.exp_hooks import HookError, build_inputs

ROWS = [{"id": f"r{i}", "question": f"{i}+1=", "answer": str(i + 1)} for i in range(4)]
HELDOUT = [{"id": f"h{i}", "question": f"{i}+7=", "answer": str(i + 7)} for i in range(2)]  # no training question


def scorer(completions, rows):
    return []


class FakeExp:
    """The four hooks of ``BasePPOExp``, each returning what the test gives (defaults: all valid)."""

    def __init__(self, **returns):
        self.cfg = SimpleNamespace(rollout_batch_size=4, train_data=["my.jsonl"])
        self.returns = {"template": get_template("plain"), "train": ROWS, "eval": {"heldout": HELDOUT}}
        self.returns.update(returns)
        self.returns.setdefault("scorer", scorer)
        self.scorer_builds = 0

    def build_template(self, tokenizer):
        return self.returns["template"]

    def load_train_rows(self):
        return self.returns["train"]

    def load_eval_sets(self):
        return self.returns["eval"]

    def build_scorer(self):
        self.scorer_builds += 1
        return self.returns["scorer"]


class Closing:
    """Has close() and wait_ready() (which raises ``ready_error``), but is not callable: not a scorer."""

    def __init__(self, ready_error: Exception | None = None):
        self.closed, self.ready_error = 0, ready_error

    def wait_ready(self):
        if self.ready_error:
            raise self.ready_error

    def close(self):
        self.closed += 1


class ClosingScorer(Closing):
    def __call__(self, completions, rows):
        return []


class Broken:
    def render(self, row):
        raise KeyError("topic")


BAD = [
    ("scorer-none", dict(scorer=None), r"FakeExp.build_scorer\(\) returned None: it must return a callable scorer"),
    ("scorer-str", dict(scorer="reward.py:fn"), r"build_scorer\(\) returned a str: it must return a callable"),
    ("rows-none", dict(train=None), r"FakeExp.load_train_rows\(\) returned None: it must return a non-empty list"),
    ("rows-empty", dict(train=[]), r"load_train_rows\(\) returned an empty list"),
    ("rows-dict", dict(train=ROWS[0]), r"load_train_rows\(\) returned a dict: it must return a non-empty list"),
    ("rows-gen", dict(train=(r for r in ROWS)), r"load_train_rows\(\) returned a generator"),
    ("row-str", dict(train=[*ROWS, "5+1="]), r"load_train_rows\(\) row 4 is a str, not a dict"),
    ("too-few", dict(train=ROWS[:3]), r"rollout_batch_size=4 exceeds the 3 training rows of FakeExp.load_train_rows"),
    ("eval-list", dict(eval=ROWS), r"load_eval_sets\(\) returned a list: it must return a dict of name -> rows"),
    ("eval-empty-set", dict(eval={"heldout": []}), r"load_eval_sets\(\)\['heldout'\] returned an empty list"),
    ("template-none", dict(template=None), r"build_template\(\) returned None: it must return a template with a"),
    (
        "template-fails",
        dict(train=[{"id": "a", "text": "1+1"}] * 4),
        r"build_template\(\): the template cannot render the first row of FakeExp.load_train_rows\(\) \(id 'a', "
        r"fields \['id', 'text'\]\): TemplateRenderError: row 'a' has no 'question' field",
    ),
    (
        "template-fails-eval",
        dict(eval={"heldout": [{"problem": "x"}]}),
        r"cannot render the first row of FakeExp.load_eval_sets\(\)\['heldout'\] \(fields \['problem'\]\)",
    ),
    ("template-raises", dict(template=Broken()), r"cannot render the first row .*: KeyError: 'topic'"),
    ("template-empty", dict(template=SimpleNamespace(render=lambda row: "")), r"rendered the first row .* as ''"),
]


@pytest.mark.parametrize("returns,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_hook_result_is_named(returns, message):
    exp = FakeExp(**returns)
    with pytest.raises(HookError, match=message) as err:
        build_inputs(exp, tokenizer=None)
    assert isinstance(err.value, ConfigError) and str(err.value).startswith("invalid experiment hooks: ")
    if "scorer" not in returns:
        assert exp.scorer_builds == 0  # the scorer (worker processes) is built only once the data hooks pass


def test_every_data_problem_is_listed_at_once_before_the_tokenizer_loads():
    loaded = []
    with pytest.raises(HookError) as err:
        build_inputs(FakeExp(template=None, train=[], eval=[]), load_tokenizer=lambda: loaded.append(1))
    assert [re.search(r"\w+\(\)", p).group(0) for p in err.value.problems] == [
        "load_train_rows()",
        "load_eval_sets()",
    ]
    assert not loaded  # a data mistake is reported without importing transformers/torch
    with pytest.raises(HookError, match=r"build_template\(\) returned None"):
        build_inputs(FakeExp(template=None), load_tokenizer=lambda: loaded.append(1))
    assert loaded == [1]  # the template hook gets the tokenizer once the data passed


def test_valid_hooks_give_the_inputs_the_trainer_uses():
    made = ClosingScorer()
    exp = FakeExp(train=tuple(ROWS), eval={})
    exp.returns["scorer"] = made
    inputs = build_inputs(exp, tokenizer=None)
    assert inputs.scorer is made and exp.scorer_builds == 1
    assert inputs.train_rows == ROWS and isinstance(inputs.train_rows, list) and inputs.eval_sets == {}
    assert inputs.close == made.close and made.closed == 0  # the caller closes it when the run ends
    assert build_inputs(FakeExp(), tokenizer=None).close is None  # a plain function needs no close()


def test_a_scorer_that_fails_its_check_is_closed():
    not_callable = Closing()
    with pytest.raises(HookError, match=r"returned a Closing: it must return a callable"):
        build_inputs(FakeExp(scorer=not_callable), tokenizer=None)
    assert not_callable.closed == 1
    unready = ClosingScorer(ready_error=RuntimeError("reward workers die during start-up"))
    with pytest.raises(RuntimeError, match="die during start-up"):
        build_inputs(FakeExp(scorer=unready), tokenizer=None)
    assert unready.closed == 1


def test_an_eval_set_sharing_training_questions_is_refused():
    """Issue 12: training on evaluation questions is refused by question text (normalised: case, spacing), with
    the eval set, the count, an example and the fix; allow_train_eval_overlap=true lets it through."""
    train = [*ROWS, {"id": "t9", "question": "  WHAT is\n 7+7? ", "answer": "14", "source": "mixed"}]
    evals = {"heldout": HELDOUT, "copied": [{"id": "c1", "question": "what is 7+7?", "answer": "14"}, *HELDOUT]}
    exp = FakeExp(train=train, eval=evals)
    with pytest.raises(HookError) as err:
        build_inputs(exp, tokenizer=None)
    (problem,) = err.value.problems
    assert re.match(
        r"eval set 'copied': 1 of its 3 questions are also training questions \(training rows of source 'mixed'\), "
        r"e\.g\. id 'c1': 'what is 7\+7\?': training on evaluation questions inflates eval/copied/\*\. Remove the "
        r"overlapping source from train_data=\['my.jsonl'\] .* or set allow_train_eval_overlap=true",
        problem,
    )
    assert exp.scorer_builds == 0
    exp.cfg.allow_train_eval_overlap = True
    assert build_inputs(exp, tokenizer=None).eval_sets == evals


def test_a_data_file_that_cannot_be_loaded_is_named_without_a_traceback(tmp_path):
    """Issue 12: an empty data file fails in the hook check naming the file (no error about rollout_batch_size),
    and so does a malformed one; both are HookErrors, which run_recipe prints without a traceback."""
    from reasonrl.data import load_rows

    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    exp = FakeExp()
    exp.load_train_rows = lambda: load_rows(empty).rows
    with pytest.raises(HookError) as err:
        build_inputs(exp, tokenizer=None)
    (problem,) = err.value.problems
    assert re.match(r"FakeExp.load_train_rows\(\) cannot load its data: .*empty\.jsonl: no rows", problem)
    exp.load_eval_sets = lambda: {"x": load_rows(tmp_path / "missing.jsonl").rows}
    with pytest.raises(HookError) as err:
        build_inputs(exp, tokenizer=None)
    assert len(err.value.problems) == 2 and "missing.jsonl" in err.value.problems[1]


def test_rows_naming_another_environment_are_refused():
    from reasonrl.loop.multi_turn import row_env_problems

    rows = {"train_data": [{"id": "a", "env": "tools"}], "heldout": [{"id": "b"}]}
    assert row_env_problems(rows, "tools") == []
    (problem,) = row_env_problems(rows, None)
    assert "train_data row 0 (id 'a') names env='tools'" in problem and "env_fn=None" in problem


def test_lora_targets_that_match_nothing_are_refused_before_ray(tiny_model_dir):
    """Checked on a meta-device model built from the folder's config (no weights read, no Ray)."""
    from reasonrl.models.lora import lora_problems

    exp = FakeExp()
    exp.cfg = SimpleNamespace(
        rollout_batch_size=4,
        train_data=["my.jsonl"],
        use_lora=True,
        pretrain=str(tiny_model_dir),
        resolve_model_path=lambda path: path,
        lora_target_modules=["q_proj", "c_attn"],
    )
    with pytest.raises(ConfigError) as err:
        build_inputs(exp, tokenizer=object())
    assert "'c_attn' matches no linear layer" in str(err.value) and "pretrain=" in str(err.value)
    assert exp.scorer_builds == 0  # refused before the scorer (and Ray) start
    assert lora_problems(str(tiny_model_dir), ["all-linear"]) == []

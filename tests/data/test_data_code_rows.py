"""Code rows in the loader (``reasonrl.data.code_rows``): tests instead of a gold answer, from jsonl, parquet and a
Hugging Face dataset folder, in every test format, with presets for APPS / TACO / DeepCoder / verl-style rows;
malformed tests are refused at load time naming the file, row, id and problem; a config over a code file validates
and a malformed one is refused before anything starts."""

from __future__ import annotations

import json
import re

import pytest

from reasonrl.data import DataFormatError, load_rows
from reasonrl.data.code_rows import ROUTE_NAMES, normalize_tests
from reasonrl.rewards.code import parse_tests

STDIO = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}
CALL = {"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [3, 7]}
CHECK = {"entry_point": "add", "check": "def check(candidate):\n    assert candidate(1, 2) == 3\n"}
ADD = "def add(a, b):\n    return a + b\n"


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_every_test_format_from_jsonl(tmp_path):
    path = _jsonl(
        tmp_path / "code.jsonl",
        [
            {"id": "s", "question": "Add two numbers from stdin.", "tests": STDIO},
            {"id": "t", "question": "Same, tests as JSON text.", "tests": json.dumps(STDIO)},
            {"id": "c", "question": "Write add(a, b).", "tests": json.dumps(CALL), "answer": ADD},
            {"id": "h", "question": "def add(a, b):\n", "tests": CHECK, "data_source": "code", "difficulty": 1},
            {"id": "m", "question": "What is 2 + 3?", "answer": "\\boxed{5}"},  # a math row beside them
        ],
    )
    rows = {r["id"]: r for r in load_rows(path)}
    for rid, tests in (("s", STDIO), ("t", STDIO), ("c", CALL), ("h", CHECK)):
        row = rows[rid]
        assert row["tests"] == tests and isinstance(row["tests"], dict), rid  # parsed once, here
        assert row["data_source"] == "code", rid
        parse_tests(row["tests"])
    assert rows["s"]["answer"] == "" and rows["c"]["answer"] == ADD  # optional; a reference program verbatim
    assert rows["h"]["difficulty"] == 1 and list(rows["h"])[:4] == ["id", "question", "answer", "source"]
    assert rows["m"] == {"id": "m", "question": "What is 2 + 3?", "answer": "5", "source": "code"}  # unchanged


def test_deepcoder_test_case_lists_are_converted(tmp_path):
    stdin_cases = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}, {"input": "2 2\n", "output": "4\n"}]
    functional = [
        {"input": "[1, 2]\n3", "output": "6", "testtype": "functional", "metadata": {"func_name": "total"}},
        {"input": "[]\n0", "output": "0", "testtype": "functional", "metadata": {"func_name": "total"}},
    ]
    path = _jsonl(
        tmp_path / "deepcoder.jsonl",
        [
            {"problem": "Read two ints.", "tests": json.dumps(stdin_cases), "solutions": ["print(3)"]},
            {"problem": "Implement total(xs, k).", "tests": json.dumps(functional)},
        ],
    )
    a, b = load_rows(path, fields="deepcoder")
    assert a["tests"] == {"inputs": ["1 2\n", "2 2\n"], "outputs": ["3\n", "4\n"]}
    assert a["solutions"] == ["print(3)"] and a["answer"] == ""
    assert b["tests"] == {"fn_name": "total", "inputs": [[[1, 2], 3], [[], 0]], "outputs": [6, 0]}


def test_parquet_apps_rows_with_the_apps_preset(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    records = [
        {"problem_id": 7, "question": "Print a+b.", "input_output": json.dumps(STDIO), "solutions": "[]"},
        {"problem_id": 8, "question": "Write add.", "input_output": json.dumps(CALL), "solutions": "[]"},
    ]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "apps.parquet")
    rows = load_rows(tmp_path / "apps.parquet", fields="apps")
    assert [r["id"] for r in rows] == ["7", "8"]
    assert rows[0]["tests"] == STDIO and rows[1]["tests"] == CALL
    assert "input_output" not in rows[0]  # the raw JSON text is replaced by the parsed tests
    assert {r["data_source"] for r in rows} == {"code"}


def test_hf_dataset_folder_taco_rows_and_a_mapped_field(tmp_path):
    datasets = pytest.importorskip("datasets")
    records = {"question": ["Print a+b.", "Write add."], "input_output": [json.dumps(STDIO), json.dumps(CALL)]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(records)}).save_to_disk(str(tmp_path / "taco"))
    rows = load_rows(f"{tmp_path / 'taco'}@train", fields="taco")
    assert [r["tests"] for r in rows] == [STDIO, CALL]
    assert [r["id"] for r in rows] == ["taco@train-0", "taco@train-1"]
    same = load_rows(f"{tmp_path / 'taco'}@train", fields={"tests": "input_output"})
    assert [r["tests"] for r in same] == [STDIO, CALL]


def test_verl_style_rows_keep_their_dataset_label(tmp_path):
    """Skywork-OR1 / verl rows: chat prompt, tests as JSON text under reward_model.ground_truth, a dataset label as
    data_source: scored as code, the label kept."""
    record = {
        "data_source": "train-code-taco-hard",
        "prompt": [{"role": "user", "content": "Print a+b."}],
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": json.dumps(STDIO)},
        "extra_info": {"index": 3},
    }
    (row,) = load_rows(_jsonl(tmp_path / "skywork.jsonl", [record]), fields="verl_code")
    assert row["question"] == "Print a+b." and row["messages"] == [{"role": "user", "content": "Print a+b."}]
    assert row["tests"] == STDIO and row["data_source"] == "code"
    assert row["data_source_label"] == "train-code-taco-hard"
    kept = load_rows(_jsonl(tmp_path / "k.jsonl", [{"question": "q", "tests": STDIO, "data_source": "user"}]))
    assert kept[0]["data_source"] == "user"  # a routing name is the row's own choice


BAD = [
    ({"tests": "{not json"}, r"tests \('tests'\) are malformed: tests is not valid JSON"),
    ({"tests": {"inputs": ["1\n"], "outputs": []}}, r"non-empty 'inputs' and 'outputs' lists of the same length"),
    ({"tests": {"fn_name": "f", "inputs": [1], "outputs": [1]}}, r"call-style inputs must be argument lists"),
    ({"tests": {"check": "def check(c): pass"}}, r"HumanEval-style tests need a str 'check' and a str 'entry_point'"),
    ({"tests": [1, 2]}, r"test case 0 is not an \{'input', 'output'\} object"),
    ({"tests": "[]"}, r"tests is an empty list"),
    ({"tests": 5}, r"tests must be an object \(or its JSON text\), got int"),
    ({"tests": STDIO, "answer": ["a", "b"]}, r"answer \('answer'\) of a code row is its reference program"),
    ({"data_source": "code"}, r"data_source is 'code' but the row has no tests field 'tests'"),
]


@pytest.mark.parametrize("extra, message", BAD)
def test_malformed_code_rows_name_file_row_id_and_problem(tmp_path, extra, message):
    good = {"id": "ok", "question": "q0", "tests": STDIO}
    path = _jsonl(tmp_path / "bad.jsonl", [good, {"id": "p7", "question": "q1", **extra}])
    with pytest.raises(DataFormatError) as err:
        load_rows(path)
    text = str(err.value)
    assert text.startswith(f"{path}:2: "), text
    assert re.search(message, text), text
    if "tests" in extra:
        assert "row 1 (id 'p7')" in text
    skipped = load_rows(path, on_error="skip")
    assert [r["id"] for r in skipped] == ["ok"] and skipped.num_skipped == 1


def test_malformed_parquet_row_and_a_missing_mapped_field(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    records = [{"problem_id": 1, "question": "q", "input_output": "{}"}]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "apps.parquet")
    with pytest.raises(DataFormatError, match=r"apps\.parquet: row 0: \(id '1'\): tests \('input_output'\) are mal"):
        load_rows(tmp_path / "apps.parquet", fields="apps")
    path = _jsonl(tmp_path / "m.jsonl", [{"question": "q", "input_output": json.dumps(STDIO)}, {"question": "r"}])
    with pytest.raises(DataFormatError, match=r"m\.jsonl:2: missing field 'input_output' \(mapped to 'tests'\)"):
        load_rows(path, fields={"tests": "input_output"})


def test_duplicates_of_code_rows_compare_their_tests(tmp_path):
    path = _jsonl(
        tmp_path / "d.jsonl",
        [{"question": "q", "tests": STDIO}, {"question": "q", "tests": CALL}, {"question": "q", "tests": STDIO}],
    )
    rows = load_rows(path)
    assert len(rows) == 3 and rows.num_duplicates == 1 and "d.jsonl:3 repeats" in rows.duplicates[0]


def test_normalize_tests_leaves_valid_dicts_alone():
    assert normalize_tests(CALL) is CALL
    assert normalize_tests(json.dumps(CHECK).encode()) == CHECK


def test_route_names_match_the_trainer_routing():
    from reasonrl.rewards.routing import ROUTES

    assert set(ROUTE_NAMES) == {r for r in ROUTES if ":" not in r}


def test_a_config_over_code_data_validates_and_malformed_data_is_refused_before_starting(tmp_path):
    from reasonrl.config import BasePPOExpConfig
    from reasonrl.exp import BasePPOExp
    from reasonrl.rewards.routing import routing_problems
    from reasonrl.run.exp_hooks import HookError, build_inputs

    good = _jsonl(tmp_path / "train.jsonl", [{"id": f"p{i}", "question": f"q{i}", "tests": STDIO} for i in range(4)])
    base = dict(pretrain="tiny", device="cpu", generate_max_len=512, rollout_batch_size=4)
    cfg = BasePPOExpConfig(**base, train_data=[str(good)], eval_data=["humaneval"])
    cfg.validate()
    exp = BasePPOExp(cfg)
    train, evals = exp.load_train_rows(), exp.load_eval_sets()
    assert len(train) == 4 and len(evals["humaneval"]) == 164
    assert routing_problems(cfg, {"train_data": train, "eval_data humaneval": evals["humaneval"]}) == []
    BasePPOExpConfig(**base, train_data=[str(good)], data_fields={"tests": "tests"}).validate()  # a tests mapping

    bad = _jsonl(tmp_path / "bad.jsonl", [*[{"question": f"q{i}", "tests": STDIO} for i in range(4)], {"tests": []}])
    cfg = BasePPOExpConfig(**base, train_data=[str(bad)], eval_data=[])
    cfg.validate()  # validate() reads no rows; the hook check reads them before the tokenizer, Ray or a model
    with pytest.raises(HookError) as err:
        build_inputs(BasePPOExp(cfg), tokenizer=None)
    (problem,) = err.value.problems
    assert re.search(r"load_train_rows\(\) cannot load its data: .*bad\.jsonl:5: no question field", problem)
    bad.write_text(bad.read_text().replace('{"tests": []}', '{"id": "x", "question": "q", "tests": []}'))
    with pytest.raises(HookError, match=r"bad\.jsonl:5: row 4 \(id 'x'\): tests \('tests'\) are malformed"):
        build_inputs(BasePPOExp(cfg), tokenizer=None)

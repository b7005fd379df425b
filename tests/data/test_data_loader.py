"""Loader: json / jsonl / parquet / HF folders / built-in names, field mapping, and errors naming file and line."""

from __future__ import annotations

import json
import re

import pytest

from reasonrl.data import DataFormatError, load_rows


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_jsonl_with_auto_fields(tmp_path):
    path = _write_jsonl(
        tmp_path / "set.jsonl",
        [{"problem": "1+1?", "solution": "so \\boxed{2}", "difficulty": 1}, {"problem": "2+2?", "solution": 4}],
    )
    rows = load_rows(path)
    assert len(rows) == 2 and rows.num_skipped == 0 and rows.num_duplicates == 0
    assert rows[0] == {"id": "set-0", "question": "1+1?", "answer": "2", "source": "set", "difficulty": 1}
    assert rows[1]["answer"] == "4" and rows[1]["question"] == "2+2?"


def test_field_mapping_with_dotted_paths(tmp_path):
    path = _write_jsonl(tmp_path / "nested.jsonl", [{"q": {"text": "What?"}, "meta": {"gold": ["x", "42"]}, "key": 7}])
    rows = load_rows(path, fields={"question": "q.text", "answer": "meta.gold.1", "id": "key"}, source_name="mine")
    assert rows[0]["id"] == "7" and rows[0]["question"] == "What?" and rows[0]["answer"] == "42"
    assert rows[0]["source"] == "mine"


def test_orz_presets(tmp_path):
    train = tmp_path / "orz.json"
    train.write_text(
        json.dumps(
            [
                [
                    {"from": "human", "value": "Compute 3*4."},
                    {"from": "assistant", "ground_truth": {"value": "12", "pass_at_n": 0.5}},
                ]
            ]
        )
    )
    rows = load_rows(train, fields="orz")
    assert rows[0]["question"] == "Compute 3*4." and rows[0]["answer"] == "12"
    evals = tmp_path / "math500.json"
    evals.write_text(json.dumps([{"prompt": [{"from": "user", "value": "Q?"}], "final_answer": "\\frac12"}]))
    assert load_rows(evals, fields="orz_eval")[0]["answer"] == "\\frac12"


def test_gsm8k_raw_answers(tmp_path):
    path = _write_jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "steps <<1+1=2>>\n#### 1,234"}])
    assert load_rows(path)[0]["answer"] == "1234"
    assert load_rows(path, answer_from="none")[0]["answer"].endswith("#### 1,234")
    with pytest.raises(DataFormatError, match=r"g\.jsonl:1: answer has no \\boxed"):
        load_rows(path, answer_from="boxed")


def test_json_list_and_wrapped_object_and_jsonl_named_json(tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps([{"question": "q1", "answer": "1"}, {"question": "q2", "answer": "2"}]))
    assert [r["answer"] for r in load_rows(a)] == ["1", "2"]
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"version": 1, "data": [{"question": "q", "answer": "3"}]}))
    assert load_rows(b)[0]["answer"] == "3"
    c = tmp_path / "c.json"
    c.write_text('{"question": "q", "answer": "4"}\n{"question": "r", "answer": "5"}\n')
    assert len(load_rows(c)) == 2


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"problem": ["p1", "p2"], "final_answer": ["1", None]}), path)
    with pytest.raises(DataFormatError, match=r"t\.parquet: row 1: .*answer must be a string or number"):
        load_rows(path)
    rows = load_rows(path, on_error="skip")
    assert len(rows) == 1 and rows.num_skipped == 1


def test_hf_dataset_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"question": ["a", "b"], "answer": ["1", "2"]}),
            "test": datasets.Dataset.from_dict({"question": ["c"], "answer": ["3"]}),
        }
    )
    ds.save_to_disk(str(tmp_path / "hf"))
    assert [r["answer"] for r in load_rows(tmp_path / "hf", split="train")] == ["1", "2"]
    with pytest.raises(DataFormatError, match=r"holds several splits \(test, train\).*write '.*hf@train'"):
        load_rows(tmp_path / "hf")
    with pytest.raises(DataFormatError, match="no split 'dev'"):
        load_rows(tmp_path / "hf", split="dev")


def test_folder_of_files(tmp_path):
    (tmp_path / "d").mkdir()
    _write_jsonl(tmp_path / "d" / "train.jsonl", [{"question": "a", "answer": "1"}])
    _write_jsonl(tmp_path / "d" / "test.jsonl", [{"question": "b", "answer": "2"}])
    assert [r["answer"] for r in load_rows(tmp_path / "d", split="test")] == ["2"]
    with pytest.raises(DataFormatError, match="holds several splits"):  # train + test never load as one set
        load_rows(tmp_path / "d")
    (tmp_path / "d" / "test.jsonl").unlink()
    _write_jsonl(tmp_path / "d" / "more.jsonl", [{"question": "c", "answer": "3"}])
    assert len(load_rows(tmp_path / "d")) == 2  # one split: every file, as one set


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"question": "q", "answer": ', r"bad\.jsonl:3: invalid JSON"),
        ('{"answer": "1"}', r"bad\.jsonl:3: no question field"),
        ('{"question": "  ", "answer": "1"}', r"bad\.jsonl:3: question \('question'\) is empty"),
        ('{"question": 5, "answer": "1"}', r"bad\.jsonl:3: question .* must be a string"),
        ('{"question": "q", "answer": [1]}', r"bad\.jsonl:3: answer must be a string or number"),
        ('{"question": "q", "answer": true}', r"bad\.jsonl:3: answer must be a string or number"),
        ("[1, 2]", r"bad\.jsonl:3: no question field"),
        ('"just a string"', r"bad\.jsonl:3: expected a JSON object"),
    ],
)
def test_malformed_row_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\n\n' + line + "\n" + '{"question": "b", "answer": "2"}\n')
    with pytest.raises(DataFormatError, match=message):
        load_rows(path)
    rows = load_rows(path, on_error="skip")
    assert [r["answer"] for r in rows] == ["1", "2"] and rows.num_skipped == 1
    assert rows.skipped and "bad.jsonl:3" in rows.skipped[0]


def test_mapped_field_missing(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [{"problem": "q", "gold": "1"}])
    with pytest.raises(DataFormatError, match=r"m\.jsonl:1: missing field 'final' \(mapped to 'answer'\)"):
        load_rows(path, fields={"question": "problem", "answer": "final"})


def test_bad_arguments_and_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a file/folder nor a built-in dataset"):
        load_rows(tmp_path / "nope.jsonl")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DataFormatError, match="unsupported file type"):
        load_rows(tmp_path / "x.csv")
    with pytest.raises(ValueError, match="on_error"):
        load_rows(tmp_path / "x.csv", on_error="ignore")
    with pytest.raises(ValueError, match="unknown field preset"):
        load_rows(tmp_path / "x.csv", fields="nope")
    bad = tmp_path / "broken.json"
    bad.write_text('[{"question": "q",\n "answer": }]')
    with pytest.raises(DataFormatError, match=r"broken\.json:2: invalid JSON"):
        load_rows(bad)


def test_builtin_names_and_limit():
    rows = load_rows("gsm8k_test", limit=5)
    assert len(rows) == 5 and rows[0]["id"] == "gsm8k/test/0" and rows[0]["answer"] == "18"
    assert rows[0]["source"] == "gsm8k"
    assert len(load_rows("math500_test")) == 500


def test_answer_and_question_fields_are_chosen_once_per_source(tmp_path):
    """Issue 12: a row without ``answer`` no longer takes its worked ``solution`` as the gold answer; the field is
    the one most rows have, and a row without it is an error naming file:line (skipped and counted on request)."""
    records = [{"question": f"q{i}", "answer": str(i), "solution": f"long work \\boxed{{{i}}}"} for i in range(3)]
    records.insert(1, {"question": "q9", "solution": "we compute 4+5 = 9 and then much more text"})
    records.append({"problem": "p", "answer": "5"})
    path = _write_jsonl(tmp_path / "mixed.jsonl", records)
    with pytest.raises(DataFormatError) as err:
        load_rows(path)
    assert re.search(
        r"mixed\.jsonl:2: no answer field 'answer' \(the answer field of this source, present in 4 of its 5 rows\); "
        r"this row has 'solution' instead: fix the row, or map the field of the whole source with "
        r"fields=\{'answer': 'solution'\}",
        str(err.value),
    )
    rows = load_rows(path, on_error="skip")
    assert [r["answer"] for r in rows] == ["0", "1", "2"] and rows.num_skipped == 2
    assert "mixed.jsonl:5: no question field 'question'" in rows.skipped[1] and "has 'problem'" in rows.skipped[1]
    assert [r["id"] for r in rows] == ["mixed-0", "mixed-2", "mixed-3"]  # default ids keep the row's position
    assert len(load_rows(path, fields={"answer": "solution"}, on_error="skip")) == 4  # an explicit choice


def test_ids_are_chosen_once_per_source(tmp_path):
    path = _write_jsonl(
        tmp_path / "ids.jsonl", [{"question": "a", "answer": "1", "uid": "u1"}, {"question": "b", "answer": "2"}]
    )
    assert [r["id"] for r in load_rows(path)] == ["u1", "ids-1"]
    with pytest.raises(DataFormatError, match=r"ids\.jsonl:2: missing field 'uid' \(mapped to 'id'\)"):
        load_rows(path, fields={"question": "question", "answer": "answer", "id": "uid"})


def test_duplicates_are_counted_and_reported_and_kept_unless_dropped(tmp_path):
    """Issue 12: duplicate rows (same question text and answer, or same id) are counted, logged with an example,
    and kept by default."""
    from loguru import logger

    records = [
        {"id": "a", "question": "What is 2+2?", "answer": "4"},
        {"id": "b", "question": "what is  2+2?", "answer": "4"},  # same question text (case, spacing) and answer
        {"id": "c", "question": "What is 2+2?", "answer": "5"},  # a different answer: not a duplicate
        {"id": "a", "question": "Another", "answer": "1"},  # the same id
    ]
    path = _write_jsonl(tmp_path / "dups.jsonl", records)
    logs: list[str] = []
    sink = logger.add(logs.append, level="INFO", format="{message}")
    try:
        rows = load_rows(path)
    finally:
        logger.remove(sink)
    assert len(rows) == 4 and rows.num_duplicates == 2
    assert re.search(r"dups\.jsonl:2 repeats .*dups\.jsonl:1 \(same question and answer\)", rows.duplicates[0])
    assert re.search(r"dups\.jsonl:4 repeats .*dups\.jsonl:1 \(same id 'a'\)", rows.duplicates[1])
    assert any(re.search(r"dups\.jsonl: 2 duplicate row\(s\) kept .*e\.g\. .*dups\.jsonl:2 repeats", m) for m in logs)
    dropped = load_rows(path, duplicates="drop")
    assert [r["id"] for r in dropped] == ["a", "c"] and dropped.num_duplicates == 2
    with pytest.raises(ValueError, match="duplicates must be one of"):
        load_rows(path, duplicates="remove")


@pytest.mark.parametrize("source", ["arith_add2_train", "tool_mul_train", "tool_mul_sft_train"])
def test_generated_training_sets_repeat_by_design_and_say_so_below_info(source):
    """Issue 45: the demo's own generated training sets draw problems with replacement from a finite set, so they
    repeat rows on purpose; that is a debug line with the reason, not an INFO report greeting a newcomer. The
    repeats are still counted (the same rows load)."""
    from loguru import logger

    from reasonrl.data.arithmetic import GENERATED_DATASETS

    task, split = GENERATED_DATASETS[source]
    logs: list[tuple[str, str]] = []
    sink = logger.add(lambda m: logs.append((m.record["level"].name, m.record["message"])), level="DEBUG")
    try:
        rows = load_rows(source)
    finally:
        logger.remove(sink)
    distinct = {(r["question"], r["answer"]) for r in rows}
    assert rows.num_duplicates == len(rows) - len(distinct) > 0  # counted as before: repeats of question and answer
    about = [(level, m) for level, m in logs if "repeated row" in m or "duplicate row" in m]
    assert [level for level, _ in about] == ["DEBUG"], about
    assert f"{rows.num_duplicates} repeated row(s)" in about[0][1] and "by design" in about[0][1]
    train_size = getattr(task, "task", task).train_size  # the SFT traces draw the pairs of their task
    assert f"{train_size} problems drawn with replacement" in about[0][1]
    assert task.repeat_reason("heldout") is None  # held-out problems are distinct


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("empty.jsonl", "", r"empty\.jsonl: no rows \(an empty file or folder\)"),
        ("blank.jsonl", "\n  \n", r"blank\.jsonl: no rows"),
        ("empty.json", "[]", r"empty\.json: no rows"),
        ("wrapped.json", '{"data": []}', r"wrapped\.json: no rows"),
    ],
)
def test_a_source_without_rows_is_an_error_naming_it(tmp_path, name, text, message):
    """Issue 12: an empty file is refused by the loader, naming the file (not later by rollout_batch_size)."""
    (tmp_path / name).write_text(text)
    with pytest.raises(DataFormatError, match=message):
        load_rows(tmp_path / name)


def test_a_source_whose_rows_are_all_malformed_is_an_error_even_when_skipping(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"question": "q"}, {"question": "r"}])
    with pytest.raises(DataFormatError, match=r"bad\.jsonl: no usable rows: all 2 rows are malformed, e\.g\. .*:1: no"):
        load_rows(path, on_error="skip")


def test_an_empty_source_is_not_the_current_folder():
    """Issue 12: ``train_data=gsm8k_train,`` made an empty item, and ``Path('')`` is the current folder."""
    for source in ("", "  "):
        with pytest.raises(DataFormatError, match=r"data source '\s*' is empty \(as a path it would name the current"):
            load_rows(source)

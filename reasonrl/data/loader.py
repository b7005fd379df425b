"""Load prompt/answer rows from json, jsonl, parquet files, Hugging Face dataset folders, Hugging Face Hub dataset
ids or built-in names, into the normalised row format ``{"id", "question", "answer", "source", ...extra fields}``.

    rows = load_rows("data/my_set.jsonl", fields={"question": "problem", "answer": "final_answer"})
    rows = load_rows("gsm8k_train")                       # a built-in dataset (prepared on first use)
    rows = load_rows("orz_math_57k.json", fields="orz")   # ORZ's [{"from": "human", ...}, {...}] dialogues
    rows = load_rows("data/hf_snapshot@train")            # one split of a folder (reasonrl.data.sources)
    rows = load_rows("openai/gsm8k:main@train")           # a Hub dataset: config main, split train (reasonrl.data.hub)

Field mapping: ``fields`` maps a normalised name (``question``, ``answer``, ``id``) to a path in the raw record:
a key, or a dotted path with list indices (``"0.value"``, ``"1.ground_truth.value"``, ``"meta.answer"``).
Without a mapping, each field is chosen once per source (:func:`choose_fields`): the key of ``QUESTION_KEYS`` /
``ANSWER_KEYS`` / ``ID_KEYS`` present in the most rows (ties: the earlier key). A row without the chosen field is
malformed, even if it has another candidate key (a row with a worked ``solution`` but no ``answer`` never takes
the solution as its gold answer); a row without the chosen id gets a default id.

Chat rows: a question field holding a ``messages`` list of ``{"role", "content"}`` turns (``messages`` is the
last question key tried, or map it: ``fields={"question": "messages"}``) makes a chat row: ``messages`` keeps the
prompt turns (system and user turns up to the last user turn; a final assistant reply is left out) and
``question`` is the last user turn's text (for display, duplicates and the train/eval overlap check); templates
render the turns (:mod:`reasonrl.data.templates`). A row whose question is a text field is a text row: a raw
``messages`` field of its record is left out, so it is never rendered as a chat. The gold answer still comes from
the answer field. Turns may use tools (:mod:`reasonrl.data.chat`): ``tool`` turns and assistant turns carrying
calls (Hermes ``<tool_call>`` text, or OpenAI-style ``tool_calls``), kept as given; a conversation ending with a
tool turn is a prompt as a whole. ``keep_reply=True`` (SFT on conversations) keeps the turns after the prompt in
``reply_messages`` and makes the answer field optional (``""`` without one).

Environment fields: a row may name its multi-turn environment and tools, ``env`` (a string) and ``tools`` (a list of
tool names); other types are a ``DataFormatError`` naming the row.

Code rows (:mod:`reasonrl.data.code_rows`): a record with a ``tests`` field (or the field ``fields={"tests": ...}``
maps, e.g. ``input_output``; presets ``apps``, ``taco``, ``deepcoder``, ``verl_code``) or ``data_source: code``
carries unit tests instead of a gold answer: ``tests`` is parsed here into a dict (a malformed one is a
``DataFormatError`` naming the file, row, id and problem), ``answer`` is an optional reference program kept verbatim
(``""`` without one), and ``data_source`` becomes ``code`` when absent (a dataset label such as verl's ``taco`` is
kept in ``data_source_label``).

Gold answers pass through ``answer_from``: ``auto`` (default) reduces a full solution to its final answer (the
last ``\\boxed{}``, or ``#### n``), ``boxed`` / ``gsm8k`` require that form, ``none`` keeps the field as is.

A malformed row (invalid JSON or UTF-8, missing or empty question/answer, wrong type) raises ``DataFormatError``
naming the file and line (jsonl) or row (json list, parquet, HF folder). With ``on_error="skip"`` such rows are
skipped, counted in ``LoadResult.num_skipped`` and logged. Duplicate rows (the same question and answer, or the
same id, as an earlier row) are kept (``duplicates="drop"`` drops them), counted in ``LoadResult.num_duplicates``
and logged with the first example. A source that yields no rows raises ``DataFormatError`` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from reasonrl.data.chat import last_user_text, split_messages
from reasonrl.data.code_rows import CODE, is_route_name, normalize_tests, tests_fingerprint
from reasonrl.data.images import image_arrays, images_fingerprint, load_row_images
from reasonrl.data.overlap import question_key
from reasonrl.data.records import iter_file, iter_folder, iter_hub
from reasonrl.data.sources import (
    DataFormatError,
    builtin_names,
    hub_id_of,
    is_gym_text,
    parse_source,
    repeats_by_design,
    resolve_source,
    split_refused,
)
from reasonrl.rewards.extract import gsm8k_answer, last_boxed

QUESTION_KEYS = ("question", "problem", "prompt", "query", "input", "instruction", "messages")
ANSWER_KEYS = ("answer", "final_answer", "gold", "ground_truth", "target", "label", "solution")
ID_KEYS = ("id", "unique_id", "idx", "uid")

PRESETS: dict[str, dict[str, str]] = {
    # Open-Reasoner-Zero training files: [{"from": "human", "value": q}, {"from": "assistant", "ground_truth": {...}}]
    "orz": {"question": "0.value", "answer": "1.ground_truth.value"},
    # ORZ eval files: {"prompt": [{"from": "user", "value": q}], "final_answer": a}
    "orz_eval": {"question": "prompt.0.value", "answer": "final_answer"},
    "gsm8k": {"question": "question", "answer": "answer"},
    "math": {"question": "problem", "answer": "solution"},
    # code rows (reasonrl.data.code_rows): tests instead of a gold answer
    "apps": {"question": "question", "tests": "input_output", "id": "problem_id"},  # APPS: input_output is JSON text
    "taco": {"question": "question", "tests": "input_output"},  # TACO (BAAI/TACO): as APPS, no id
    "deepcoder": {"question": "problem", "tests": "tests"},  # DeepCoder-Preview-Dataset: tests is JSON text
    # verl-style rows (Skywork-OR1-RL-Data code split): chat prompt, tests as JSON text in reward_model.ground_truth
    "verl_code": {"question": "prompt", "tests": "reward_model.ground_truth"},
}

ANSWER_FROM = ("auto", "boxed", "gsm8k", "none")
DUPLICATES = ("keep", "drop")


@dataclass
class LoadResult:
    """Rows loaded from a source, plus what was skipped (only with ``on_error="skip"``) and the duplicates found
    (kept, or dropped with ``duplicates="drop"``)."""

    rows: list[dict]
    num_skipped: int = 0
    skipped: list[str] = field(default_factory=list)  # the first few error messages
    num_duplicates: int = 0
    duplicates: list[str] = field(default_factory=list)  # the first few "<where> repeats <where>" messages

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def get_path(record: Any, path: str) -> Any:
    """Follow a dotted path (``"1.ground_truth.value"``) through dicts and lists; raises KeyError if absent."""
    obj = record
    for part in path.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, (list, tuple)) and part.lstrip("-").isdigit() and -len(obj) <= int(part) < len(obj):
            obj = obj[int(part)]
        else:
            raise KeyError(path)
    return obj


def _answer_value(raw: Any, answer_from: str) -> str:
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise TypeError(f"answer must be a string or number, got {type(raw).__name__}")
    text = str(raw).strip()
    if answer_from == "none":
        return text
    boxed = last_boxed(text) if ("\\boxed" in text or "\\fbox" in text) else None
    hashes = gsm8k_answer(text) if "####" in text else None
    if answer_from == "boxed":
        if boxed is None:
            raise ValueError("answer has no \\boxed{} (answer_from='boxed')")
        return boxed
    if answer_from == "gsm8k":
        if hashes is None:
            raise ValueError("answer has no '#### n' (answer_from='gsm8k')")
        return hashes.replace(",", "")
    if boxed is not None:
        return boxed
    if hashes is not None:
        return hashes.replace(",", "")
    return text


def choose_fields(records: Sequence[Any], fields: Mapping[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """The field mapping of a whole source, and a note on each field chosen here.

    ``fields`` as given; each of ``question`` / ``answer`` / ``id`` it does not map becomes the key of
    ``QUESTION_KEYS`` / ``ANSWER_KEYS`` / ``ID_KEYS`` that is present (not null) in the most records (ties: the
    earlier key; none present: left unmapped, and every row reports it)."""
    mapping = dict(fields or {})
    chosen: dict[str, str] = {}
    dicts = [r for r in records if isinstance(r, dict)]
    for name, keys in (("question", QUESTION_KEYS), ("answer", ANSWER_KEYS), ("id", ID_KEYS)):
        if name in mapping:
            continue
        counts = dict.fromkeys(keys, 0)
        for record in dicts:
            for key in keys:
                if record.get(key) is not None:
                    counts[key] += 1
        best = max(keys, key=counts.__getitem__)  # the first of equal counts
        if counts[best]:
            mapping[name] = best
            chosen[name] = f"present in {counts[best]} of its {len(dicts)} rows"
    return mapping, chosen


def _missing(record: Any, name: str, key: str, chosen: Mapping[str, str]) -> KeyError:
    """The error of a row without its ``name`` field ``key``; for a field chosen per source, what the row has."""
    if name not in chosen:
        return KeyError(f"missing field {key!r} (mapped to {name!r})")
    keys = QUESTION_KEYS if name == "question" else ANSWER_KEYS
    has = [k for k in keys if isinstance(record, dict) and record.get(k) is not None]
    fix = (
        f"; this row has {has[0]!r} instead: fix the row, or map the field of the whole source with "
        f"fields={{'{name}': '{has[0]}'}} (data_fields in a config)"
        if has
        else ""
    )
    return KeyError(f"no {name} field {key!r} (the {name} field of this source, {chosen[name]}){fix}")


def normalize_record(
    record: Any,
    fields: dict[str, str] | None,
    answer_from: str,
    default_id: str,
    source_name: str,
    chosen: Mapping[str, str] | None = None,
    index: int | None = None,
    keep_reply: bool = False,
) -> dict:
    """One raw record -> a normalised row; raises ``ValueError``/``KeyError``/``TypeError`` describing the problem.

    An unmapped question/answer/id field is looked up in this record alone (``load_rows`` maps every field once per
    source with :func:`choose_fields` and passes its notes as ``chosen``: a row without an id chosen there gets
    ``default_id``). A code row (:func:`_code_tests`) needs no answer; its ``tests`` are parsed here into a dict
    (an error names the row ``index`` when given, and its id). ``keep_reply``: a chat row keeps the turns after its
    prompt in ``reply_messages``, and its answer is optional (``""``)."""
    if not isinstance(record, (dict, list)):
        raise TypeError(f"expected a JSON object, got {type(record).__name__}")
    chosen = chosen or {}
    mapping = dict(fields or {})
    tests = _code_tests(record, mapping)
    names = ("question",) if tests is not None else ("question", "answer")
    for name, keys in (("question", QUESTION_KEYS), ("answer", ANSWER_KEYS))[: len(names)]:
        if name not in mapping:
            found = next((k for k in keys if isinstance(record, dict) and k in record), None)
            if found is None and name == "answer" and keep_reply:
                continue
            if found is None:
                raise KeyError(f"no {name} field (looked for {', '.join(keys)}); pass fields={{'{name}': '<key>'}}")
            mapping[name] = found
    row: dict[str, Any] = {}
    for name in names:
        if name == "answer" and keep_reply and _no_answer(record, mapping):
            row["answer"] = ""  # optional for a conversation (SFT targets are its reply turns)
            continue
        try:
            value = get_path(record, mapping[name])
        except KeyError:
            raise _missing(record, name, mapping[name], chosen) from None
        if name == "question" and isinstance(value, (list, tuple)):  # a chat prompt: messages turns
            try:
                row["messages"], reply = split_messages(value)
            except ValueError as exc:
                raise ValueError(f"question ({mapping[name]!r}): {exc}") from None
            if keep_reply:
                row["reply_messages"] = reply
            value = last_user_text(value)
        elif name == "question":
            if not isinstance(value, str):
                raise TypeError(
                    f"question ({mapping[name]!r}) must be a string or a chat messages list, got {type(value).__name__}"
                )
            value = value.strip()
        else:
            value = _answer_value(value, answer_from)
        if not value:
            raise ValueError(f"{name} ({mapping[name]!r}) is empty")
        row[name] = value
    id_key = mapping.get("id") or next((k for k in ID_KEYS if isinstance(record, dict) and k in record), None)
    row["id"] = default_id
    if id_key:
        try:
            value = get_path(record, id_key)
        except KeyError:
            if "id" not in chosen:
                raise KeyError(f"missing field {id_key!r} (mapped to 'id')") from None
            value = None
        row["id"] = default_id if value is None else str(value)
    row["source"] = str(record.get("source", source_name)) if isinstance(record, dict) else source_name
    if tests is not None:
        _add_code_fields(row, record, mapping, tests, index)
    if isinstance(record, dict):
        _check_env_fields(record, row, index)
    if isinstance(record, dict):
        # a text row never keeps raw messages; a code row's raw tests field is replaced by the parsed ``tests``
        used = {mapping["question"], mapping.get("answer"), id_key, "messages", mapping.get("tests", "tests")}
        for k, v in record.items():
            if k not in used and k not in row:
                row[k] = v
    return {"id": row.pop("id"), "question": row.pop("question"), "answer": row.pop("answer"), **row}


def _no_answer(record: Any, mapping: Mapping[str, str]) -> bool:
    """Whether the record has no (non-null) value at its answer field."""
    if not mapping.get("answer"):
        return True
    try:
        return get_path(record, mapping["answer"]) is None
    except KeyError:
        return True


def _check_env_fields(record: dict, row: dict, index: int | None) -> None:
    """A row's ``env`` must be a string and its ``tools`` a list of strings (they pick its environment and tools)."""
    where = (f"row {index} " if index is not None else "") + f"(id {row['id']!r})"
    env, tools = record.get("env"), record.get("tools")
    if env is not None and not isinstance(env, str):
        raise TypeError(f"{where}: env must be a string (an environment name), got {type(env).__name__}")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)):
        got = type(tools).__name__ if not isinstance(tools, list) else "a list with non-strings"
        raise TypeError(f"{where}: tools must be a list of tool names (strings), got {got}")


_NO_TESTS = object()


def _code_tests(record: Any, mapping: Mapping[str, str]) -> Any:
    """The raw tests of a code row (``mapping["tests"]``, default ``tests``), or None for a row that is not one.
    A row with ``data_source: code`` and no tests, or without the field ``fields`` maps, is malformed."""
    key = mapping.get("tests", "tests")
    try:
        value = get_path(record, key)
    except KeyError:
        value = _NO_TESTS
    code = isinstance(record, dict) and record.get("data_source") == CODE
    if value is _NO_TESTS or value is None:
        if "tests" in mapping:
            raise KeyError(f"missing field {key!r} (mapped to 'tests')")
        if code:
            raise KeyError(f"data_source is 'code' but the row has no tests field {key!r}")
        return None
    return value


def _add_code_fields(row: dict, record: Any, mapping: Mapping[str, str], tests: Any, index: int | None) -> None:
    """``answer`` (a reference program, kept verbatim, or ""), parsed ``tests`` and ``data_source`` of a code row."""
    where = (f"row {index} " if index is not None else "") + f"(id {row['id']!r})"
    key = mapping.get("tests", "tests")
    try:
        row["tests"] = normalize_tests(tests)
    except ValueError as exc:
        raise ValueError(f"{where}: tests ({key!r}) are malformed: {exc}") from None
    answer = ""
    if mapping.get("answer"):
        try:
            answer = get_path(record, mapping["answer"])
        except KeyError:
            answer = None  # optional for a code row
        if answer is None:
            answer = ""
        elif isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise TypeError(
                f"{where}: answer ({mapping['answer']!r}) of a code row is its reference program: a string, got "
                f"{type(answer).__name__} (map answer to another field, or leave it out)"
            )
    row["answer"] = str(answer)
    label = record.get("data_source") if isinstance(record, dict) else None
    if label is None or label == "" or is_route_name(label):
        row["data_source"] = label or CODE
    else:  # a dataset label (verl, Skywork-OR1: "taco", "train-code-taco-hard"): scored as code, label kept
        row["data_source"], row["data_source_label"] = CODE, label


class _Duplicates:
    """Finds rows that repeat an earlier row of the source: the same question (:func:`question_key`) and answer,
    or the same id."""

    def __init__(self) -> None:
        self.by_text: dict[tuple[str, str], str] = {}
        self.by_id: dict[str, str] = {}

    def earlier(self, row: dict, where: str) -> str | None:
        """Where the row ``row`` (at ``where``) was seen before, as a message; None for a new row."""
        answer = row["answer"]
        if isinstance(row.get("tests"), dict):  # a code row: its tests tell rows of one prompt apart
            answer = f"{answer}\x00{tests_fingerprint(row['tests'])}"
        if row.get("images"):  # a vision-language row: its pictures tell rows of one question apart
            answer = f"{answer}\x00{images_fingerprint(row['images'])}"
        text = (question_key(row["question"]), answer)
        first = self.by_text.get(text)
        if first is not None:
            return f"{where} repeats {first} (same question and answer)"
        first = self.by_id.get(row["id"])
        if first is not None:
            return f"{where} repeats {first} (same id {row['id']!r})"
        self.by_text[text] = self.by_id[row["id"]] = where
        return None


def load_rows(
    source: str | os.PathLike,
    *,
    fields: dict[str, str] | str | None = None,
    answer_from: str = "auto",
    on_error: str = "raise",
    split: str | None = None,
    source_name: str | None = None,
    limit: int | None = None,
    duplicates: str = "keep",
    max_logged: int = 5,
    keep_reply: bool = False,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    max_images: int | None = None,
) -> LoadResult:
    """Load and normalise rows (see the module docstring).

    Args:
        source: a built-in dataset name, a .jsonl/.json/.parquet file, a folder (HF ``save_to_disk`` output,
            or a folder of data files such as a Hugging Face snapshot), or a Hub dataset id ``owner/name[:config]``
            (:mod:`reasonrl.data.hub`); a folder or Hub id may end in ``@<split>`` (``data/snapshot@train``,
            ``openai/gsm8k:main@test``, see :mod:`reasonrl.data.sources`), or a procedural ``gym:`` source.
        fields: ``{"question": path, "answer": path, "id": path, "tests": path}`` or a preset name (``orz``,
            ``orz_eval``, ``gsm8k``, ``math``, ``apps``, ``taco``, ``deepcoder``, ``verl_code``); unmapped fields are
            chosen once for the whole source (:func:`choose_fields`; ``tests`` is the key ``tests`` unless mapped).
        answer_from: ``auto`` / ``boxed`` / ``gsm8k`` / ``none`` (how the gold answer is taken from its field).
        on_error: ``raise`` (default) or ``skip`` malformed rows (counted in ``num_skipped``).
        split: the split of a folder or Hub dataset, as ``@<split>`` does (give one or the other, or both the same).
        source_name: value of the ``source`` field (default: the file stem, the folder name with ``@<split>``, or
            the Hub id with ``@<split>``).
        limit: stop after this many good rows.
        duplicates: ``keep`` (default) or ``drop`` rows that repeat an earlier row (same question and answer, or
            same id); either way they are counted in ``num_duplicates`` and logged.
        keep_reply: chat rows keep the turns after their prompt in ``reply_messages`` (SFT on conversations); the
            answer field becomes optional.
        min_pixels, max_pixels, max_images: rows with an ``images`` field (vision-language): each image is read
            (paths relative to the data file's folder, or bytes), decoded, scaled into ``[min_pixels, max_pixels]``
            and kept as a uint8 ``[H, W, 3]`` array; a row holds at most ``max_images`` (:mod:`reasonrl.data.images`).

    Raises:
        DataFormatError: a malformed row (``on_error="raise"``), an unreadable file, or a source without rows.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if answer_from not in ANSWER_FROM:
        raise ValueError(f"answer_from must be one of {ANSWER_FROM}, got {answer_from!r}")
    if duplicates not in DUPLICATES:
        raise ValueError(f"duplicates must be one of {DUPLICATES}, got {duplicates!r}")
    if isinstance(fields, str):
        if fields not in PRESETS:
            raise ValueError(f"unknown field preset {fields!r}; available: {sorted(PRESETS)}")
        fields = PRESETS[fields]
    text = os.fspath(source)
    if is_gym_text(text):  # procedural reasoning-gym items, already normalised
        from reasonrl.data.gym_source import gym_source_rows

        return LoadResult(rows=list(gym_source_rows(text))[:limit])
    path_text, at_split = parse_source(text)
    if split is not None and at_split is not None and split != at_split:
        raise ValueError(f"data source {text!r} names split {at_split!r} but split={split!r} was passed")
    split = split or at_split
    if split is not None and path_text in builtin_names():  # refused before a built-in file is prepared
        raise split_refused(text, path_text, None, split)
    hub = hub_id_of(path_text)
    path = None if hub is not None else resolve_source(path_text)
    if hub is not None:
        records, split = iter_hub(hub, split, text)
        name = f"{hub}@{split}" if split else str(hub)
    elif path.is_dir():
        records, split = iter_folder(path, split, text)
        name = path.name + (f"@{split}" if split else "")
    elif split is not None:
        raise split_refused(text, path_text, path, split)
    else:
        records = iter_file(path)
        name = path.stem
    records = list(records)  # read whole: each field is chosen once, from every row of the source
    mapping, chosen = choose_fields([record for _, record in records], fields)
    name = source_name or name
    result = LoadResult(rows=[])
    seen = _Duplicates()
    for index, (where, record) in enumerate(records):
        try:
            if isinstance(record, DataFormatError):
                raise record
            at = None if f"row {index}" in where else index  # parquet / json lists already name the row
            row = normalize_record(
                record, mapping, answer_from, f"{name}-{index}", name, chosen, index=at, keep_reply=keep_reply
            )
            if row.get("images") is not None:
                base_dir = None if path is None else path if path.is_dir() else path.parent
                found = load_row_images(
                    row,
                    base_dir,
                    f"{where} (id {row['id']!r})",
                    min_pixels=min_pixels,
                    max_pixels=max_pixels,
                    max_images=max_images,
                )
                row["images"] = image_arrays(found)
        except (DataFormatError, KeyError, ValueError, TypeError) as exc:
            message = str(exc) if isinstance(exc, DataFormatError) else f"{where}: {exc.args[0] if exc.args else exc}"
            if on_error == "raise":
                raise DataFormatError(message) from None
            result.num_skipped += 1
            if len(result.skipped) < max_logged:
                result.skipped.append(message)
                logger.warning(f"skipping malformed row: {message}")
            continue
        repeat = seen.earlier(row, where)
        if repeat is not None:
            result.num_duplicates += 1
            if len(result.duplicates) < max_logged:
                result.duplicates.append(repeat)
            if duplicates == "drop":
                continue
        result.rows.append(row)
        if limit is not None and len(result.rows) >= limit:
            break
    _report(result, text, path or hub, duplicates, repeats_by_design(path_text) if hub is None else None)
    return result


def _report(result: LoadResult, text: str, path: Any, duplicates: str, by_design: str | None = None) -> None:
    """Log what was skipped and repeated; raise when the source gave no rows at all (``path``: the file or folder,
    or the Hub id, read). ``by_design``: why a built-in generated source repeats rows on purpose; its repeats are
    then a debug line with that reason, not a report."""
    what = str(path) if text == str(path) else f"{path} (data source {text!r})"
    if result.num_skipped:
        logger.warning(f"{what}: skipped {result.num_skipped} malformed row(s), kept {len(result.rows)}")
    if result.num_duplicates and by_design is not None:
        logger.debug(f"{what}: {result.num_duplicates} repeated row(s): {by_design}")
    elif result.num_duplicates:
        done = "dropped" if duplicates == "drop" else "kept (duplicates='drop' drops them)"
        logger.info(  # a report, not a fault: sampled and ORZ-style sets repeat problems
            f"{what}: {result.num_duplicates} duplicate row(s) {done}, each the same question and answer, or the same "
            f"id, as an earlier row" + (f"; e.g. {result.duplicates[0]}" if result.duplicates else "")
        )
    if not result.rows:
        if result.num_skipped:
            example = f", e.g. {result.skipped[0]}" if result.skipped else ""
            raise DataFormatError(f"{what}: no usable rows: all {result.num_skipped} rows are malformed{example}")
        raise DataFormatError(f"{what}: no rows (an empty file or folder); a data source must hold at least one row")

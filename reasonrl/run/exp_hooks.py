"""The user hooks of ``BasePPOExp``, called and checked by the run's ``ExperimentRunner`` before anything starts
(no Ray, no workers, no engines).

:func:`build_inputs` calls ``build_template``, ``load_train_rows``, ``load_eval_sets`` and, last (it may start
reward worker processes), ``build_scorer``, and checks what each returned:

* the template has a ``render(row) -> str`` that works on the first training row and the first row of every
  evaluation set (so a missing field fails now, naming the hook and the row, not after start-up);
* the training rows are a non-empty list of dicts, at least ``rollout_batch_size`` of them;
* the evaluation sets are a dict of name -> non-empty list of dicts;
* no evaluation row has the question of a training row (:func:`reasonrl.data.overlap.text_overlaps`; allowed
  with ``cfg.allow_train_eval_overlap``), so a training source that overlaps an eval set is refused;
* a data hook that fails to read its data (``DataFormatError``: a malformed or empty file, ``FileNotFoundError``)
  is reported with the hook's name and the loader's message (file and line);
* the scorer is callable as ``scorer(completions, rows) -> list[RewardResult]``; ``close()`` and
  ``wait_ready()`` are optional, and ``wait_ready()`` is called here so reward workers that cannot start fail now;
* with ``env_fn`` (multi-turn): the environment imports and has ``reset`` / ``step``, the tools exist, and the
  tokenizer's chat template can frame tool messages;
* with ``agent_fn`` (agent programs): the function imports and takes ``(row, endpoint)``, and the tokenizer has a
  chat template;
* rows with images: a vision-language model, every prompt within ``max_prompt_len`` with its image tokens
  (:mod:`reasonrl.run.vision_check`).

A hook that returns None or the wrong type raises :class:`HookError` naming the hook, what it returned and what
it must return. The scorer built here is the one the trainer uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reasonrl.config import ConfigError

_SEE = "see docs/notebook.md"
_ROWS = "a non-empty list of dict rows such as {'question': ..., 'answer': ...}"


class HookError(ConfigError):
    """A hook of ``BasePPOExp`` returned something the run cannot use; raised before anything starts."""

    def __init__(self, problems):
        super().__init__(problems, title="invalid experiment hooks")


@dataclass
class ExpInputs:
    """What the hooks built, checked: the trainer's template, rows, evaluation sets and scorer.

    ``close`` is the scorer's ``close`` (None when it has none); the caller runs it on every exit path.
    """

    template: Any
    train_rows: list[dict]
    eval_sets: dict[str, list[dict]]
    scorer: Callable
    close: Callable[[], None] | None
    tokenizer: Any = None  # the policy's tokenizer the template was built with


def _returned(value: Any) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


def _rows(hook: str, rows: Any, problems: list[str]) -> list[dict] | None:
    """``rows`` as a list if it is a non-empty sequence of dicts, else None with the problem appended."""
    if rows is None or isinstance(rows, (str, bytes, Mapping)) or not hasattr(rows, "__len__"):
        problems.append(f"{hook} returned {_returned(rows)}: it must return {_ROWS}; {_SEE}")
        return None
    rows = list(rows)
    if not rows:
        problems.append(f"{hook} returned an empty list: it must return {_ROWS}")
        return None
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            problems.append(f"{hook} row {i} is {_returned(row)}, not a dict: it must return {_ROWS}")
            return None
    return rows


def _eval_sets(hook: str, sets: Any, problems: list[str]) -> dict[str, list[dict]]:
    if not isinstance(sets, Mapping):
        problems.append(
            f"{hook} returned {_returned(sets)}: it must return a dict of name -> rows ({{}} for no evaluation)"
        )
        return {}
    checked = {}
    for name, rows in sets.items():
        rows = _rows(f"{hook}[{name!r}]", rows, problems)
        if rows is not None:
            checked[str(name)] = rows
    return checked


def _render_problem(hook: str, template: Any, rows_hook: str, row: dict) -> str | None:
    try:
        prompt = template.render(row)
    except Exception as err:  # noqa: BLE001 - user template: report which hook and row, whatever it raised
        row_id = f"id {row['id']!r}, " if "id" in row else ""
        return (
            f"{hook}: the template cannot render the first row of {rows_hook} ({row_id}fields {sorted(row)}): "
            f"{type(err).__name__}: {err}"
        )
    if not isinstance(prompt, str) or not prompt:
        return f"{hook}: the template rendered the first row of {rows_hook} as {prompt!r}, not a non-empty string"
    return None


_FAILED = object()  # what a data hook that raised gave (reported once, not again as a wrong return value)


def _loaded(hook: str, load: Callable[[], Any], problems: list[str]) -> Any:
    """What the data hook ``load`` returned; a file it cannot read is a problem naming the hook (then _FAILED)."""
    from reasonrl.data.sources import DataFormatError

    try:
        return load()
    except (DataFormatError, FileNotFoundError) as err:
        problems.append(f"{hook} cannot load its data: {err}")
        return _FAILED


def _overlap_problems(cfg, train_rows: list[dict], eval_sets: dict[str, list[dict]]) -> list[str]:
    """Evaluation rows whose question is a training question, unless ``cfg.allow_train_eval_overlap``."""
    from reasonrl.data.overlap import text_overlaps

    if getattr(cfg, "allow_train_eval_overlap", False):
        return []
    return [
        f"{overlap.describe()}: training on evaluation questions inflates eval/{overlap.eval_set}/*. Remove the "
        f"overlapping source from train_data={list(getattr(cfg, 'train_data', []))} (for a folder, name the training "
        "split: path@train), drop those rows in load_train_rows(), or set allow_train_eval_overlap=true to evaluate "
        "on training questions on purpose"
        for overlap in text_overlaps(train_rows, eval_sets)
    ]


def _default_scorer(exp) -> bool:
    """Whether ``exp`` uses ``BasePPOExp.build_scorer`` (the routing scorer of ``reasonrl.rewards.routing``)."""
    owner = next(k for k in type(exp).__mro__ if "build_scorer" in vars(k))
    return owner.__module__ == "reasonrl.exp" and owner.__qualname__ == "BasePPOExp"


def _check_data(exp, tokenizer, load_tokenizer) -> tuple[Any, list[dict], dict[str, list[dict]], Any]:
    """The data hooks first (cheap: no tokenizer, no torch), then the tokenizer and the template hook."""
    name, cfg = type(exp).__name__, exp.cfg
    problems: list[str] = []
    train_rows = _loaded(f"{name}.load_train_rows()", exp.load_train_rows, problems)
    train_rows = None if train_rows is _FAILED else _rows(f"{name}.load_train_rows()", train_rows, problems)
    eval_sets = _loaded(f"{name}.load_eval_sets()", exp.load_eval_sets, problems)
    eval_sets = {} if eval_sets is _FAILED else _eval_sets(f"{name}.load_eval_sets()", eval_sets, problems)
    if train_rows is not None and len(train_rows) < cfg.rollout_batch_size:
        problems.append(
            f"rollout_batch_size={cfg.rollout_batch_size} exceeds the {len(train_rows)} training rows of "
            f"{name}.load_train_rows() (train_data={list(cfg.train_data)}): lower rollout_batch_size or add data"
        )
    if train_rows is not None:
        problems += _overlap_problems(cfg, train_rows, eval_sets)
        if _default_scorer(exp):  # a custom scorer may accept its own data_source values
            from reasonrl.data.gym_source import gym_sources
            from reasonrl.rewards.routing import routing_problems

            sets = {"train_data": train_rows, **{f"eval_data {k}": v for k, v in eval_sets.items()}}
            problems += routing_problems(cfg, sets, gym=gym_sources(cfg))
    if problems:  # before the tokenizer is loaded: a data mistake is reported in well under a second
        raise HookError(problems)
    if load_tokenizer is not None:
        tokenizer = load_tokenizer()
    template = exp.build_template(tokenizer)
    if not callable(getattr(template, "render", None)):
        problems.append(
            f"{name}.build_template() returned {_returned(template)}: it must return a template with a render(row) "
            "-> str method, e.g. reasonrl.data.get_template('orz'); " + _SEE
        )
    else:
        firsts = {f"{name}.load_train_rows()": train_rows[0]}
        firsts.update({f"{name}.load_eval_sets()[{k!r}]": rows[0] for k, rows in eval_sets.items()})
        for rows_hook, row in firsts.items():
            problem = _render_problem(f"{name}.build_template()", template, rows_hook, row)
            problems += [problem] if problem else []
    if problems:
        raise HookError(problems)
    return template, train_rows, eval_sets, tokenizer


def _check_reward_actors(exp, scorer) -> None:
    """``reward_num_cpus > 0`` needs the routing scorer's cluster routes (``reasonrl.rewards.cluster_routes``): a
    scorer of the experiment's own has none, and is refused here rather than silently scored on the driver."""
    from reasonrl.rewards.cluster_routes import cluster_target

    num_cpus = getattr(getattr(exp, "cfg", None), "reward_num_cpus", 0) or 0
    if num_cpus > 0 and cluster_target(scorer) is None:
        raise HookError(
            f"reward_num_cpus={num_cpus} runs the math and code routes of the built-in routing scorer on Ray actors, "
            f"but {type(exp).__name__}.build_scorer() returned a {type(scorer).__name__}, which has none: set "
            "reward_num_cpus=0, or return reasonrl.rewards.routing.build_scorer(cfg) (rows pick routes by data_source)"
        )


def _check_scorer(exp) -> tuple[Callable, Callable[[], None] | None]:
    name = type(exp).__name__
    scorer = exp.build_scorer()
    close = getattr(scorer, "close", None)
    close = close if callable(close) else None
    try:
        if not callable(scorer):
            raise HookError(
                f"{name}.build_scorer() returned {_returned(scorer)}: it must return a callable "
                "scorer(completions, rows) -> list of RewardResult (a close() method is optional); " + _SEE
            )
        _check_reward_actors(exp, scorer)
        wait_ready = getattr(scorer, "wait_ready", None)
        if callable(wait_ready):
            wait_ready()  # reward workers that cannot start (e.g. an unguarded script) fail here, before Ray
    except BaseException:
        if close is not None:
            close()
        raise
    return scorer, close


def build_inputs(exp, tokenizer=None, *, load_tokenizer: Callable[[], Any] | None = None) -> ExpInputs:
    """Call every hook of ``exp`` (a ``BasePPOExp``) and check the results; raises :class:`HookError`.

    The data hooks run first; ``load_tokenizer()`` (when given, instead of ``tokenizer``) is called only once they
    passed, then the template hook. The scorer is built last, and closed again if its own check fails.
    """
    template, train_rows, eval_sets, tokenizer = _check_data(exp, tokenizer, load_tokenizer)
    cfg = getattr(exp, "cfg", None)
    if cfg is not None and hasattr(cfg, "env_fn"):  # multi-turn: the environment and the chat template, before Ray
        from reasonrl.loop.multi_turn import environment_problems, row_env_problems

        problems = row_env_problems({"train_data": train_rows, **eval_sets}, cfg.env_fn)
        if cfg.env_fn is not None:
            problems += environment_problems(cfg.env_fn, cfg.tools, tokenizer)
        if problems:
            raise ConfigError(problems, title="multi-turn rollouts cannot start")
    if cfg is not None and getattr(cfg, "agent_fn", None) is not None:  # agents: the import, the chat template
        from reasonrl.loop.agent_rollout import agent_problems

        problems = agent_problems(cfg.agent_fn, tokenizer)
        if problems:
            raise ConfigError(problems, title="agent rollouts cannot start")
    if cfg is not None and hasattr(cfg, "freeze_vision_tower"):  # images: a VLM, lengths with image tokens
        from reasonrl.run.vision_check import vision_problems

        problems = vision_problems(cfg, tokenizer, template, {"train_data": train_rows, **eval_sets})
        if problems:
            raise ConfigError(problems, title="the vision-language run cannot start")
    if cfg is not None and getattr(cfg, "use_lora", False):  # LoRA: the targets exist in the model, before Ray
        from reasonrl.models.lora import lora_problems

        problems = lora_problems(cfg.resolve_model_path(cfg.pretrain), cfg.lora_target_modules)
        if problems:
            raise ConfigError(problems, title="LoRA adapters cannot be added")
    scorer, close = _check_scorer(exp)
    return ExpInputs(template, train_rows, eval_sets, scorer, close, tokenizer)

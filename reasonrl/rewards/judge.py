"""LLM as judge (generative reward model): a language model reads the question, the response and the reference
answer, writes a verdict, and a parse rule turns the verdict's text into a score. Pure logic: no Ray, vLLM or HTTP
here; the judge's text comes from a ``generate(prompts) -> texts`` callable (a frozen vLLM engine,
:mod:`reasonrl.distributed.judge_engines`, or an OpenAI-compatible endpoint, :mod:`reasonrl.rewards.judge_client`).

How a sample is scored (docs/model_rewards.md, "LLM as judge")::

    prompt  = judge_template rendered with question, response, reference, data_source, row   (sandboxed jinja)
    text    = generate([prompt, ...])                       one call per scorer batch, greedy by default
    j       = parse(text) in [0, 1], or None (unparsed)     judge_parse: last_number:LO:HI, yes_no, boxed, file.py:fn
    judge   = wrong + j * (correct - wrong)                 a parsed verdict, in reward units
            = judge_unparsed_reward                         an unparsed one (default wrong_reward), counted
            = wrong                                         a response that did not stop (require_stop; not judged)
    r       = (1 - w) * rule_outcome + w * judge + format_bonus + overlong_penalty

``w`` is the row's judge weight (``judge_weights[data_source]``, else ``judge_weight``); ``rule_outcome`` is the
routed scorer's reward without its shaping terms (they are added once, unweighted). A row with ``w == 1`` is not
sent to the rule scorer at all (a judged set needs no verifiable gold); a row with ``w == 0`` is not judged.
``correct`` holds when every verdict that counts says so: the rule's (``w < 1``) and the judge's ``j == 1``
(``w > 0``). Every judged result carries its :class:`JudgeVerdict` (``RewardResult.judge``): the step's metrics
(:func:`judge_metrics`: ``reward/judge_unparsed`` ...) and the generation dumps (``judge_text``) read it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from reasonrl.rewards.extract import last_boxed
from reasonrl.rewards.shaping import RewardConfig, RewardResult

if TYPE_CHECKING:
    from reasonrl.dataplane.completion import Completion

Generate = Callable[[Sequence[str]], list[str | None]]
"""The judge model: prompts (rendered templates) -> one text per prompt, in order; ``None`` for a prompt the judge
could not answer (``judge_url``: the request failed for good), scored as unparsed and counted as failed."""

DEFAULT_TEMPLATE = """\
You are grading a response to a problem against the reference answer.

Problem:
{{ question }}

Reference answer:
{{ reference }}

Response:
{{ response }}

Does the response reach the reference answer? Reply with one word, yes or no.
Verdict:"""
"""The default ``judge_template`` (pairs with the default parse rule ``yes_no``)."""

TEMPLATE_VARIABLES = ("question", "response", "reference", "data_source", "row")
BUILTIN_PARSE = ("last_number:LO:HI", "yes_no", "boxed")
UNPARSED_REASON = "judge_unparsed"


class JudgeSpecError(ValueError):
    """A ``judge_template`` or ``judge_parse`` that cannot be used; the message names the field."""


# ----------------------------------------------------------------------------------------------- template
class JudgeTemplate:
    """``judge_template``: the default text, or a jinja2 file, rendered in a sandboxed environment (the one user
    prompt templates get: no access to Python internals) with ``StrictUndefined`` (a misspelt variable fails at
    the first render, naming it). Variables: ``question``, ``response`` (the policy's completion), ``reference``
    (the row's ``answer``, ``""`` when it has none), ``data_source`` (``""`` when absent) and ``row`` (the whole
    data row). The response is model output: it is only ever substituted as text, never evaluated."""

    def __init__(self, source: str = DEFAULT_TEMPLATE, name: str = "default"):
        from jinja2 import StrictUndefined, TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)
        try:
            self.template = env.from_string(source)
        except TemplateError as exc:
            raise JudgeSpecError(f"judge_template {name}: not a valid jinja2 template ({exc})") from None
        self.name = name

    @classmethod
    def from_spec(cls, spec: str | None) -> JudgeTemplate:
        """``None`` / ``"default"``: :data:`DEFAULT_TEMPLATE`; else the path of a jinja2 file."""
        if spec in (None, "", "default"):
            return cls()
        path = Path(spec).expanduser()
        if not path.is_file():
            raise JudgeSpecError(f"judge_template={spec!r}: no such file (a jinja2 file, or 'default')")
        return cls(path.read_text(), name=repr(spec))

    def render(self, question: Any, response: str, row: Mapping[str, Any]) -> str:
        from jinja2 import TemplateError

        reference = row.get("answer")
        variables = {
            "question": "" if question is None else str(question),
            "response": response,
            "reference": "" if reference is None else str(reference),
            "data_source": str(row.get("data_source") or ""),
            "row": dict(row),
        }
        try:
            return self.template.render(**variables)
        except TemplateError as exc:
            raise JudgeSpecError(
                f"judge_template {self.name} does not render ({type(exc).__name__}: {exc}); its variables are "
                f"{', '.join(TEMPLATE_VARIABLES)}"
            ) from None


# ----------------------------------------------------------------------------------------------- parse rules
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)

ParseFn = Callable[[str], float | None]


def _last_number(lo: float, hi: float) -> ParseFn:
    def parse(text: str) -> float | None:
        found = _NUMBER.findall(text)
        if not found:
            return None
        value = float(found[-1])
        if not (math.isfinite(value) and lo <= value <= hi):
            return None
        return (value - lo) / (hi - lo)

    return parse


def _yes_no(text: str) -> float | None:
    found = _YES_NO.findall(text)
    return None if not found else (1.0 if found[-1].lower() == "yes" else 0.0)


_BOXED_WORDS = {"yes": 1.0, "correct": 1.0, "true": 1.0, "no": 0.0, "incorrect": 0.0, "false": 0.0}


def _boxed(text: str) -> float | None:
    inner = last_boxed(text)
    if inner is None:
        return None
    key = inner.strip().strip("$").strip()
    if key.casefold() in _BOXED_WORDS:
        return _BOXED_WORDS[key.casefold()]
    try:
        value = float(key)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def parse_rule(spec: str | None) -> ParseFn:
    """The ``judge_parse`` rule, ``text -> score in [0, 1]`` or ``None`` when the text holds no verdict:

    * ``last_number:LO:HI``: the last number in the text (``-3``, ``7.5``, ``1e-2``); ``None`` outside [LO, HI];
      the score is ``(x - LO) / (HI - LO)`` (``last_number:1:10``: 1 -> 0, 10 -> 1).
    * ``yes_no`` (the default): the last standalone word ``yes`` or ``no`` (any case): 1 or 0.
    * ``boxed``: the last ``\\boxed{...}``: ``yes/correct/true`` 1, ``no/incorrect/false`` 0, or a number in [0, 1].
    * ``file.py:fn`` / ``pkg.mod:fn``: a user function ``fn(text) -> float | None``; a value that is not a finite
      number in [0, 1], or a call that raises, counts as unparsed (the error is logged).
    """
    spec = spec or "yes_no"
    if spec == "yes_no":
        return _yes_no
    if spec == "boxed":
        return _boxed
    if spec.startswith("last_number"):
        parts = spec.split(":")
        try:
            lo, hi = float(parts[1]), float(parts[2])
            if len(parts) != 3 or not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError
        except (IndexError, ValueError):
            raise JudgeSpecError(
                f"judge_parse={spec!r}: write last_number:LO:HI with finite LO < HI, e.g. last_number:0:10"
            ) from None
        return _last_number(lo, hi)
    if ":" in spec:
        from reasonrl.utils.callables import CallableSpecError, resolve_callable

        try:
            return _checked_user_parse(resolve_callable(spec, what="judge_parse"), spec)
        except CallableSpecError as exc:
            raise JudgeSpecError(str(exc)) from None
    raise JudgeSpecError(
        f"judge_parse={spec!r}: use {', '.join(BUILTIN_PARSE)} or a function file.py:fn (text -> score in [0, 1])"
    )


def _checked_user_parse(fn: Callable, spec: str) -> ParseFn:
    """A user parse function whose failures become unparsed verdicts (logged, the first few and every 100th)."""
    failures = 0

    def parse(text: str) -> float | None:
        nonlocal failures
        try:
            value = fn(text)
            if value is None:
                return None
            value = float(value)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"returned {value!r}, not a score in [0, 1] (or None)")
            return value
        except Exception as exc:  # noqa: BLE001 - a user function's failure is an unparsed verdict, counted
            failures += 1
            if failures <= 3 or failures % 100 == 0:
                logger.warning(f"judge_parse {spec}: {type(exc).__name__}: {exc} (counted as unparsed; {failures})")
            return None

    return parse


# ----------------------------------------------------------------------------------------------- scoring
@dataclass(frozen=True)
class JudgeVerdict:
    """One sample's verdict: the judge's ``text`` (``None`` when the sample was not judged, it did not stop, or
    when the judge ``failed`` to answer), the parsed ``score`` in [0, 1] (``None``: unparsed, failed or not judged),
    the judge ``reward`` it gave, the row's ``weight``, and ``seconds``, the judge call of its batch."""

    text: str | None
    score: float | None
    reward: float
    weight: float
    seconds: float = 0.0
    failed: bool = False

    @property
    def judged(self) -> bool:
        """Sent to the judge (answered or failed)."""
        return self.text is not None or self.failed

    @property
    def unparsed(self) -> bool:
        """Sent to the judge, and no score came of it (a text without a verdict, or no text at all)."""
        return self.judged and self.score is None


@dataclass(frozen=True)
class JudgeWeights:
    """``w`` of a row: ``by_source[data_source]`` when the row's ``data_source`` is listed, else ``default``."""

    default: float = 1.0
    by_source: Mapping[str, float] | None = None

    def of(self, row: Mapping[str, Any]) -> float:
        source = row.get("data_source")
        if self.by_source and isinstance(source, str) and source in self.by_source:
            return float(self.by_source[source])
        return float(self.default)


class JudgeScorer:
    """Mixes a judge into a routed scorer (module docstring): ``scorer(completions, rows) -> list[RewardResult]``.

    ``inner``: the rule scorer (``reasonrl.rewards.routing.RoutingScorer``) or None when every row has ``w == 1``
    (then a row with ``w < 1`` is an error). ``generate``: the judge model; None until it is attached
    (:meth:`attach`: a judge on vLLM engines exists only once Ray runs, after the scorer was built and checked).
    ``unparsed_reward``: the judge reward of an unparsed verdict (None: ``reward_config.wrong_reward``)."""

    def __init__(
        self,
        inner: Callable | None,
        generate: Generate | None,
        *,
        template: JudgeTemplate,
        parse: ParseFn,
        weights: JudgeWeights,
        reward_config: RewardConfig,
        unparsed_reward: float | None = None,
    ):
        self.inner, self.generate = inner, generate
        self.template, self.parse, self.weights, self.reward_config = template, parse, weights, reward_config
        rc = reward_config
        self.unparsed_reward = rc.wrong_reward if unparsed_reward is None else float(unparsed_reward)
        self.num_judged = self.num_unparsed = 0

    def __getattr__(self, name: str):
        """Everything else is the routed scorer's (``routes``, what the run attaches to it...): the judge wraps it,
        the run still talks to it."""
        inner = self.__dict__.get("inner")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)

    def attach(self, generate: Generate | None) -> None:
        """Give the judge model once it runs (``reasonrl.run.judge_launch`` does for ``judge_pretrain``, once per
        attempt), or take it away (None: the attempt's engine is going away)."""
        self.generate = generate

    def judge(self, completions: Sequence[Completion], rows: Sequence[Mapping[str, Any]]) -> list[JudgeVerdict]:
        """The verdict of each sample (weight ``1``; :meth:`__call__` sets the row's): one ``generate`` call for the
        samples that stopped (or all, without ``require_stop``); the others are not judged and get ``wrong``."""
        if self.generate is None:
            raise RuntimeError("the judge has no model yet: attach() its engines (judge_pretrain) before scoring")
        rc = self.reward_config
        todo = [i for i, c in enumerate(completions) if c.finish_reason == "stop" or not rc.require_stop]
        prompts = [self.template.render(rows[i].get("question"), completions[i].text, rows[i]) for i in todo]
        start = time.perf_counter()
        texts = list(self.generate(prompts)) if prompts else []
        seconds = time.perf_counter() - start
        if len(texts) != len(prompts):
            raise RuntimeError(f"the judge returned {len(texts)} texts for {len(prompts)} prompts")
        verdicts = [JudgeVerdict(None, None, rc.wrong_reward, 1.0)] * len(completions)
        for i, text in zip(todo, texts, strict=True):
            score = None if text is None else self.parse(text)
            reward = (
                self.unparsed_reward
                if score is None
                else rc.wrong_reward + score * (rc.correct_reward - rc.wrong_reward)
            )
            verdicts[i] = JudgeVerdict(text, score, reward, 1.0, seconds, failed=text is None)
        self.num_judged += len(todo)
        self.num_unparsed += sum(verdicts[i].score is None for i in todo)
        return verdicts

    def __call__(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list[RewardResult]:
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions but {len(rows)} rows")
        weights = [self.weights.of(row) for row in rows]
        ruled = [i for i, w in enumerate(weights) if w < 1.0]
        judged = [i for i, w in enumerate(weights) if w > 0.0]
        results: list[Any] = [None] * len(rows)
        if ruled:
            if self.inner is None:
                raise ValueError(f"row {ruled[0]} has judge weight {weights[ruled[0]]} < 1 but no rule scorer runs")
            for i, r in zip(ruled, self.inner([completions[i] for i in ruled], [rows[i] for i in ruled]), strict=True):
                results[i] = r
        verdicts = self.judge([completions[i] for i in judged], [rows[i] for i in judged]) if judged else []
        for i, v in zip(judged, verdicts, strict=True):
            w = weights[i]
            results[i] = self._mixed(completions[i], results[i], dataclasses.replace(v, weight=w))
        return results

    def _mixed(self, c, rule: Any, v: JudgeVerdict) -> Any:
        """The result of a judged sample: the rule's result with the mixed reward (module docstring), or a new one
        for ``w == 1``."""
        judge_ok = v.score is not None and v.score >= 1.0
        reason = "judge" if v.score is not None else (UNPARSED_REASON if v.judged else "judge_not_stopped")
        if rule is None:
            return RewardResult(
                reward=v.reward,
                correct=judge_ok,
                reason=reason,
                finish_reason=c.finish_reason,
                truncated=c.finish_reason != "stop",
                elapsed_s=v.seconds,
                judge=v,
            )
        shaping = getattr(rule, "format_bonus", 0.0) + getattr(rule, "overlong_penalty", 0.0)
        outcome = float(rule.reward) - shaping
        rule.reward = (1.0 - v.weight) * outcome + v.weight * v.reward + shaping
        rule.correct = bool(rule.correct) and judge_ok
        rule.judge = v
        return rule

    def wait_ready(self) -> None:
        wait_ready = getattr(self.inner, "wait_ready", None)
        if callable(wait_ready):
            wait_ready()

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
        close = getattr(self.generate, "close", None)
        if callable(close):
            close()


def judge_metrics(results: Sequence[Any]) -> dict[str, float]:
    """``reward/judge_*`` of a step's results (empty when none was judged): ``judged``, samples the judge read;
    ``unparsed``, judged samples whose text held no verdict (scored ``judge_unparsed_reward``), failed ones
    included; ``failed``, those the judge gave no text (``judge_url``: the request failed for good); ``score_mean``, the
    mean parsed score in [0, 1] (absent when none parsed); ``seconds``, the slowest judge call of the step."""
    verdicts = [r.judge for r in results if getattr(r, "judge", None) is not None]
    judged = [v for v in verdicts if v.judged]
    if not judged:
        return {}
    scores = [v.score for v in judged if v.score is not None]
    out = {
        "reward/judge_judged": float(len(judged)),
        "reward/judge_unparsed": float(sum(v.unparsed for v in judged)),
        "reward/judge_failed": float(sum(v.failed for v in judged)),
        "reward/judge_seconds": max(v.seconds for v in judged),
    }
    if scores:  # no parsed verdict: no mean (never a 0 that looks like a verdict)
        out["reward/judge_score_mean"] = sum(scores) / len(scores)
    return out


def judge_configured(cfg) -> bool:
    """The config runs a judge: ``judge_pretrain`` or ``judge_url`` is set."""
    return bool(getattr(cfg, "judge_pretrain", None) or getattr(cfg, "judge_url", None))


def judge_from_config(cfg, inner: Callable | None) -> JudgeScorer:
    """The run's :class:`JudgeScorer` around the routed scorer ``inner``: its model is the ``judge_url`` client at
    once, or, for ``judge_pretrain``, attached once the run has started the judge engine
    (``reasonrl.run.judge_launch.start_judge``). Raises :class:`JudgeSpecError` naming ``judge_template`` /
    ``judge_parse`` when they cannot be used (built before Ray starts)."""
    generate = None
    if cfg.judge_url:
        from reasonrl.rewards.judge_client import JudgeUrlClient, JudgeUrlSettings

        generate = JudgeUrlClient(JudgeUrlSettings.from_config(cfg))
    return JudgeScorer(
        inner,
        generate,
        template=JudgeTemplate.from_spec(cfg.judge_template),
        parse=parse_rule(cfg.judge_parse),
        weights=JudgeWeights(cfg.judge_weight, cfg.judge_weights),
        reward_config=cfg.reward_config(),
        unparsed_reward=cfg.judge_unparsed_reward,
    )

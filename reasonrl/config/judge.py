"""Refusals of the LLM-as-judge fields (``judge_*``, docs/model_rewards.md "LLM as judge"), before anything starts:
each message names the field and what to do. Standard library only: the template's jinja2 and a user parse function
are loaded when the scorer is built (``reasonrl.rewards.judge``, still before Ray), whose errors name the field too."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from reasonrl.config.http_fields import client_number_problems, secret_env_problems, url_problems
from reasonrl.config.model_paths import model_problems

JUDGE_ONLY_FIELDS = ("judge_template", "judge_weights", "judge_unparsed_reward")
"""Fields that mean something only with a judge: set without one, they are refused (a judge the user forgot)."""


def judge_problems(cfg, environ: Mapping[str, str] | None = None) -> list[str]:
    """Problems of the ``judge_*`` fields: both or neither of ``judge_pretrain`` / ``judge_url`` with judge-only
    fields set, weights that judge no row, a URL that is not ``http(s)://host[:port]/path``, ``judge_url`` without
    ``judge_model``, an unset key variable, ``judge_pretrain`` on GPUs (not yet placed there), a template or parse
    rule that cannot be used, weights outside [0, 1], numbers out of range."""
    environ = os.environ if environ is None else environ
    problems = _number_problems(cfg)
    pretrain, url = cfg.judge_pretrain, cfg.judge_url
    if pretrain is None and url is None:
        stray = [name for name in JUDGE_ONLY_FIELDS if getattr(cfg, name) is not None]
        return problems + [
            f"{name}={getattr(cfg, name)!r} but no judge runs: set judge_pretrain (a model) or judge_url (an "
            f"OpenAI-compatible endpoint), or leave {name} unset"
            for name in stray
        ]
    if pretrain is not None and url is not None:
        problems.append("judge_pretrain and judge_url are both set: the judge is one model, set one of them")
    if pretrain is not None:
        problems += model_problems("judge_pretrain", pretrain)
        if cfg.device == "gpu":
            problems.append(
                f"judge_pretrain={pretrain!r} with device=gpu: the judge engine is not yet placed on GPUs (it runs "
                "on a CPU bundle of its own); serve the judge with vllm serve and give judge_url instead"
            )
    if url is not None:
        problems += _url_problems(cfg, environ)
    weights = cfg.judge_weights if isinstance(cfg.judge_weights, dict) else {}
    if cfg.judge_weight == 0 and not any(w for w in weights.values() if isinstance(w, int | float)):
        problems.append(
            f"judge_weight=0 and judge_weights={cfg.judge_weights!r}: no row would be judged, yet the judge would run; "
            "give a weight > 0 (judge_weight, or per data_source in judge_weights) or unset judge_pretrain / judge_url"
        )
    problems += _template_problems(cfg.judge_template)
    problems += _parse_problems(cfg.judge_parse)
    return problems


def _number_problems(cfg) -> list[str]:
    problems = client_number_problems(cfg, "judge_url", counts=("judge_max_tokens",))
    if not (cfg.judge_temperature >= 0 and math.isfinite(cfg.judge_temperature)):
        problems.append(f"judge_temperature={cfg.judge_temperature!r}: must be >= 0 (0 = greedy)")
    unparsed = cfg.judge_unparsed_reward
    if unparsed is not None and not math.isfinite(unparsed):
        problems.append(f"judge_unparsed_reward={unparsed!r}: must be a finite number (or none: wrong_reward)")
    if not (0.0 <= cfg.judge_weight <= 1.0):
        problems.append(f"judge_weight={cfg.judge_weight!r}: must be in [0, 1] (r = (1 - w) * rule + w * judge)")
    weights = cfg.judge_weights
    if weights is not None:
        if not isinstance(weights, dict):
            problems.append(f'judge_weights={weights!r}: give a JSON object like {{"math": 0.5, "code": 0}}')
        else:
            for source, w in weights.items():
                if not isinstance(w, int | float) or isinstance(w, bool) or not 0.0 <= w <= 1.0:
                    problems.append(f"judge_weights[{source!r}]={w!r}: must be a number in [0, 1]")
    return problems


def _url_problems(cfg, environ: Mapping[str, str]) -> list[str]:
    problems = url_problems(
        "judge_url", cfg.judge_url, "e.g. judge_url=http://127.0.0.1:8000/v1 (vllm serve <judge model>)"
    )
    if not cfg.judge_model:
        problems.append("judge_url is set but judge_model is not: give the model name the endpoint serves")
    env = cfg.judge_url_secret_env
    return problems + secret_env_problems("judge_url_secret_env", env, environ, "endpoint's key", "no key")


def _template_problems(spec: str | None) -> list[str]:
    """The file must exist; its jinja2 is compiled when the scorer is built (still before Ray), naming the field."""
    if spec in (None, "", "default") or Path(spec).expanduser().is_file():
        return []
    return [f"judge_template={spec!r}: no such file (a jinja2 file, or none for the built-in template)"]


def _parse_problems(spec: str) -> list[str]:
    """The rule's spec (the rules themselves: ``reasonrl.rewards.judge.parse_rule``)."""
    how = "use yes_no, boxed, last_number:LO:HI or a function file.py:fn (text -> score in [0, 1] or None)"
    if spec in ("yes_no", "boxed"):
        return []
    if spec.startswith("last_number"):
        parts = spec.split(":")
        try:
            lo, hi = float(parts[1]), float(parts[2])
        except (IndexError, ValueError):
            lo = hi = math.nan
        if len(parts) != 3 or not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            return [f"judge_parse={spec!r}: write last_number:LO:HI with finite LO < HI, e.g. last_number:0:10"]
        return []
    target, _, fn = spec.rpartition(":")
    if not target or not fn.isidentifier():
        return [f"judge_parse={spec!r}: {how}"]
    if target.endswith(".py") or "/" in target:  # a user file: it must exist; it is imported when the scorer is built
        path = Path(target).expanduser()
        return [] if path.is_file() else [f"judge_parse={spec!r}: file {str(path)!r} does not exist"]
    return []  # pkg.mod:fn, imported when the scorer is built

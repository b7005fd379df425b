"""A config as text: the resolved ``table()``, ``help_text()`` (``--help``) and the Markdown field reference of
docs/config.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from reasonrl.config.convert import _type_hints
from reasonrl.config.fields import _annotation_text, _field_default, _field_meta, _ordered_fields

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig


def config_table(cfg: BasePPOExpConfig, base_cls: type[BasePPOExpConfig]) -> str:
    """See :meth:`BasePPOExpConfig.table` (``base_cls``: the class whose defaults ``*`` compares to)."""
    base = {f.name: _field_default(f) for f in fields(base_cls)}
    own = {f.name: _field_default(f) for f in fields(cfg)}
    rows = []
    for f in _ordered_fields(type(cfg)):
        value = getattr(cfg, f.name)
        ref = base.get(f.name, own[f.name])
        group = _field_meta(type(cfg), f).get("group", "custom")
        rows.append((group, f.name, "*" if value != ref else " ", _short(value)))
    gw = max(len("group"), *(len(r[0]) for r in rows))
    fw = max(len("field"), *(len(r[1]) for r in rows))
    lines = [
        f"{type(cfg).__name__} (* = differs from the BasePPOExpConfig default)",
        f"{'group':<{gw}}  {'field':<{fw}}    value",
        f"{'-' * gw}  {'-' * fw}    {'-' * 5}",
    ]
    previous = None
    for group, name, mark, value in rows:
        lines.append(f"{group if group != previous else '':<{gw}}  {name:<{fw}}  {mark} {value}")
        previous = group
    return "\n".join(lines)


def config_help(cls: type[BasePPOExpConfig]) -> str:
    """See :meth:`BasePPOExpConfig.help_text`."""
    lines = [
        f"{cls.__name__}: override any field with field=value (e.g. actor_lr=1e-6 train_data=gsm8k_train,math_train"
        " reward_pretrain=none). DEBUG_MODE=1 shrinks the run to one device.",
    ]
    return "\n".join(lines + field_help_lines(cls, show_default=_short))


def field_help_lines(cls, *, skip: Sequence[str] = (), show_default=repr) -> list[str]:
    """``--help`` lines of a config dataclass (RL or SFT): per group a ``[group]`` header, then each field as
    ``  name: type = default`` with its meaning underneath. ``skip``: fields set in Python only."""
    hints = _type_hints(cls)
    lines: list[str] = []
    previous = None
    for f in _ordered_fields(cls):
        if f.name in skip:
            continue
        meta = _field_meta(cls, f)
        group = meta.get("group", "custom")
        if group != previous:
            lines += ["", f"[{group}]"]
            previous = group
        lines.append(f"  {f.name}: {_annotation_text(f, hints)} = {show_default(_field_default(f))}")
        if meta.get("help"):
            lines.append(f"      {meta['help']}")
    return lines


def markdown_fields(cls: type[BasePPOExpConfig]) -> str:
    """See :meth:`BasePPOExpConfig.markdown_reference`."""
    hints = _type_hints(cls)
    out = []
    previous = None
    for f in _ordered_fields(cls):
        meta = _field_meta(cls, f)
        group = meta.get("group", "custom")
        if group != previous:
            out += ["", f"### {group}", "", "| field | type | default | meaning |", "|---|---|---|---|"]
            previous = group
        doc = _markdown_text(meta.get("help", ""))
        default = _short(_field_default(f)).replace("|", "\\|")
        kind = _annotation_text(f, hints).replace("|", "\\|")
        out.append(f"| `{f.name}` | `{kind}` | `{default}` | {doc} |")
    return "\n".join(out).strip() + "\n"


def _markdown_text(text: str) -> str:
    """A help text as literal Markdown table-cell text: ``<think>``, ``[0, 1]``, ``a * b`` and ``\\boxed`` shown as
    written (not read as HTML, a link or emphasis), ``|`` kept inside the cell."""
    for char in "\\*[]|":
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;")


def _short(value: Any, width: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."

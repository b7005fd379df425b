"""The checks a run makes before it starts anything expensive: the config's own (pure, ``BasePPOExpConfig.validate``)
together with those that need the data it names (:mod:`reasonrl.data.source_checks`: each source exists and parses,
no eval set is a training source) and the models' tokenizers (a distillation teacher must read the student's token
ids as the student does), every problem in one :class:`~reasonrl.config.ConfigError`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reasonrl.config import BasePPOExpConfig


def validate_run(
    cfg: BasePPOExpConfig, cluster_resources: Mapping[str, float] | None = None, nodes: Sequence[Any] | None = None
) -> None:
    """:meth:`BasePPOExpConfig.validate` with the data and tokenizer checks: call it where a run starts, before
    ``ray.init`` (and again with the cluster's resources, as ``validate``)."""
    cfg.validate(cluster_resources, nodes, data_checks=run_problems)


def run_problems(cfg: BasePPOExpConfig, deep: bool) -> list[str]:
    """The problems that need more than the config: its data's (:func:`reasonrl.data.source_checks.data_problems`)
    and, when nothing else refused the run (``deep``: the models resolve), the teacher's tokenizer."""
    from reasonrl.data.source_checks import data_problems

    return data_problems(cfg, deep) + (teacher_tokenizer_problems(cfg) if deep else [])


def teacher_tokenizer_problems(cfg: BasePPOExpConfig) -> list[str]:
    """``teacher_pretrain`` must share the policy's tokenizer: the teacher scores the student's sampled token ids as
    they are, so a token with another id would be scored as some other token. Both tokenizers are loaded and their
    vocabularies compared (:func:`reasonrl.models.tokenizer_match.tokenizer_differences`)."""
    if cfg.teacher_pretrain is None:
        return []
    from transformers import AutoTokenizer

    from reasonrl.models.tokenizer_match import model_vocab_size, tokenizer_differences
    from reasonrl.sft.warm_start import register_offline_models

    register_offline_models()  # both may be offline models (tiny, a warm start): their builders, before they resolve

    student_path = cfg.resolve_model_path(cfg.pretrain)
    teacher_path = cfg.resolve_model_path(cfg.teacher_pretrain)
    differences = tokenizer_differences(
        AutoTokenizer.from_pretrained(student_path),
        AutoTokenizer.from_pretrained(teacher_path),
        model_vocab_size(teacher_path),
    )
    if not differences:
        return []
    return [
        f"teacher_pretrain={cfg.teacher_pretrain!r} does not share the tokenizer of pretrain={cfg.pretrain!r}: "
        + "; ".join(differences)
        + ". The teacher scores the student's sampled token ids as they are, so both must map every token to the "
        "same id: use a teacher of the same model family (same tokenizer), or distil through another student"
    ]

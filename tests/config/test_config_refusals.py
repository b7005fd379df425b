"""Refusals that cost nothing (issue 23, items 5 and 6): a model folder transformers cannot build (unknown
``model_type``) or that has no tokenizer is refused by ``validate()`` naming the field, before anything imports
torch or transformers; a refusal does not wait for reasoning-gym or ``datasets`` to be imported; and an uncached
Hub model is mentioned alongside the other problems instead of only after they are fixed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.model_paths import known_model_types, model_problems

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "datasets", "reasoning_gym", "ray", "deepspeed", "vllm")


def _broken(tmp_path: Path, model: Path, name: str, model_type: str | None = None, drop=()) -> Path:
    folder = tmp_path / name
    shutil.copytree(model, folder)
    if model_type is not None:
        config = json.loads((folder / "config.json").read_text())
        config.update(model_type=model_type, architectures=["NoSuchForCausalLM"])
        (folder / "config.json").write_text(json.dumps(config))
    for file in drop:
        (folder / file).unlink(missing_ok=True)
    return folder


TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json")


def test_known_model_types_match_transformers_registry():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    assert known_model_types() == frozenset(CONFIG_MAPPING_NAMES)


def test_the_tiny_model_passes(tiny_model_dir):
    assert model_problems("pretrain", str(tiny_model_dir)) == []


@pytest.mark.parametrize("field", ["pretrain", "critic_pretrain", "reward_pretrain"])
def test_unknown_model_type_is_refused_naming_the_field(tmp_path, tiny_model_dir, field):
    folder = _broken(tmp_path, tiny_model_dir, "badarch", model_type="nosuchmodel")
    (problem,) = model_problems(field, str(folder))
    assert problem.startswith(f"{field}='{folder}': config.json names model_type='nosuchmodel'"), problem
    assert "NoSuchForCausalLM" in problem


def test_remote_code_model_type_is_left_to_transformers(tmp_path, tiny_model_dir):
    folder = _broken(tmp_path, tiny_model_dir, "remote", model_type="custom")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoConfig": "x.CustomConfig"}}))
    assert model_problems("pretrain", str(folder)) == []


def test_missing_tokenizer_is_refused_naming_pretrain(tmp_path, tiny_model_dir):
    folder = _broken(tmp_path, tiny_model_dir, "notok", drop=TOKENIZER)
    (problem,) = model_problems("pretrain", str(folder))
    assert problem.startswith(f"pretrain='{folder}' has no usable tokenizer"), problem
    assert model_problems("critic_pretrain", str(folder)) == []  # a critic folder need not carry the tokenizer


def test_vocabulary_files_without_tokenizer_json_pass(tmp_path, tiny_model_dir):
    folder = _broken(tmp_path, tiny_model_dir, "slow", drop=TOKENIZER)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "Qwen2Tokenizer"}))
    (folder / "vocab.json").write_text("{}")
    (folder / "merges.txt").write_text("#version: 0.2\n")
    assert model_problems("pretrain", str(folder)) == []
    byte_level = _broken(tmp_path, tiny_model_dir, "byt5", drop=TOKENIZER)
    (byte_level / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "ByT5Tokenizer"}))
    assert model_problems("pretrain", str(byte_level)) == []


def test_refusal_lists_every_broken_model_field(tmp_path, tiny_model_dir):
    bad = _broken(tmp_path, tiny_model_dir, "badarch", model_type="nosuchmodel")
    notok = _broken(tmp_path, tiny_model_dir, "notok", drop=TOKENIZER)
    cfg = BasePPOExpConfig(pretrain=str(notok), critic_pretrain=str(bad), device="cpu", generate_max_len=512)
    with pytest.raises(ConfigError) as err:
        cfg.validate()
    text = str(err.value)
    assert f"pretrain='{notok}' has no usable tokenizer" in text
    assert f"critic_pretrain='{bad}': config.json names model_type='nosuchmodel'" in text


def test_uncached_hub_model_is_named_with_the_other_problems(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    cfg = BasePPOExpConfig(pretrain="Qwen/Qwen2.5-7B", device="cpu", generate_max_len=512, policy_loss="nope")
    with pytest.raises(ConfigError) as err:
        cfg.validate()
    text = str(err.value)
    assert "policy_loss='nope' is unknown" in text
    assert "pretrain='Qwen/Qwen2.5-7B' is not in the local HF cache" in text and "would be downloaded" in text
    assert not (tmp_path / "hub").exists() or not any((tmp_path / "hub").iterdir())  # nothing downloaded


def _refuse_in_child(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``python -m playground.tiny_grpo_cpu *args`` in a child that reports its own exit code, the seconds it spent
    after its interpreter started, and which heavy modules were imported by then."""
    report = tmp_path / "report.json"
    code = (
        "import json, runpy, sys, time\n"
        "t = time.perf_counter()\n"
        f"sys.argv = ['tiny_grpo_cpu', *{list(args)!r}]\n"
        "try:\n"
        "    runpy.run_module('playground.tiny_grpo_cpu', run_name='__main__')\n"
        "    code = 0\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        f"open({str(report)!r}, 'w').write(json.dumps(dict(code=code, s=time.perf_counter() - t, heavy=heavy)))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return done, json.loads(report.read_text())


def test_broken_model_refused_before_any_heavy_import(tmp_path, tiny_model_dir):
    bad = _broken(tmp_path, tiny_model_dir, "badarch", model_type="nosuchmodel")
    done, report = _refuse_in_child(tmp_path, f"pretrain={bad}", "train_data=gym:basic_arithmetic")
    assert report["code"] == 2, done.stderr
    assert report["heavy"] == [], report  # deterministic: no torch, transformers, datasets, reasoning-gym, ray
    assert f"pretrain='{bad}': config.json names model_type='nosuchmodel'" in done.stderr + done.stdout
    assert "train_data: 'gym:basic_arithmetic' is checked once the other problems are fixed" in done.stderr
    print(f"refusal took {report['s']:.2f} s in the child")  # informative only: timings vary with the machine's load


# Issue 27: refusals that waited seconds for the tokenizer and torch (env_fn), reasoning-gym (gym: sources) or datasets
# (a Hub id offline) come before any of them is imported.
THREE_ENVS = """
class Guess:
    def reset(self, row):
        return None

    def step(self, model_turn):
        return None


class NoStep:
    def reset(self, row):
        return None


class Words(Guess):
    pass
"""


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["env_fn={tmp}/envs.py:Nope"],
            {},
            "defines no 'Nope'; did you mean 'NoStep'? classes and functions defined "
            "there: ['Guess', 'NoStep', 'Words']",
        ),
        (["env_fn={tmp}/envs.py:NoStep"], {}, "the class NoStep has no callable step"),
        (["env_fn={tmp}/nosuch.py:Env"], {}, "nosuch.py' does not exist"),
        (["train_data=gym:chain_summ"], {}, "reasoning-gym has no task 'chain_summ'; did you mean chain_sum"),
        (["train_data=gym:chain_sum:nosuch=1"], {}, "chain_sum has no option 'nosuch'"),
        (["train_data=gym:chain_sum:min_terms=0"], {}, "not valid for chain_sum: min_terms must be positive"),
        (
            ["train_data=someone/no_such_set"],
            {
                "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
                "HF_HUB_CACHE": "{tmp}/hub",
                "HF_DATASETS_CACHE": "{tmp}/d",
            },
            "'someone/no_such_set' is not in the local cache",
        ),
    ],
    ids=["env-fn-missing-class", "env-fn-no-step", "env-fn-missing-file", "gym-task", "gym-option", "gym-value", "hub"],
)
def test_user_code_gym_and_hub_refused_before_any_heavy_import(tmp_path, monkeypatch, args, env, expected):
    (tmp_path / "envs.py").write_text(THREE_ENVS)
    for key, value in env.items():
        monkeypatch.setenv(key, value.format(tmp=tmp_path))
    done, report = _refuse_in_child(tmp_path, *[a.format(tmp=tmp_path) for a in args])
    assert report["code"] == 2, done.stderr
    assert report["heavy"] == [], report  # no torch, transformers, datasets, reasoning-gym or ray
    assert expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    print(f"refusal took {report['s']:.2f} s in the child")  # informative only

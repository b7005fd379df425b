"""SFT data: encoding (EOS appended, long targets dropped, bad rows named), held-out split, seeded batch order,
and the response-only loss of the worker against transformers' masked cross-entropy."""

from __future__ import annotations

import json

import pytest
import torch

from reasonrl.data import DataFormatError, get_template
from reasonrl.data.arithmetic import ArithmeticTask
from reasonrl.sft import SFTConfig, batch_order, encode_pairs, split_rows

TASK = ArithmeticTask(train_size=600, heldout_size=32, seed=1)


def test_encode_pairs_appends_eos_and_drops_long_targets(tiny_tokenizer):
    template = get_template("plain")
    rows = [{"question": "12+34=", "answer": "46"}, {"question": "1+1=", "answer": "2" * 40}]
    samples, dropped = encode_pairs(rows, tiny_tokenizer, template, max_response_len=8)
    assert dropped == 1 and len(samples) == 1
    prompt, response = samples[0]
    assert prompt == tiny_tokenizer("12+34=", add_special_tokens=False).input_ids
    assert response[-1] == tiny_tokenizer.eos_token_id
    assert tiny_tokenizer.decode(response[:-1]) == "46"
    long_prompt, _ = encode_pairs([{"question": "1+" * 50 + "1=", "answer": "51"}], tiny_tokenizer, template)[0][0]
    truncated, _ = encode_pairs(
        [{"question": "1+" * 50 + "1=", "answer": "51"}], tiny_tokenizer, template, max_prompt_len=5
    )[0][0]
    assert truncated == long_prompt[-5:], "prompts are left-truncated like the RL trainer's"


@pytest.mark.parametrize(
    "row", [{"question": "1+1="}, {"question": "1+1=", "answer": "  "}, {"question": "q", "answer": None}]
)
def test_a_row_without_its_target_is_named(tiny_tokenizer, row):
    rows = [{"question": "2+2=", "answer": "4"}, {"id": "r7", **row}]
    with pytest.raises(DataFormatError, match=r"training data: row 1 \(id 'r7'\).*response_field='answer'"):
        encode_pairs(rows, tiny_tokenizer, get_template("plain"), where="training data")


def test_files_with_other_field_names(tmp_path, tiny_tokenizer):
    """Common SFT layouts load through prompt_field / response_field; targets keep their full text."""
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"prompt": "Say hi", "response": "hi there"}\n{"prompt": "2+2=", "response": "4"}\n')
    cfg = SFTConfig(train_data=[str(pairs)], prompt_field="prompt", response_field="response", eval_frac=0.0)
    train, _ = split_rows(cfg)
    samples, dropped = encode_pairs(train, tiny_tokenizer, get_template("plain"), response_field="response")
    assert dropped == 0 and tiny_tokenizer.decode(samples[0][1][:-1]) == "hi there"
    assert samples[0][0] == tiny_tokenizer("Say hi", add_special_tokens=False).input_ids
    solutions = tmp_path / "solutions.jsonl"
    solution = "1+2 = 3, so \\boxed{3}"
    solutions.write_text(json.dumps({"question": "1+2=", "solution": solution}) + "\n")
    train, _ = split_rows(SFTConfig(train_data=[str(solutions)], response_field="solution", eval_frac=0.0))
    assert train[0]["solution"] == solution, "the full solution, not the extracted answer"
    in_memory, _ = split_rows(SFTConfig(rows=[{"prompt": "Say hi", "response": "hi"}], prompt_field="prompt"))
    assert in_memory[0]["question"] == "Say hi"
    with pytest.raises(DataFormatError, match=r"data: row 0: .*no 'question' field; set prompt_field"):
        encode_pairs([{"prompt": "x", "answer": "1"}], tiny_tokenizer, get_template("plain"), where="data")
    with pytest.raises(DataFormatError, match=r"row 0 .*renders to an empty prompt.*prompt_field"):
        encode_pairs([{"question": "", "answer": "1"}], tiny_tokenizer, get_template("plain"))


def test_batch_order_is_seeded_full_batches_over_epochs():
    order = batch_order(10, 4, steps=5, seed=3)
    assert order == batch_order(10, 4, steps=5, seed=3) != batch_order(10, 4, steps=5, seed=4)
    assert [len(b) for b in order] == [4] * 5
    assert len(set(order[0] + order[1])) == 8, "no repeat inside an epoch"
    with pytest.raises(ValueError, match="exceeds"):
        batch_order(3, 4, steps=1, seed=0)


def test_split_rows_precedence_and_eval_fraction():
    rows = TASK.rows("train")
    train, evals = split_rows(SFTConfig(rows=rows, eval_frac=0.1))
    assert len(evals) == 60 and len(train) == 540 and sorted(map(str, train + evals)) == sorted(map(str, rows))
    assert evals != rows[-60:], "the held-out rows are a seeded sample, not the file's tail"
    assert split_rows(SFTConfig(rows=rows, eval_frac=0.1)) == (train, evals)
    train, evals = split_rows(SFTConfig(rows=rows, eval_frac=0.5, eval_max_rows=20))
    assert len(evals) == 20 and len(train) == 580, "rows beyond eval_max_rows stay in training"
    train, evals = split_rows(SFTConfig(generator=lambda: rows[:10], eval_rows=rows[:3]))
    assert len(train) == 10 and evals == rows[:3]
    train, evals = split_rows(
        SFTConfig(train_data=["arith_add2_heldout"], eval_frac=0.0, eval_data=["arith_add2_heldout"])
    )
    assert len(train) == 200 and len(evals) == 200
    assert SFTConfig().with_overrides({"lr": "3e-4", "max_steps": "7"}).max_steps == 7


def test_loss_counts_response_tokens_only(tiny_model_dir, tiny_tokenizer):
    """The worker's NLL equals cross-entropy with the prompt positions masked out (labels = -100)."""
    from transformers import AutoModelForCausalLM

    from reasonrl.distributed.ppo_workers import WorkerConfig
    from reasonrl.sft.worker import SFTWorker

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    samples, _ = encode_pairs(TASK.rows("heldout")[:3], tiny_tokenizer, get_template("plain"))
    worker = SFTWorker(0, 1)
    worker.config, worker.engine = WorkerConfig(model_path=str(tiny_model_dir)), model
    with torch.no_grad():
        nll, tokens = worker._nll(samples)
        want, count = 0.0, 0
        for prompt, response in samples:
            ids = torch.tensor([prompt + response])
            labels = torch.tensor([[-100] * len(prompt) + response])
            want += model(input_ids=ids, labels=labels).loss.item() * len(response)
            count += len(response)
    assert tokens == count
    assert nll.item() == pytest.approx(want, rel=1e-5)


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path):
    """A checkpoint continues only the run that wrote it (same weights-relevant config, data size, steps, world
    size); the check names what differs and runs before Ray starts."""
    from reasonrl.config import ConfigError
    from reasonrl.sft.trainer import check_resume, run_state
    from reasonrl.utils.checkpoint import CheckpointManager, save_trainer_state

    cfg = SFTConfig(max_steps=5, train_batch_size=8, save_interval=1)
    manager = CheckpointManager(tmp_path / "ckpt", keep_last=5)
    for step in (2, 4):
        with manager.staging(step) as tmp:
            save_trainer_state(tmp, run_state(cfg, 40, step))
    step_2, step_4 = manager.path_for(2), manager.path_for(4)
    assert check_resume(cfg, step_4, 40) == 4
    with pytest.raises(ConfigError, match=r"num_train_pairs: checkpoint 40, this run 41"):
        check_resume(cfg, step_4, 41)
    with pytest.raises(ConfigError, match=r"(?s)config_sha1: .*use resume=none"):
        check_resume(SFTConfig(max_steps=5, train_batch_size=8, lr=5e-4), step_4, 40)
    with pytest.raises(ConfigError, match=r"world_size: checkpoint 1, this run 2"):
        check_resume(SFTConfig(max_steps=5, train_batch_size=8, devices_per_node=2), step_4, 40)
    # an older checkpoint is accepted: the newer ones are moved aside by CheckpointManager.start_from
    assert check_resume(cfg, step_2, 40) == 2
    # cosmetic fields do not block a resume
    assert check_resume(SFTConfig(max_steps=5, train_batch_size=8, save_interval=1, log_dir="x"), step_4, 40)


def test_resume_names_each_differing_field_of_the_saved_sft_config(tmp_path):
    """With the checkpoint's sft_config.json (what every SFT save writes), the refusal names the fields that differ
    (the comparison RL resumes use), not just a hash; cosmetic fields and fields the old file lacks (at their
    default) still pass."""
    from reasonrl.config import ConfigError
    from reasonrl.sft.trainer import SFT_CONFIG_FILE, check_resume, run_state
    from reasonrl.utils.checkpoint import CheckpointManager, save_trainer_state

    cfg = SFTConfig(max_steps=5, train_batch_size=8, lr=1e-3)
    manager = CheckpointManager(tmp_path / "ckpt", keep_last=5)
    saved = cfg.to_dict()
    saved.pop("packing")  # a checkpoint written before the field existed
    with manager.staging(4) as tmp:
        save_trainer_state(tmp, run_state(cfg, 40, 4))
        (tmp / SFT_CONFIG_FILE).write_text(json.dumps(saved, default=str))
    step_4 = manager.path_for(4)
    assert check_resume(SFTConfig(max_steps=5, train_batch_size=8, lr=1e-3, log_dir="x"), step_4, 40) == 4
    with pytest.raises(ConfigError) as err:
        check_resume(SFTConfig(max_steps=5, train_batch_size=8, lr=5e-4, packing=True), step_4, 40)
    text = str(err.value)
    assert "lr: checkpoint 0.001, this run 0.0005" in text
    assert "packing: checkpoint not recorded (default False), this run True" in text
    assert "config_sha1" not in text and "use resume=none" in text

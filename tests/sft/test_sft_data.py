"""SFT data: encoding (EOS appended, long targets dropped, bad rows named), held-out split, seeded batch order,
and the response-only loss of the worker against transformers' masked cross-entropy."""

from __future__ import annotations

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
    assert len(evals) == 60 and train + evals == rows
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


def test_resume_refuses_a_checkpoint_of_another_schedule(tmp_path):
    """The trainer state must match this run's data size and step count; checked before any worker is called."""
    from reasonrl.sft.trainer import SFTTrainer
    from reasonrl.utils.checkpoint import save_trainer_state

    samples = [([1, 2], [3, 0])] * 40
    trainer = SFTTrainer(SFTConfig(max_steps=5, train_batch_size=8), None, None, samples, [], None, None)
    save_trainer_state(tmp_path, {"global_step": 3, "total_steps": 10, "num_train_pairs": 40})
    with pytest.raises(ValueError, match=r"written for 40 training pairs and 10 steps, this run has 40 and 5"):
        trainer.load_checkpoint(tmp_path)
    assert trainer.state(3) == {"global_step": 3, "total_steps": 5, "num_train_pairs": 40}

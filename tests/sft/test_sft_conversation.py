"""SFT on conversations (``response_field="messages"``): the loss mask covers exactly the assistant turns (content
and EOS), the masked text between them is what a multi-turn rollout appends, and the worker's loss counts only the
masked-in tokens."""

from __future__ import annotations

import json

import pytest
import torch

from reasonrl.data import DataFormatError, get_template, load_rows
from reasonrl.data.tool_tasks import direct_trace, tool_trace
from reasonrl.sft import SFTConfig, encode_pairs, split_rows
from reasonrl.sft.data import trained_tokens

CALL = tool_trace(4821, 937)[1]["content"]


def _row(messages, **extra) -> dict:
    return {"id": "r0", "messages": messages, "answer": "4517277", **extra}


def _encode(rows, tokenizer, **kw):
    return encode_pairs(rows, tokenizer, get_template("chat", tokenizer=tokenizer), response_field="messages", **kw)


def test_the_mask_covers_exactly_the_assistant_turns(tiny_tokenizer):
    from reasonrl.agents.chat_tokens import ToolMessageTokens

    tok = tiny_tokenizer
    [(prompt, response, mask)], dropped = _encode([_row(tool_trace(4821, 937))], tok)
    assert dropped == 0 and len(mask) == len(response)
    user = [{"role": "user", "content": "4821*937=?"}]
    assert tok.decode(prompt) == tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    ids = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    call, final = ids(CALL + "<|im_end|>"), ids("The answer is \\boxed{4517277}.<|im_end|>")
    observation = ToolMessageTokens.from_tokenizer(tok).observation_ids(tok, "4517277", turn_ended_with_eos=True)
    assert observation == ids("\n<|im_start|>tool\n4517277<|im_end|>\n<|im_start|>assistant\n")
    assert response == call + observation + final, "token for token what the rollout builds"
    assert mask == [True] * len(call) + [False] * len(observation) + [True] * len(final)
    assert [t for t, m in zip(response, mask, strict=True) if m].count(tok.eos_token_id) == 2, "each turn's EOS"
    full = tok.apply_chat_template(tool_trace(4821, 937), tokenize=False)
    assert tok.decode(prompt + response) + "\n" == full, "the whole conversation, as the chat template renders it"
    assert trained_tokens((prompt, response, mask)) == len(call) + len(final)


def test_loaded_and_in_memory_conversations_encode_alike(tmp_path, tiny_tokenizer):
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(_row(t(12, 34))) + "\n" for t in (tool_trace, direct_trace)))
    cfg = SFTConfig(train_data=[str(path)], prompt_field="messages", response_field="messages", eval_frac=0.0)
    loaded, _ = split_rows(cfg)
    assert loaded[0]["messages"] == tool_trace(12, 34)[:1] and len(loaded[0]["reply_messages"]) == 3
    in_memory = [_row(tool_trace(12, 34)), _row(direct_trace(12, 34))]
    assert _encode(loaded, tiny_tokenizer) == _encode(in_memory, tiny_tokenizer)
    [_, (prompt, response, mask)], _ = _encode(loaded, tiny_tokenizer)
    assert all(mask) and response == tiny_tokenizer("The answer is \\boxed{408}.<|im_end|>").input_ids


def test_rows_that_cannot_be_trained_as_conversations_are_named(tiny_tokenizer):
    trailing_tool = tool_trace(12, 34)[:3]
    with pytest.raises(DataFormatError, match=r"data: row 0 \(id 'r0'\): has no assistant turn after its prompt"):
        _encode([_row(trailing_tool)], tiny_tokenizer, where="data")
    openai = [
        trailing_tool[0],
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "calculator"}}]},
    ]
    with pytest.raises(DataFormatError, match="tool_calls that the chat template does not render"):
        _encode([_row(openai)], tiny_tokenizer)
    with pytest.raises(DataFormatError, match="needs prompt_template=chat"):
        encode_pairs([_row(tool_trace(1, 2))], tiny_tokenizer, get_template("plain"), response_field="messages")
    with pytest.raises(DataFormatError, match="has no messages"):
        _encode([{"id": "t", "question": "q", "answer": "1"}], tiny_tokenizer)
    samples, dropped = _encode(
        [_row(tool_trace(12, 34)), _row(direct_trace(1, 2))], tiny_tokenizer, max_response_len=20
    )
    assert dropped == 1 and len(samples) == 1
    from reasonrl.config import ConfigError

    with pytest.raises(ConfigError, match="response_field='messages'.*needs prompt_template=chat"):
        SFTConfig(rows=[_row(tool_trace(1, 2))], response_field="messages", prompt_template="plain").validate()


def test_tool_traces_of_the_builtin_set_load_for_sft():
    rows = load_rows("tool_mul_sft_heldout", fields={"question": "messages"}, answer_from="none", keep_reply=True)
    assert [t["role"] for t in rows[0]["reply_messages"]] == ["assistant", "tool", "assistant"]


def test_the_worker_loss_counts_the_masked_in_tokens_only(tiny_model_dir, tiny_tokenizer):
    """The worker's NLL equals cross-entropy with every position outside the assistant turns masked (-100)."""
    from transformers import AutoModelForCausalLM

    from reasonrl.distributed.ppo_workers import WorkerConfig
    from reasonrl.sft.worker import SFTWorker

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    rows = [_row(tool_trace(4821, 937)), _row(direct_trace(55, 12)), _row(tool_trace(7, 123456))]
    samples, _ = _encode(rows, tiny_tokenizer)
    samples.append((samples[1][0], samples[1][1]))  # a pair without a mask: its whole response counts
    worker = SFTWorker(0, 1)
    worker.config, worker.engine = WorkerConfig(model_path=str(tiny_model_dir)), model
    with torch.no_grad():
        nll, tokens = worker._nll(samples)
        want, count = 0.0, 0
        for prompt, response, *rest in samples:
            mask = rest[0] if rest else [True] * len(response)
            labels = [-100] * len(prompt) + [t if m else -100 for t, m in zip(response, mask, strict=True)]
            n = sum(mask)
            want += model(input_ids=torch.tensor([prompt + response]), labels=torch.tensor([labels])).loss.item() * n
            count += n
    assert tokens == count == sum(trained_tokens(s) for s in samples) < sum(len(s[1]) for s in samples)
    assert nll.item() == pytest.approx(want, rel=1e-5)
    assert [idx for idx, *_ in worker._micro_batches(samples)] == [[0, 1, 2, 3]]

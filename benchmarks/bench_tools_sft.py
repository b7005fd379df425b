"""Held-out accuracy of the ``tools-sft`` / ``tools-sft-notool`` warm starts, greedy, with plain transformers.

    python benchmarks/bench_tools_sft.py                       # both warm starts (built first if missing), 200 rows
    python benchmarks/bench_tools_sft.py --steps 40 80 --cache-dir /tmp/tools_sft   # other schedules, elsewhere

With the tool, the calculator turn is emulated as a multi-turn rollout does it: generate the first assistant turn to
``<|im_end|>``, parse its ``<tool_call>``, compute the result (:func:`reasonrl.agents.calculator.calculate`; an error
comes back as its message), append the chat template's tool message and the next generation prompt
(``\\n<|im_start|>tool\\n{result}<|im_end|>\\n<|im_start|>assistant\\n``), generate again. A row is correct when the
final turn's ``\\boxed{}`` matches the product (the default math scorer's rule, ``extract_mode=boxed``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path


def _generate(model, tok, prompts: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], bool]]:
    """Greedy continuations (ids up to and including EOS, and whether EOS came) of left-padded prompts."""
    import torch

    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    result = []
    for seq in out[:, width:].tolist():
        ended = tok.eos_token_id in seq
        result.append((seq[: seq.index(tok.eos_token_id) + 1] if ended else seq, ended))
    return result


def _correct(text: str, gold: str) -> bool:
    from reasonrl.rewards.extract import extract_answer
    from reasonrl.rewards.verify import answers_match

    answer = extract_answer(text, "boxed").answer
    return answer is not None and answers_match(answer, gold)[0]


def accuracy(model_path: str | Path, rows: list[dict], use_tool: bool, batch_size: int = 100) -> dict[str, float]:
    """``accuracy`` (final boxed answer right), and with the tool ``called`` (the first turn is one calculator call
    with the question's expression) of greedy decoding on ``rows`` (``tool_mul_heldout`` rows)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasonrl.agents.calculator import calculate
    from reasonrl.agents.chat_tokens import ToolMessageTokens
    from reasonrl.agents.tool_calls import parse_tool_calls

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    frame = ToolMessageTokens.from_tokenizer(tok)
    correct = called = 0
    for lo in range(0, len(rows), batch_size):
        chunk = rows[lo : lo + batch_size]
        prompts = [
            tok(tok.apply_chat_template(r["messages"], tokenize=False, add_generation_prompt=True)).input_ids
            for r in chunk
        ]
        first = _generate(model, tok, prompts, 80)
        if not use_tool:
            correct += sum(_correct(tok.decode(ids), r["answer"]) for r, (ids, _) in zip(chunk, first, strict=True))
            continue
        seconds = []
        for row, prompt, (ids, ended) in zip(chunk, prompts, first, strict=True):
            text = tok.decode(ids, skip_special_tokens=True)
            calls, _ = parse_tool_calls(text)
            want = row["question"].removesuffix("=?")
            if len(calls) == 1 and calls[0].name == "calculator":
                called += calls[0].arguments.get("expression") == want
                try:
                    result = calculate(**calls[0].arguments)
                except Exception as exc:  # the tool's error comes back to the model as its message
                    result = f"error: {exc}"
            else:
                result = "error: no calculator call"
            obs = frame.observation_ids(tok, result, turn_ended_with_eos=ended)
            seconds.append(prompt + ids + obs)
        final = _generate(model, tok, seconds, 40)
        correct += sum(_correct(tok.decode(ids), r["answer"]) for r, (ids, _) in zip(chunk, final, strict=True))
    out = {"accuracy": correct / len(rows)}
    if use_tool:
        out["called"] = called / len(rows)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="*", default=None, help="SFT steps (default: the warm starts')")
    parser.add_argument("--cache-dir", default=None, help="build the warm starts here (default: the cache)")
    parser.add_argument("--rows", type=int, default=200)
    args = parser.parse_args(argv)
    from reasonrl.data import load_rows
    from reasonrl.sft.warm_start import ToolsNoToolWarmStartConfig, ToolsWarmStartConfig, warm_start_path

    rows = load_rows("tool_mul_heldout").rows[: args.rows]
    for steps in args.steps or [None]:
        for cls, use_tool in ((ToolsWarmStartConfig, True), (ToolsNoToolWarmStartConfig, False)):
            cfg = cls() if steps is None else dataclasses.replace(cls(), max_steps=steps)
            start = time.perf_counter()
            path = warm_start_path(cfg, cache_dir=Path(args.cache_dir) if args.cache_dir else None, log_dir="logs")
            built = time.perf_counter() - start
            start = time.perf_counter()
            result = accuracy(path, rows, use_tool)
            print(
                f"{cfg.exp_name:18s} steps={cfg.max_steps:4d} build/lookup {built:5.0f} s | held-out ({len(rows)}) "
                + " ".join(f"{k} {v:.1%}" for k, v in result.items())
                + f" | eval {time.perf_counter() - start:.0f} s | {path.name}",
                flush=True,
            )


if __name__ == "__main__":
    main()

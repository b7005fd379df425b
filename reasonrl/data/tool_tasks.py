"""Multi-digit multiplication with a calculator tool: the task of the tool-use demo, and its SFT traces.

    task = ToolMulTask()
    task.rows("train")[0]
    # {"id": ..., "messages": [{"role": "user", "content": "48*93=?"}], "answer": "4464",
    #  "tools": ["calculator"]}
    tool_trace(48, 93)      # the conversation a warm start learns: call the calculator, then answer
    # [user: "48*93=?",
    #  assistant: '<tool_call>\\n{"name": "calculator", "arguments": {"expression": "48*93"}}\\n</tool_call>',
    #  tool: "4464",
    #  assistant: "The answer is \\boxed{4464}."]
    direct_trace(48, 93)    # the no-tool baseline's: [user, assistant: "The answer is \\boxed{4464}."]

Built-in data sources (registered in :data:`reasonrl.data.arithmetic.GENERATED_DATASETS`, written on first use):

| name                          | rows                                                                           |
|-------------------------------|--------------------------------------------------------------------------------|
| `tool_mul_train` / `_heldout` | the problems (20,000 sampled / 200 distinct), for RL and evaluation           |
| `tool_mul_sft_train` / `_heldout` | the same problems as :func:`tool_trace` conversations (SFT ``tools-sft``)  |
| `tool_mul_notool_sft_train` / `_heldout` | as :func:`direct_trace` (SFT ``tools-sft-notool``, the baseline)  |

Problems are ``a * b`` with two 2-digit operands by default (digit counts drawn uniformly from ``a_digits`` /
``b_digits``, then the operands), products of 3 to 4 digits: past what the tiny models compute unaided in a short
SFT, one call for the calculator (:mod:`reasonrl.agents.calculator`). Small operands and the compact question
``"48*93=?"`` keep the copy short and verbatim: with ``"What is 4821 * 937?"`` (3-4 x 2-4 digits) ``tiny-demo``
copied no expression in 60-120 SFT steps; with ``"48*93=?"`` a plain-torch probe (batch 32, lr 1e-3) went from 0%
copied at step 60 to 98% copied / 85% correct at step 120. The held-out split is disjoint from training by
construction: an ordered pair ``(a, b)`` whose hash falls in the held-out bucket (``heldout_frac``) never occurs in
training. Every row is a pure function of ``(seed, split, index)``.

The rows are chat rows (a single user turn): with ``prompt_template=chat`` the prompt is exactly
``apply_chat_template([user], add_generation_prompt=True)``, the prompt the SFT traces were trained after, with no
instruction added. The gold answer is the product; the final turn writes it as ``\\boxed{N}``, which the default
math scorer extracts (``extract_mode=auto`` or ``boxed``; not ``reasonrl.data.arithmetic:reward``, the arithmetic
demo's exact match of the whole response).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random

from reasonrl.agents.tool_calls import format_tool_call

TOOL = "calculator"


def question(a: int, b: int) -> str:
    """``"48*93=?"``: the call's expression is a verbatim substring, which the tiny model learns to copy."""
    return f"{a}*{b}=?"


def final_turn(product: int) -> str:
    return f"The answer is \\boxed{{{product}}}."


def tool_trace(a: int, b: int) -> list[dict]:
    """The with-tool SFT conversation of ``a * b``: a calculator call, its result, the boxed answer."""
    return [
        {"role": "user", "content": question(a, b)},
        {"role": "assistant", "content": format_tool_call(TOOL, {"expression": f"{a}*{b}"})},
        {"role": "tool", "content": str(a * b)},
        {"role": "assistant", "content": final_turn(a * b)},
    ]


def direct_trace(a: int, b: int) -> list[dict]:
    """The no-tool SFT conversation of ``a * b``: the boxed answer straight away."""
    return [{"role": "user", "content": question(a, b)}, {"role": "assistant", "content": final_turn(a * b)}]


@dataclasses.dataclass(frozen=True)
class ToolMulTask:
    """``a * b`` with ``a`` of ``a_digits`` and ``b`` of ``b_digits`` digits (inclusive ranges of digit counts)."""

    a_digits: tuple[int, int] = (2, 2)
    b_digits: tuple[int, int] = (2, 2)
    train_size: int = 20000
    heldout_size: int = 200
    heldout_frac: float = 0.1
    seed: int = 0

    def __post_init__(self):
        for name in ("a_digits", "b_digits"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi <= 9:
                raise ValueError(f"{name} must be (lo, hi) with 1 <= lo <= hi <= 9, got {(lo, hi)}")

    @property
    def key(self) -> str:
        """A short stable name of this task (cache folders, warm-start keys)."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return f"toolmul-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"

    def is_heldout(self, a: int, b: int) -> bool:
        digest = hashlib.sha1(f"{self.seed}:{a}:{b}".encode()).digest()
        return int.from_bytes(digest[:4], "big") < self.heldout_frac * 2**32

    def repeat_reason(self, split: str) -> str | None:
        """Why ``split`` repeats problems (see :func:`reasonrl.data.sources.repeats_by_design`)."""
        if split != "train":
            return None
        count = lambda lo, hi: 10**hi - 10 ** (lo - 1)  # noqa: E731 - numbers with lo..hi digits
        pairs = count(*self.a_digits) * count(*self.b_digits)
        return (
            f"{self.train_size} problems drawn with replacement from ~{round(pairs * (1 - self.heldout_frac))} "
            "training pairs (the held-out pairs never occur): a problem recurs by design"
        )

    def pairs(self, split: str) -> list[tuple[int, int]]:
        """``train_size`` training pairs (drawn with replacement) or ``heldout_size`` distinct held-out pairs."""
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        want = split == "heldout"
        size = self.heldout_size if want else self.train_size
        rng = random.Random(f"{self.seed}:{split}")
        out, seen = [], set()
        while len(out) < size:
            a, b = _operand(rng, self.a_digits), _operand(rng, self.b_digits)
            if self.is_heldout(a, b) != want or (want and (a, b) in seen):
                continue
            seen.add((a, b))
            out.append((a, b))
        return out

    def rows(self, split: str) -> list[dict]:
        return [
            {
                "id": f"{self.key}-{split}-{i}",
                "messages": [{"role": "user", "content": question(a, b)}],
                "answer": str(a * b),
                "tools": [TOOL],
            }
            for i, (a, b) in enumerate(self.pairs(split))
        ]


def _operand(rng: random.Random, digits: tuple[int, int]) -> int:
    n = rng.randint(*digits)
    return rng.randint(10 ** (n - 1), 10**n - 1)


@dataclasses.dataclass(frozen=True)
class ToolTraceSet:
    """The SFT conversations of ``task``'s problems: :func:`tool_trace` (``use_tool``) or :func:`direct_trace`."""

    task: ToolMulTask = ToolMulTask()
    use_tool: bool = True

    @property
    def key(self) -> str:
        return f"{self.task.key}-sft-{'tool' if self.use_tool else 'notool'}"

    def repeat_reason(self, split: str) -> str | None:
        return self.task.repeat_reason(split)

    def rows(self, split: str) -> list[dict]:
        trace = tool_trace if self.use_tool else direct_trace
        return [
            {"id": f"{self.key}-{split}-{i}", "messages": trace(a, b), "answer": str(a * b), "tools": [TOOL]}
            for i, (a, b) in enumerate(self.task.pairs(split))
        ]

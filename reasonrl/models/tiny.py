"""A tiny random-init Qwen2 causal LM with a locally trained byte-level BPE tokenizer, for fast tests.

Everything is built offline and deterministically from a seed:

* the tokenizer is a byte-level BPE trained on a corpus generated here (math word problems, arithmetic, the
  R1-Zero style ``<think>``/``<answer>``/``\\boxed{}`` markup, ChatML markers). It uses exactly Qwen2's
  normalizer and pre-tokenizer, because transformers loads any ``model_type: qwen2`` folder with
  ``Qwen2Tokenizer``, which replaces the pre-tokenizer: training with the same one makes the raw
  ``tokenizer.json``, ``AutoTokenizer`` and vLLM produce identical ids.
* the model is ``Qwen2ForCausalLM`` initialised under ``torch.manual_seed(seed)``.

The folder (config, safetensors, tokenizer, chat template, generation config) is cached under
``<cache>/models/<name>`` and reused; it loads with ``AutoModelForCausalLM.from_pretrained`` and ``vllm.LLM``.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

from reasonrl.models.chat_template import CHATML_TEMPLATE
from reasonrl.utils.paths import atomic_directory, cache_root

# Bump when the build recipe changes so stale caches are not reused.
BUILD_VERSION = 1
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
CORPORA = ("math", "code")
QWEN2_PRETOKENIZE_REGEX = (  # transformers' Qwen2Tokenizer pre-tokenizer regex
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


@dataclasses.dataclass(frozen=True)
class TinyModelSpec:
    """Shape of a tiny Qwen2 model. The defaults give ~2.2M parameters (fast enough for every test)."""

    vocab_size: int = 2048
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    seed: int = 0
    corpus: str = "math"  # the tokenizer's training text: "math", or "code" (math + the programming tasks)

    def __post_init__(self):
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {CORPORA}, got {self.corpus!r}")

    @property
    def name(self) -> str:
        shape = f"v{self.vocab_size}-h{self.hidden_size}-i{self.intermediate_size}-l{self.num_hidden_layers}"
        shape += f"-a{self.num_attention_heads}-kv{self.num_key_value_heads}-p{self.max_position_embeddings}"
        corpus = "" if self.corpus == "math" else f"-{self.corpus}"  # math: the names of the first builds
        return f"tiny-qwen2-{shape}{'-tied' if self.tie_word_embeddings else ''}{corpus}-s{self.seed}-b{BUILD_VERSION}"


# ``pretrain=tiny-demo``: 4 layers, ~5M parameters; the base model of the CPU learning demo's SFT warm start.
DEMO_SPEC = TinyModelSpec(intermediate_size=1024, num_hidden_layers=4, max_position_embeddings=256)
# ``pretrain=tiny-code``: the same shape, its tokenizer trained on the math corpus plus programming tasks (``def``,
# `` return``, ``):\n`` are single tokens): the code demo's prompts and programs take ~40% fewer tokens.
CODE_SPEC = dataclasses.replace(DEMO_SPEC, corpus="code")


def tiny_model_path(spec: TinyModelSpec | None = None, cache_dir: Path | None = None) -> Path:
    """Path of the cached tiny model folder for ``spec``, building it first if it is missing."""
    spec = spec or TinyModelSpec()
    path = Path(cache_dir or cache_root() / "models") / spec.name
    if not (path / "model.safetensors").exists():
        build_tiny_model(path, spec)
    return path


def code_corpus(num_lines: int = 3000) -> list[str]:
    """Question and program of the first ``num_lines`` training rows of the default programming task set
    (``reasonrl.data.code_tasks``; held-out tasks never enter it)."""
    from reasonrl.data.code_tasks import CodeTaskSet

    return [f"{r['question']}\n{r['answer']}" for r in CodeTaskSet(train_size=num_lines).rows("train")]


def tokenizer_corpus(seed: int = 0, num_lines: int = 6000) -> list[str]:
    """A deterministic training corpus for the tiny tokenizer: math word problems, equations, markup."""
    rng = random.Random(seed)
    names = ["Ann", "Bob", "Carla", "Dev", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jon", "Kira", "Liam"]
    items = ["apples", "books", "coins", "pencils", "marbles", "cookies", "stickers", "cards", "eggs", "shells"]
    verbs = ["buys", "finds", "gives away", "sells", "eats", "loses", "collects", "receives"]
    words = (
        "the a an of and to in is are was were has have had how many much more less than each every total "
        "left after before then what find compute solve answer question step first second next finally so "
        "therefore because if we let sum difference product quotient number numbers result value equal equals "
        "times plus minus divided by multiplied twice half double triple remainder calculate using all these "
        "think reasoning user assistant system final correct wrong check verify problem solution expression"
    ).split()
    lines = []
    for _ in range(num_lines):
        a, b, c = rng.randint(0, 999), rng.randint(1, 99), rng.randint(1, 9)
        op = rng.choice(["+", "-", "*", "/"])
        kind = rng.randrange(6)
        if kind == 0:
            n, m = rng.choice(names), rng.choice(items)
            lines.append(f"{n} has {a} {m}. {n} {rng.choice(verbs)} {b} {m}. How many {m} does {n} have now?")
        elif kind == 1:
            lines.append(f"What is {a} {op} {b}? The answer is \\boxed{{{a + b}}}.")
        elif kind == 2:
            lines.append(f"<think> {a} {op} {b} {op} {c} , step by step </think> <answer> {a * c - b} </answer>")
        elif kind == 3:
            lines.append(f"<|im_start|>user\nCalculate {a} {op} {b}.<|im_end|>\n<|im_start|>assistant\n{a}{op}{b}")
        elif kind == 4:
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(5, 20))) + ".")
        else:
            lines.append(f"#### {a * b} \\frac{{{a}}}{{{b}}} = {a / b:.3f}, x = {c}, (x + {b})^2 \\sqrt{{{a}}}")
    return lines


def train_tokenizer(vocab_size: int, seed: int = 0, corpus: str = "math"):
    """Train the byte-level BPE with Qwen2's normalizer/pre-tokenizer on ``corpus`` and wrap it for transformers."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = tokenizer_corpus(seed) + (code_corpus() if corpus == "code" else [])
    tok.train_from_iterator(lines, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    wrapped.chat_template = CHATML_TEMPLATE
    return wrapped


def text_shape(spec, eos_id: int, pad_id: int) -> dict:
    """The decoder's config fields of a tiny spec (widths, layers, heads, context) and its special ids, no BOS."""
    fields = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    shape = {name: getattr(spec, name) for name in (*fields, "max_position_embeddings")}
    return shape | {"bos_token_id": None, "eos_token_id": eos_id, "pad_token_id": pad_id}


def build_tiny_model(path: Path, spec: TinyModelSpec | None = None) -> Path:
    """Build the tokenizer and random-init model for ``spec`` into ``path`` (atomically). Returns ``path``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinyModelSpec()
    tokenizer = train_tokenizer(spec.vocab_size, spec.seed, spec.corpus)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = Qwen2Config(
        vocab_size=spec.vocab_size,
        **text_shape(spec, eos_id, pad_id),
        tie_word_embeddings=spec.tie_word_embeddings,
        dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    with atomic_directory(Path(path)) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "reasonrl_build.json").write_text(json.dumps(dataclasses.asdict(spec) | {"build": BUILD_VERSION}))
    return Path(path)


if __name__ == "__main__":
    print(tiny_model_path())

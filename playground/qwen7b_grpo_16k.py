"""Open-Reasoner-Zero's 7B GRPO (``playground.qwen7b_grpo``) with 16k-token responses, the sequence split over 4
GPUs by Ulysses sequence parallelism.

    python -m playground.qwen7b_grpo_16k
    python -m playground memory --recipe qwen7b_grpo_16k            # the memory model's figures (docs/memory.md)

``generate_max_len=16384`` (ORZ's 7B runs cap responses at 8000 tokens; long-reasoning recipes raise it), a
micro-batch of one whole sequence (prompt 2048 + response 16384), ``sequence_parallel_size=4`` (Qwen2.5-7B: 28
query and 4 key-value heads): each of a group's 4 ranks holds 4608 positions of it, and the LM head runs in chunks
of 1024 positions. The memory model's training phase per GPU: 11.3 GB (activations 5.5 GB); without SP 43.4 GB
(activations and logits 37.6 GB): at 16k SP is not what makes it fit 80 GB, it frees ~32 GB per GPU (for larger
micro-batches, or smaller devices). Not run on GPUs yet (issue 44): the figures are the memory model's.
"""

from dataclasses import dataclass

from playground.qwen7b_grpo import Qwen7BGRPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen7BGRPO16kConfig(Qwen7BGRPOConfig):
    exp_name: str = "qwen7b_grpo_16k"
    generate_max_len: int = 16384
    vllm_max_model_len: int | None = 18432
    max_tokens_per_micro_batch: int = 18432
    sequence_parallel_size: int = 4


if __name__ == "__main__":
    run_recipe(Qwen7BGRPO16kConfig)

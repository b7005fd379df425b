"""Skywork-OR1's code recipe at the length Skywork ran its last stage: 32k-token responses, with Ulysses sequence
parallelism so one response's activations are split over 4 GPUs.

    python -m playground.skywork_code_grpo_32k
    python -m playground memory --recipe skywork_code_grpo_32k      # the memory model's figures (docs/memory.md)

``playground.skywork_code_grpo`` (read its docstring: data, reward, algorithm) with ``generate_max_len=32768``
(Skywork-OR1's third stage; the earlier stages are the base recipe and 16k) and a micro-batch of one whole
sequence (prompt 2048 + response 32768 tokens). ``sequence_parallel_size=4``: the 8 policy ranks form two groups
of 4, each rank holding 8704 of a sequence's 34816 positions (DeepSeek-R1-Distill-Qwen-7B has 28 query and 4
key-value heads, so N divides 4 at most); a lone unpadded sequence per micro-batch runs the attention core causal
without a mask (docs/distributed.md, "Sequence parallelism"), and the LM head runs in chunks of 1024 positions
instead of materialising [34816, 152064] logits. The memory model's training phase per GPU: 25.8 GB (activations
7.1 GB); without SP 87.9 GB (activations and logits of 34816 positions: 69.2 GB), which does not fit 80 GB.

Not run on GPUs yet (issue 44): the figures are the memory model's, checked against nothing measured.
"""

from dataclasses import dataclass

from playground.skywork_code_grpo import SkyworkCodeGRPOConfig
from reasonrl.exp import run_recipe


@dataclass
class SkyworkCode32kGRPOConfig(SkyworkCodeGRPOConfig):
    exp_name: str = "skywork_code_grpo_32k"
    generate_max_len: int = 32768
    vllm_max_model_len: int | None = 34816
    max_tokens_per_micro_batch: int = 34816
    sequence_parallel_size: int = 4


if __name__ == "__main__":
    run_recipe(SkyworkCode32kGRPOConfig)

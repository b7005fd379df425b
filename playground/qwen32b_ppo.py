"""Open-Reasoner-Zero's 32B PPO run with split placement (the only ORZ recipe without colocate-all): policy (+ the
reference slot) on 32 GPUs, critic (+ the reward slot) on 32 GPUs, 16 vLLM engines x tensor-parallel 4 on 64 GPUs
(128 GPUs = 16 nodes); critic and policy update concurrently, vLLM at 95% of its devices and never put to sleep.
Every other training field is the 7B recipe's (playground/qwen7b_ppo.py), with 10048-token packed micro-batches.

Source: Open-Reasoner-Zero/Open-Reasoner-Zero, ``playground/orz_32b_ppo.py``, commit 3fdd9a0; paper: Hu et al. 2025
(arXiv:2503.24290), section 3.1.

Differs from ORZ: as qwen7b_ppo (see its docstring), and:
- the paper's second stage (100 "annealing" steps on 13k hard prompts, LR decayed linearly to 3e-7) is not in ORZ's
  script and not reproduced here (lr_schedule=linear decays to 0).
- ORZ's DEBUG_MODE keeps 12 GPUs per group and 2 engines; here one device.
"""

from dataclasses import dataclass

from playground.qwen7b_ppo import Qwen7BPPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen32BPPOConfig(Qwen7BPPOConfig):
    exp_name: str = "qwen32b_ppo"
    pretrain: str | None = "Qwen/Qwen2.5-32B"
    colocate_all: bool = False
    vllm_num_engines: int = 16
    vllm_tensor_parallel_size: int = 4
    vllm_gpu_memory_utilization: float = 0.95
    vllm_enable_sleep: bool = False
    max_tokens_per_micro_batch: int = 10048


if __name__ == "__main__":
    run_recipe(Qwen32BPPOConfig)

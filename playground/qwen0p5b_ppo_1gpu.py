"""Open-Reasoner-Zero's single-GPU 0.5B PPO run: the 7B recipe (playground/qwen7b_ppo.py) on Qwen2.5-0.5B with
every role and the one vLLM engine colocated on one GPU (ORZ ran it on one 80 GB A800/H800), the same 128 prompts
x 64 samples and 8000-token responses, 10048-token packed micro-batches, vLLM at 75% of the device memory.

Source: Open-Reasoner-Zero/Open-Reasoner-Zero, ``playground/orz_0p5b_ppo_1gpu.py``, commit 3fdd9a0 (every other
training field equals ``orz_7b_ppo.py``); paper: Hu et al. 2025 (arXiv:2503.24290), Figure 10.

Differs from ORZ: as qwen7b_ppo (see its docstring). For a smaller GPU lower rollout_batch_size,
n_samples_per_prompt or generate_max_len on the command line: the run is then no longer ORZ's.
"""

from dataclasses import dataclass

from playground.qwen7b_ppo import Qwen7BPPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen0p5BPPO1GPUConfig(Qwen7BPPOConfig):
    exp_name: str = "qwen0p5b_ppo_1gpu"
    pretrain: str | None = "Qwen/Qwen2.5-0.5B"
    policy_num_nodes: int = 1
    policy_devices_per_node: int = 1
    ref_num_nodes: int = 1
    ref_devices_per_node: int = 1
    critic_num_nodes: int = 1
    critic_devices_per_node: int = 1
    vllm_num_engines: int = 1
    vllm_gpu_memory_utilization: float = 0.75
    max_tokens_per_micro_batch: int = 10048


if __name__ == "__main__":
    run_recipe(Qwen0p5BPPO1GPUConfig)

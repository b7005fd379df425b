"""GRPO on Qwen2.5-32B training LoRA adapters (rank 128, as verl reports for 32B) on ONE node of 8 GPUs, colocated,
instead of the 128 GPUs of the full-weight 32B PPO recipe (documented as not run: this project has no GPU).

Every training field is the 7B GRPO recipe's (ORZ's GRPO: group-centred rewards, batch whitening, no KL, no critic)
with the 32B recipe's engines (tensor-parallel 4) and micro-batches; the policy keeps gradients and Adam states for
the adapters only (~1.1 B parameters, 3.4% of the model): the memory model puts the training phase at 38.8 GB per
device on 8 GPUs, where full-weight GRPO of 32B would need 102 GB (it fits from 16 GPUs: 65.3 GB)
(``python -m playground memory --recipe qwen32b_grpo_lora``). The learning rate is 10x the full recipes' 1e-6.

Differs from qwen32b_ppo: GRPO without a critic (a 32B critic would need its own full-weight devices), colocated on 8
GPUs (2 engines x TP 4) instead of split placement on 128, LoRA rank 128 / alpha 256 on every linear layer,
actor_lr 1e-5.
"""

from dataclasses import dataclass

from playground.qwen7b_grpo import Qwen7BGRPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen32BGRPOLoRAConfig(Qwen7BGRPOConfig):
    exp_name: str = "qwen32b_grpo_lora"
    pretrain: str | None = "Qwen/Qwen2.5-32B"
    policy_num_nodes: int = 1
    ref_num_nodes: int = 1
    critic_num_nodes: int = 0
    vllm_num_engines: int = 2
    vllm_tensor_parallel_size: int = 4
    max_tokens_per_micro_batch: int = 10048
    lora_rank: int = 128
    lora_alpha: float = 256.0
    lora_target_modules: list[str] = ("all-linear",)
    actor_lr: float = 1e-5  # 10x the full recipes' 1e-6


if __name__ == "__main__":
    run_recipe(Qwen32BGRPOLoRAConfig)

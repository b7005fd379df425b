"""GRPO on images that measurably learns on CPU: counting dots with a tiny vision-language model (``make demo``'s
``--task vision``).

    python -m playground.vision_grpo_cpu                      # 20 steps from the warm start
    python -m playground.vision_grpo_cpu max_steps=5 pretrain=tiny-vlm

The policy is a 4.6M-parameter Idefics3 (SmolVLM's architecture, ``reasonrl.models.tiny_vlm``) warm-started by a
short SFT on the task (``pretrain=vision-sft``). Each prompt is a 56 x 56 picture of 1 to 9 dots and "How many
dots?" (``reasonrl.data.vision_tasks``); the reward is exact match of the response with the count. Evaluation is
greedy accuracy on 200 held-out pictures whose boards (which cells hold a dot) never occur in training. Everything
else is the arithmetic recipe's (one colocated CPU bundle, GRPO, a small k3 KL loss): see ``docs/vision.md``.
"""

from dataclasses import dataclass

from playground.arith_grpo_cpu import ArithGRPOCPUConfig
from reasonrl.exp import run_recipe


@dataclass
class VisionGRPOCPUConfig(ArithGRPOCPUConfig):
    exp_name: str = "vision_grpo_cpu"
    pretrain: str | None = "vision-sft"
    train_data: list[str] = ("dots_train",)
    eval_data: list[str] = ("dots_heldout",)
    max_prompt_len: int = 48  # the prompt with its 16 image tokens and their 3 markers: 27 tokens
    generate_max_len: int = 4
    rollout_batch_size: int = 32
    max_steps: int = 20


if __name__ == "__main__":
    run_recipe(VisionGRPOCPUConfig)

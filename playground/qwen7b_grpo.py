"""Open-Reasoner-Zero's 7B GRPO script: the 7B PPO recipe (playground/qwen7b_ppo.py) without a critic; the rule reward
minus the mean of its prompt's 64 samples is every token's advantage, then whitened over the batch; no KL.

ORZ's group step reads ``if std := np.std(scores) > 0: score /= std``: by operator precedence ``std`` is the boolean
True, so scores are divided by 1 and never by the group std. ``grpo_norm_by_std=False`` reproduces that; set
``grpo_norm_by_std=true`` for the GRPO of the DeepSeekMath paper.

Source: Open-Reasoner-Zero/Open-Reasoner-Zero, ``playground/orz_7b_grpo.py`` (``use_grpo=True``), commit 3fdd9a0.
No ORZ paper result uses it.

Differs from ORZ: as qwen7b_ppo (see its docstring), and:
- whitening: ORZ subtracts the batch's token mean again after centring by prompt group; here whitening only
  scales group-centred advantages, so an all-equal prompt group keeps advantage 0 (docs/algorithms.md).
"""

from dataclasses import dataclass

from playground.qwen7b_ppo import Qwen7BPPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen7BGRPOConfig(Qwen7BPPOConfig):
    exp_name: str = "qwen7b_grpo"
    advantage_estimator: str = "grpo"
    grpo_norm_by_std: bool = False
    whiten_advantages: bool = True
    critic_num_nodes: int = 0
    vllm_gpu_memory_utilization: float = 0.75


if __name__ == "__main__":
    run_recipe(Qwen7BGRPOConfig)

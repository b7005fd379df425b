"""PPO with GAE and a critic on the arithmetic task, from the SFT warm start (see ``playground.arith_grpo_cpu``).

    python -m playground.arith_ppo_cpu                        # 30 steps, ~3 min on 2 cores

GAE with gamma = lambda = 1 (the reward sits on the last token); the critic starts from the warm start plus a
fresh value head; advantages are whitened over the batch.
"""

from dataclasses import dataclass

from playground.arith_grpo_cpu import ArithGRPOCPUConfig
from reasonrl.exp import run_recipe


@dataclass
class ArithPPOCPUConfig(ArithGRPOCPUConfig):
    exp_name: str = "arith_ppo_cpu"
    advantage_estimator: str = "gae"
    whiten_advantages: bool = True
    critic_num_nodes: int = 1


if __name__ == "__main__":
    run_recipe(ArithPPOCPUConfig)

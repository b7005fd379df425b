"""reasonrl: reinforcement learning (PPO, GRPO and relatives) for reasoning LLMs on rule-checked rewards."""

__version__ = "0.1.0"

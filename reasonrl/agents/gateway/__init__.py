"""The agent gateway: an OpenAI-compatible endpoint per rollout sample, so an agent program written with any framework
trains unchanged (docs/agents.md). ``backend``: the contract between the gateway and the rollout owning the engines."""

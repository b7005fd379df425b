"""Multi-turn rollouts: the environment interface, the tool environment, tool-call parsing and the tools; agent
programs trained through the OpenAI-compatible gateway (``agent_fn``, docs/agents.md).

``from reasonrl.agents import AgentResult``: what an agent function returns."""

from reasonrl.agents.agent_fn import AgentResult

__all__ = ["AgentResult"]

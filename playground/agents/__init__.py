"""Agent programs trained with ``agent_fn`` (docs/agents.md): plain files that talk to their endpoint with the
``openai`` client and know nothing of reasonrl beyond :class:`reasonrl.agents.AgentResult`."""

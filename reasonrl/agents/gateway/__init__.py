"""The agent gateway: an OpenAI-compatible endpoint per rollout sample, so an agent program written with any framework
trains unchanged (docs/agents.md).

``backend``: the contract between the gateway and the rollout owning the engines; ``sessions``: token-faithful
trajectories (extends or forks, the budget; pure logic); ``framing``: the chat template's tokens; ``messages``: OpenAI
messages and model replies; ``openai_protocol``: the wire format; ``server``: ``AgentGateway``, the HTTP server.
Nothing is imported here: ``from reasonrl.agents.gateway.server import AgentGateway``."""

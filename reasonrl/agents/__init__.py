"""Multi-turn rollouts: the environment interface, the tool environment, tool-call parsing and the tools."""

"""Agent runtimes: the `AgentRuntime` port, its turn events, and the ACP adapter."""

"""The `AgentRuntime` port over the Agent Client Protocol: agent processes, sessions, turns
and the requests an agent makes of the user."""

from bridge.runtime.acp.runtime import AcpRuntime, SessionLost

__all__ = ["AcpRuntime", "SessionLost"]

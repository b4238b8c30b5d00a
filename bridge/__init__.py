"""feishu-presence-bridge: Feishu chats ↔ an ACP coding agent, with honest presence."""

__version__ = "0.1.0"

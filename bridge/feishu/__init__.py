"""Feishu adapter: inbound events (webhook, long connection), outbound API client, cards."""

"""Feishu cards as JSON: the approval and question cards (requests.py, card JSON 1.0), the
live status card (status.py, card JSON 2.0) and which call brings a status card to its
newest view (parts.py)."""

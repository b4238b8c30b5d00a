"""The agent process inherits the environment (it needs its own API keys) but never the
bridge's Feishu secrets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bridge.runtime.acp_runtime import AcpRuntime
from bridge.runtime.port import RuntimeUnavailable


async def test_agent_never_sees_feishu_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEISHU_APP_SECRET", "app-secret-value")
    monkeypatch.setenv("FEISHU_ENCRYPT_KEY", "encrypt-key-value")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "agent-own-key")
    dump = tmp_path / "env.json"
    # A stand-in "agent" that records its environment, then fails to start.
    script = f"import json, os; open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))"
    runtime = AcpRuntime([sys.executable, "-c", script], tmp_path, restart_attempts=1)
    try:
        with pytest.raises(RuntimeUnavailable):
            await runtime.open_session("chat-1")
    finally:
        await runtime.close()
    seen = json.loads(dump.read_text())
    assert seen["ANTHROPIC_API_KEY"] == "agent-own-key"
    assert not [name for name in seen if name.startswith("FEISHU_")]

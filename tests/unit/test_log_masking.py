"""The last guard in bridge/logs.py: no secret value reaches a log line, tracebacks included,
and the agents' credentials from the environment are masked as well as the bridge's own."""

from __future__ import annotations

import io
import logging

from bridge.logs import SecretMask, credentials_in

APP_SECRET = "app-secret-7f3a9c"
AGENT_KEY = "sk-ant-agent-key-5d1e"


def formatted(record_call: str) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    environ = {"ANTHROPIC_API_KEY": AGENT_KEY, "GH_TOKEN": "ghp-token-0a1b", "PATH": "/usr/bin"}
    handler.setFormatter(SecretMask([APP_SECRET, *credentials_in(environ)]))
    logger = logging.getLogger(f"test.masking.{record_call}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    if record_call == "traceback":
        try:
            raise RuntimeError(f"request failed with key {AGENT_KEY} and {APP_SECRET}")
        except RuntimeError:
            logger.exception("call failed")
    else:
        logger.warning("token %s, key %s, path %s", APP_SECRET, AGENT_KEY, "/usr/bin")
    return stream.getvalue()


def test_secrets_in_a_message_are_masked() -> None:
    line = formatted("message")
    assert APP_SECRET not in line
    assert AGENT_KEY not in line
    assert "token ***, key ***, path /usr/bin" in line  # other values stay readable


def test_secrets_in_a_traceback_are_masked() -> None:
    text = formatted("traceback")
    assert "Traceback" in text
    assert "RuntimeError" in text
    assert APP_SECRET not in text
    assert AGENT_KEY not in text


def test_only_credential_looking_variables_count() -> None:
    environ = {"OPENAI_API_KEY": "k1k1k1k1", "X_TOKEN": "t1t1t1t1", "APP_SECRET": "s1s1s1s1"}
    found = credentials_in({**environ, "HOME": "/root/home", "USE_TOKEN": "true"})
    assert sorted(found) == ["k1k1k1k1", "s1s1s1s1", "t1t1t1t1"]

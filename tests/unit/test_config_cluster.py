"""BRIDGE_LEASE_SECONDS and BRIDGE_INSTANCE_ID (issue 12)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from bridge.config import Settings


def _settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_lease_seconds_default_and_limits() -> None:
    assert _settings().cluster.bridge_lease_seconds == 15.0
    assert _settings(bridge_lease_seconds="0.05").cluster.bridge_lease_seconds == 0.05
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ValidationError, match="bridge_lease_seconds"):
            _settings(bridge_lease_seconds=bad)


def test_instance_id_defaults_to_host_and_a_random_suffix() -> None:
    first, second = _settings().cluster.bridge_instance_id, _settings().cluster.bridge_instance_id
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*-[0-9a-f]{6}", first)
    assert first.rsplit("-", 1)[0] == second.rsplit("-", 1)[0]
    assert first != second  # new at every start
    assert _settings(bridge_instance_id="  ").cluster.bridge_instance_id != ""  # empty: the default


def test_instance_id_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _settings(bridge_instance_id=" web-1.eu:a ").cluster.bridge_instance_id == "web-1.eu:a"
    for bad in ("a b", "-lead", "x" * 65, "ü"):
        with pytest.raises(ValidationError, match="bridge_instance_id"):
            _settings(bridge_instance_id=bad)
    monkeypatch.setenv("BRIDGE_INSTANCE_ID", "from-env")
    assert Settings(_env_file=None).cluster.bridge_instance_id == "from-env"  # type: ignore[call-arg]


def test_an_odd_host_name_still_makes_a_valid_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "__ Büro PC __")
    value = _settings().cluster.bridge_instance_id
    assert re.fullmatch(r"B-ro-PC-[0-9a-f]{6}", value), value

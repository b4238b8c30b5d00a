"""Fixtures for tests against the local Feishu emulator (real loopback sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bridge.devtools.emulator import FeishuEmulator
from tests.integration.stack import Stack, running_stack


@pytest.fixture
async def emulator() -> AsyncIterator[FeishuEmulator]:
    """A running emulator: no encryption, ms-scale redelivery ladder, no webhook yet."""
    async with FeishuEmulator(time_scale=0.001) as emu:
        yield emu


@pytest.fixture
async def emulator_http(emulator: FeishuEmulator) -> AsyncIterator[httpx.AsyncClient]:
    """A plain HTTP client on the emulator's base URL (no proxies from the environment)."""
    async with httpx.AsyncClient(base_url=emulator.url, trust_env=False, timeout=5.0) as client:
        yield client


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    """Emulator + bridge (webhook mode) + scripted agent subprocess, millisecond timings."""
    async with running_stack(tmp_path / "bridge") as running:
        yield running

"""One aiohttp application served on one address. The bridge has two: the Feishu listener
(webhook, /healthz) and the operator listener (bridge/ops/)."""

from __future__ import annotations

from aiohttp import web


class Listener:
    """Started and stopped by the service; `port` is the bound one once started (so port 0,
    "any free port", is usable in tests)."""

    def __init__(self, name: str, app: web.Application, host: str, port: int) -> None:
        self.name = name
        self.host = host
        self.port = port
        self._app = app
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        runner = web.AppRunner(self._app, access_log=None)
        await runner.setup()
        self._runner = runner
        await web.TCPSite(runner, self.host, self.port).start()
        self.port = runner.addresses[0][1]  # (host, port) or (host, port, flow, scope)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def __str__(self) -> str:
        return f"{self.name}={self.host}:{self.port}"

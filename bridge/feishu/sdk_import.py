"""Importing this module imports lark-oapi, without the SDK touching the importing thread's
event loop. Import it (lazily, where the SDK is needed) before any `lark_oapi` module.

`import lark_oapi` always runs `lark_oapi.ws.client`, whose module code calls
`asyncio.get_event_loop()`: inside a running loop it keeps that loop, in a thread without one
it creates a loop, makes it the thread's current loop and never closes it. Importing on a
short-lived helper thread gives it a loop of its own, closed here right away;
`LongConnection` installs its own loop into that module before the SDK uses it.

Only the long connection needs the SDK (about 4 s and 150 MB to import): the webhook path
never imports this module.
"""

from __future__ import annotations

import sys
import threading


def _import_lark_off_loop() -> None:
    if "lark_oapi" in sys.modules:
        return

    def target() -> None:
        import lark_oapi.ws.client as ws_client

        if not ws_client.loop.is_running():
            ws_client.loop.close()

    helper = threading.Thread(target=target, name="lark-oapi-import", daemon=True)
    helper.start()
    helper.join()
    import lark_oapi  # noqa: F401  (an import error on the helper resurfaces here)


_import_lark_off_loop()

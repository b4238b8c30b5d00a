"""A local Feishu (Lark) emulator speaking Feishu's real wire format over loopback sockets.

    async with FeishuEmulator(encrypt_key="k", webhook_url=bridge_url) as emu:
        settings.feishu_domain = emu.url
        delivered = await emu.send_user_message("hello")
        await emu.wait_for(lambda: emu.bot_messages(delivered.chat_id))

Several apps (bots), each with its own credentials, keys, webhook and bot:

    async with FeishuEmulator(apps=[AppSpec("cli_a", bot_name="A"), AppSpec("cli_b")]) as emu:
        emu.set_webhook_url(url_a, "cli_a")
        await emu.send_user_message("hi", chat_type="group", mention_apps=["cli_b"])

See `emulator.FeishuEmulator` for the API and `codes` for the error codes it answers.
"""

from bridge.devtools.emulator.apps import AppSpec, HostedApp
from bridge.devtools.emulator.callbacks import CALLBACK_ERROR_TOAST
from bridge.devtools.emulator.emulator import MIN_DEADLINE_S, EmulatorOptions, FeishuEmulator
from bridge.devtools.emulator.faults import FaultKind
from bridge.devtools.emulator.outage import OutageMode, OutageState, OutageStep, RefusedCall
from bridge.devtools.emulator.records import (
    ApiCall,
    CardCallbackResult,
    ChatMessage,
    DeliveredEvent,
    DeliveryAttempt,
    Envelope,
    Mention,
    Reaction,
    Toast,
    UrlVerificationResult,
)

__all__ = [
    "CALLBACK_ERROR_TOAST",
    "MIN_DEADLINE_S",
    "ApiCall",
    "AppSpec",
    "CardCallbackResult",
    "ChatMessage",
    "DeliveredEvent",
    "DeliveryAttempt",
    "EmulatorOptions",
    "Envelope",
    "FaultKind",
    "FeishuEmulator",
    "HostedApp",
    "Mention",
    "OutageMode",
    "OutageState",
    "OutageStep",
    "Reaction",
    "RefusedCall",
    "Toast",
    "UrlVerificationResult",
]

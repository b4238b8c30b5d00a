"""The receiver's allow-lists: an unset list is never a silent "anyone"."""

from __future__ import annotations

import pytest

from bridge.feishu.events import InboundMessage
from bridge.receiver import AccessPolicy


def message(sender: str = "ou_alice", chat: str = "oc_team") -> InboundMessage:
    return InboundMessage(
        event_id="ev1",
        message_id="om1",
        chat_id=chat,
        chat_type="group",
        sender_open_id=sender,
        message_type="text",
        text="hi",
    )


def test_no_lists_admit_nobody_unless_everyone_is_allowed_on_purpose() -> None:
    assert not AccessPolicy().admits(message())
    assert AccessPolicy(allow_all=True).admits(message())


@pytest.mark.parametrize("allow_all", [False, True])
def test_lists_restrict_whatever_allow_all_says(allow_all: bool) -> None:
    users = AccessPolicy(frozenset({"ou_alice"}), allow_all=allow_all)
    chats = AccessPolicy(allowed_chats=frozenset({"oc_team"}), allow_all=allow_all)
    both = AccessPolicy(frozenset({"ou_alice"}), frozenset({"oc_team"}), allow_all=allow_all)
    assert users.admits(message())
    assert not users.admits(message(sender="ou_bob"))
    assert chats.admits(message())
    assert not chats.admits(message(chat="oc_other"))
    assert both.admits(message())
    assert not both.admits(message(chat="oc_other"))

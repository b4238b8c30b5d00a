"""The outbox record holds the effect itself; a restart performs it again through its own
handler. Records of the text-only outbox (an "op" and the rendered text) still replay."""

from __future__ import annotations

import json

from bridge.core.delivery import Lane, Line, line_terms
from bridge.core.effects import PostText
from bridge.core.state import Outcome
from bridge.core.text import Text
from bridge.engine.outbox import owed_of, owed_payload
from bridge.store.port import TurnOutcome
from bridge.store.port_owed import OwedPost
from tests.fakes.feishu import Call
from tests.unit.engine.engine_fakes import CHAT, Harness, T


def test_a_record_gives_back_the_effect_with_its_terms_and_never_fresh() -> None:
    terms = line_terms(Line.SYSTEM, f"{CHAT}:th", "t1", ends=Outcome.FAILED)
    params = {"n": 3, "elapsed": Text("time.seconds", {"n": 4}), "name": "5"}
    effect = PostText("a.key", params, "om_1", "t1:end:1", True, "t1", terms=terms, fresh=True)
    post = OwedPost(1, effect.idempotency_key, CHAT, "t1", owed_payload(effect), 12.5)
    owed = owed_of(post)
    assert owed.effect == effect
    assert isinstance(owed.effect, PostText)
    assert owed.effect.terms == terms
    assert owed.effect.fresh is False  # performed again by another process
    assert owed.since == 12.5


def test_an_end_signal_recorded_without_terms_is_still_the_turns_ending() -> None:
    payload = {"op": "text", "reply_to": "om_1", "text": "over", "final": True, "outcome": ""}
    post = OwedPost(1, "t1:end", CHAT, "t1", json.dumps(payload), 3.0)
    terms = owed_of(post).effect.terms
    assert terms is not None
    assert terms.lane is Lane.ENDING
    assert terms.ends is Outcome.COMPLETED
    line = {**payload, "final": False, "text": "a line"}
    line_terms_ = owed_of(OwedPost(2, "t1:l", CHAT, "t1", json.dumps(line), 3.0)).effect.terms
    assert line_terms_ is not None
    assert line_terms_.lane is Lane.ANSWER


async def test_records_of_the_text_only_outbox_still_replay(harness: Harness) -> None:
    mid = await harness.say("a long job")
    await harness.runtime.turn(1)
    await harness.idle()
    legacy = {"reply_to": mid, "final": False, "outcome": ""}
    where = {"chat": CHAT, "in_thread": False, "lane": int(Lane.ANSWER)}
    records = [
        (f"{mid}:line:7", {**legacy, "op": "text", "text": "a line", **where}),
        (f"{mid}:hint:8", {**legacy, "op": "text", "text": "still", "presence": True, **where}),
        (  # older still: no terms kept
            f"{mid}:reply:9",
            {**legacy, "op": "answer", "text": "the answer", "final": True, "outcome": "failed"},
        ),
    ]
    for at, (key, payload) in enumerate(records):
        await harness.store.owe(key, CHAT, mid, json.dumps(payload), harness.clock + at)

    restarted = Harness(harness.store)
    restarted.clock = harness.clock + 5
    await restarted.engine.recover(before=restarted.clock)
    await restarted.idle()

    # The presence line is not said late; the turn ended with its end signal, not cut.
    assert restarted.feishu.calls == [
        Call("reply_text", mid, "a line"),
        Call("reply_text", mid, "the answer"),
    ]
    assert T("presence.unrecoverable") not in restarted.feishu.texts()
    turn = await restarted.store.turn(mid)
    assert turn is not None
    assert turn.outcome is TurnOutcome.FAILED
    assert await restarted.store.owed() == []
    assert await restarted.store.sent(f"{mid}:reply:9") is not None

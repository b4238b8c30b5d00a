"""The presence contract, checked on a run's transcript (what Feishu was asked, and when).

Each check returns the violations it found, one line each; a run is good when all are empty.
Times are the virtual seconds since the run began.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from bridge.core.delivery import Lane
from bridge.core.state import PresenceStyle
from bridge.devtools.emulator.codes import CARD_SEQUENCE
from bridge.engine.reactions import PATIENCE
from bridge.engine.status_cards import REFRESH_SHARE
from bridge.feishu.cards.status import answer_markdown
from bridge.feishu.retry import RetryPolicy
from bridge.i18n import Translator

from .agent import Plan, answer_for
from .loop import EPOCH
from .transport import Post, buttons
from .world import Run, Sent

T = Translator("zh_CN")
TOLERANCE = 0.3  # seconds a deadline may be missed by (one loop's worth of work)
ACK_LATE = 60.0  # how long an ack may wait behind its chat's slow or owed posts
RECOVERY = 30.0  # seconds an API's rate takes to grow back after a 429 halved it (at most)
# Seconds a token may be held before its call reaches Feishu: a reaction's add takes its
# token before the old reaction's removal, whose answer takes up to 3 s (transport.py).
HELD = 3.0
# Seconds past a database outage's end until every store call that met it has been tried
# again: a turn's retries wait up to 2 s between tries (bridge/store/steady.py).
DB_BACK = 2.0
_ENDING_KEYS = (
    "presence.ended_empty",
    "presence.ended_rejected",
    "presence.stopped",
    "presence.stop_forced",
    "presence.stalled_ended",
    "presence.card_failed",
    "presence.question_card_failed",
    "presence.unrecoverable",
    "presence.unrecoverable_context_lost",
    "presence.runtime_unavailable",
    "presence.runtime_busy",
    "presence.max_tokens",
    "presence.max_turn_requests",
    "presence.refusal",
    "presence.recalled",
    "presence.recalled_queued",
    "presence.approval_timed_out",
    "presence.reply_timed_out",
)
ENDINGS = tuple(T(key).split("{")[0] for key in _ENDING_KEYS)
RUNNING = (T("presence.running_hint"), T("presence.heartbeat").split("{")[0])
TAKEN = T("card.click.recorded")  # a click the bridge took (the others change nothing)
_REPLIES = ("reply_text", "reply_card", "reply_card_entity")
ACK = "OnIt"  # the world's ack emoji; the other states' are the product's defaults
_END_EMOJI = ("DONE", "CrossMark", "ERROR")
_CARD_CHANGES = (
    "update_card",
    "update_card_entity",
    "stream_card_text",
    "update_card_element",
    "patch_card_element",
    "batch_update_card",
    "card_settings",
)
_ELEMENT_CHANGES = (
    "stream_card_text",
    "update_card_element",
    "patch_card_element",
    "batch_update_card",
)


@dataclass(frozen=True)
class Seen:
    """One call as a user of one message sees it."""

    at: float
    end: float
    op: str
    text: str
    ok: bool = True  # Feishu took it (an outage's refusals are kept: they took the time)


def _t(at: float) -> float:
    return round(at - EPOCH, 3)


def by_message(posts: Iterable[Post]) -> dict[str, list[Seen]]:
    """What each user message got: replies to it and changes of the cards replying to it."""
    owner: dict[str, str] = {}  # a card's id or card message's id -> the user message
    for post in posts:  # a card entity is made before the reply that shows it
        if post.op == "reply_card_entity":
            owner[post.text] = post.target
    seen: dict[str, list[Seen]] = defaultdict(list)
    for post in posts:
        target = post.target
        if post.op in _REPLIES:
            owner[post.result] = target
        elif post.op in _CARD_CHANGES:
            target = owner.get(target, "")
        elif post.op == "create_card":  # the bridge's decision to show it
            target = owner.get(post.result, "")
        elif post.op not in ("add_reaction", "remove_reaction"):
            continue
        text = post.text if post.card is None else repr(post.card)
        end = _t(post.end or post.start)
        seen[target].append(Seen(_t(post.start), end, post.op, text, post.ok))
    return seen


def _state_reaction(post: Post) -> bool:
    """A change of a message's reaction after its ack: made on the side, never by the chat's
    performer (nothing of the chat waits for it)."""
    return post.op == "remove_reaction" or (post.op == "add_reaction" and post.text != ACK)


def by_chat(run: Run) -> dict[str, list[Seen]]:
    """Every call about a chat, whatever it answers: its users' messages, the chat itself
    (a schedule's header), and the bot's own messages there (a scheduled round's lines)."""
    chat_of = {s.message_id: s.chat for s in run.sent} | {s.chat: s.chat for s in run.sent}
    for post in run.posts:  # what each id belongs to: the bot's messages, its card entities
        chat = chat_of.get(post.target)
        if chat is not None and post.result:
            chat_of[post.result] = chat
        if chat is not None and post.op == "reply_card_entity":
            chat_of[post.text] = chat
    # A try Feishu refused holds its chat's lane through the client's backoff, until the
    # next try of its call (the tries of one post share its uuid).
    retried_at: dict[int, float] = {}
    tries: dict[str, Post] = {}
    for post in run.posts:
        if post.uuid:
            before = tries.get(post.uuid)
            if before is not None and not before.ok:
                retried_at[id(before)] = post.start
            tries[post.uuid] = post
    calls: dict[str, list[Seen]] = defaultdict(list)
    for post in run.posts:
        chat = chat_of.get(post.target) or chat_of.get(post.result)
        if chat is None or _state_reaction(post):
            continue
        text = post.text if post.card is None else repr(post.card)
        end = _t(retried_at.get(id(post), post.end or post.start))
        calls[chat].append(Seen(_t(post.start), end, post.op, text, post.ok))
    return calls


def _ends(got: list[Seen], prompt: str) -> list[Seen]:
    """A turn's end signals: its ending lines (stopped, failed, ...) or, when it has none,
    the answer (a stopped turn shows what it had written, then says it stopped)."""
    replies = [s for s in got if s.op == "reply_text" and s.ok]
    lines = [s for s in replies if s.text.startswith(ENDINGS)]
    return lines or [s for s in replies if answer_for(prompt) in s.text]


def check(run: Run) -> list[str]:
    seen = by_message(run.posts)
    problems: list[str] = []
    for rule in RULES:
        problems.extend(rule(run, seen))
    return problems


def _acks(got: list[Seen]) -> list[Seen]:
    """The ack's tries: the received reaction added before any was changed (the round
    back from waiting on its user says received again, and that is no second ack)."""
    changed = min((s.at for s in got if s.op == "remove_reaction"), default=float("inf"))
    return [s for s in got if s.op == "add_reaction" and s.text == ACK and s.at < changed]


def one_ack_each(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    out = []
    for sent in run.sent:
        tries = _acks(seen[sent.message_id])
        acks = [s for s in tries if s.ok]
        # An ack is best-effort: one Feishu refused during an outage is not tried again, and
        # one still waiting its turn when the bridge was killed is not made up for.
        killed = run.restarted_at is not None and not tries and sent.at < run.restarted_at
        # Nor is one skipped while the bridge knew Feishu was down (it would only fail): the
        # ack's turn in its chat may come a while after the message, when the gate is shut.
        skipped = not tries and _touches_outage(run, _t(sent.at), _t(sent.at) + ACK_LATE)
        # Nor while the client's breaker paused reactions: Feishu's 429 asked it to wait.
        skipped = skipped or (not tries and _paused(run, _t(sent.at), _t(sent.at) + ACK_LATE))
        if len(acks) > 1 or (not acks and all(s.ok for s in tries) and not (killed or skipped)):
            out.append(f"{sent.message_id}: {len(acks)} acks")
    return out


def one_end_each(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    out = []
    for sent in run.sent:
        if sent.plan is None:
            continue
        ends = _ends(seen[sent.message_id], sent.text)
        in_card = run.style is PresenceStyle.CARD and any(
            answer_for(sent.text) in s.text
            for s in seen[sent.message_id]
            if s.op != "reply_text" and s.ok
        )
        # A message taken back may end silently: its queue line is edited to say so.
        recalled = sent.message_id in run.recalled
        if len(ends) > 1 or (not ends and not in_card and not recalled):
            out.append(f"{sent.message_id}: {len(ends)} end signals")
    return out


def nothing_running_after_the_end(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    out = []
    for sent in run.sent:
        got = seen[sent.message_id]
        ends = [s.at for s in _ends(got, sent.text)] if sent.plan is not None else []
        if not ends:
            continue
        late = [s for s in got if s.ok and s.at > ends[0] and s.text.startswith(RUNNING)]
        if late:
            out.append(f"{sent.message_id}: '正在处理' at {late[0].at} after its end at {ends[0]}")
    return out


def nothing_running_once_the_agent_ended(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """ "Still working" about a turn its agent has ended is untrue wherever the line waited
    (an outage, the call budget): none may start after the end reached the bridge."""
    ended: dict[str, float] = {}
    for prompt in run.runtime.prompts:  # a prompt sent again after a restart: its last end
        if prompt.ended is not None:
            ended[prompt.text] = _t(prompt.ended)
    out = []
    for sent in run.sent:
        at = ended.get(sent.text)
        if at is None:
            continue
        got = seen[sent.message_id]
        late = [s for s in got if s.ok and s.at > at + TOLERANCE and s.text.startswith(RUNNING)]
        if late:
            out.append(
                f"{sent.message_id}: '正在处理' at {late[0].at} after its agent ended at {at}"
            )
    return out


def held(run: Run) -> dict[str, list[Seen]]:
    """Each chat's calls waiting for their turn in the call budget (from..until), as the
    chat's calls in flight are: what comes after waits for them. Not the changes of a
    message's reaction after its ack, made on the side (nothing of the chat waits for them)."""
    out: dict[str, list[Seen]] = defaultdict(list)
    for wait in run.waits:
        side = wait.lane is Lane.REFRESH and "/reactions" in wait.api
        if wait.chat is not None and not side and wait.until > wait.since:
            out[wait.chat].append(Seen(_t(wait.since), _t(wait.until), "wait", wait.lane.name))
    return out


def card_spacing(run: Run) -> float:
    """The most a live card's changes are spaced: the card interval, or longer when so many
    cards are live that together they would ask more than the card APIs' pace allows
    (bridge/engine/status_cards.py `_spacing`; here every chat's card live at once)."""
    if run.style is not PresenceStyle.CARD:
        return 0.0
    scheduler = run.budgets[0].scheduler
    pace = min(scheduler.policy.app_per_second, scheduler.minute_rate())
    cards = max(len({s.chat for s in run.sent}), _most_cards_live(run))
    return max(run.card_interval, cards / (pace * REFRESH_SHARE))


def _most_cards_live(run: Run) -> int:
    """The most cards live at once, a long answer's continuation cards with their status
    cards: each from its creation to its last change."""
    spans: dict[str, list[float]] = {}
    for post in run.posts:
        if post.op == "create_card" and post.ok and post.result:
            spans[post.result] = [post.start, post.end or post.start]
        elif post.op in _CARD_CHANGES and post.target in spans:
            spans[post.target][1] = max(spans[post.target][1], post.end or post.start)
    edges = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    live = most = 0
    for _, step in edges:
        live += step
        most = max(most, live)
    return most


def _busy_until(deadline: float, calls: list[Seen], after: float) -> float:
    """The deadline, moved past every call of the chat still in flight at it, or waiting
    for its turn in the call budget (one performer per chat: a hint cannot start before
    the slow call ahead of it returns), plus `after` (what the surface must wait after a
    change)."""
    moved = True
    while moved:
        moved = False
        for call in calls:
            # In flight at the deadline, or started within the tolerance after it (a timer a
            # little late finds the chat's lane taken by what came meanwhile).
            if call.at <= deadline + TOLERANCE and deadline < call.end:
                deadline, moved = call.end + after, True
    return deadline


def hint_and_heartbeat(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    out = []
    by_text = {s.text: s for s in run.sent if s.plan is not None}
    chat_calls = by_chat(run)
    waiting = held(run)
    busy = {chat: [*chat_calls[chat], *waiting[chat]] for chat in {s.chat for s in run.sent}}
    t = run.timings
    # A card changes at most once per its spacing: a change due meanwhile waits for it.
    after = card_spacing(run)
    slack = TOLERANCE + after
    for prompt in run.runtime.prompts:
        sent = by_text.get(prompt.text)
        if sent is None or sent.plan is None or prompt.ended is None:
            continue
        start, ended = _t(prompt.started), _t(prompt.ended)
        if prompt.cancelled_at is not None:
            ended = min(ended, _t(prompt.cancelled_at))
        # What the bridge showed once its runtime said the prompt went out counts, though the
        # agent read it later (a moment, or a prompt sent again after a tail, once the
        # process was free): the bridge counts the turn's silence from its side.
        since = min(start, _t(prompt.handed)) if prompt.handed is not None else start
        if _touches_outage(run, since, ended):
            continue  # nothing can be shown while Feishu is away (delivered_after_the_storm)
        silent_until = start + sent.plan.first_silence
        shown = sorted(
            s.at
            for s in seen[sent.message_id]
            if not s.op.endswith("_reaction") and s.ok and s.at >= since
        )
        due = start + t.first_hint
        if silent_until > due + TOLERANCE and ended > due + TOLERANCE:
            limit = _busy_until(due, busy[sent.chat], after) + slack
            # The chat's posts were waiting for Feishu to come back, or the hint was on its
            # way when the bridge was killed (a card's create call, cut off).
            late = min(shown[0], limit + ACK_LATE) if shown else limit
            if _touches_outage(run, start, late):
                continue
            if not shown or shown[0] > limit:
                first = shown[0] if shown else None
                out.append(f"{sent.message_id}: first hint due by {limit:.3f}, came at {first}")
                continue
        # After the hint, any line in the chat shows the bot alive (a queued line included).
        alive = sorted(
            s.at
            for s in chat_calls[sent.chat]
            if not s.op.endswith("_reaction") and s.ok and s.at >= since
        )
        waits = [*_waiting(run, seen, sent), *_stale(seen[sent.message_id], start)]
        last = shown[0] if shown else start
        for at in [*(a for a in alive if a > last), ended]:
            if at > ended:
                break
            for w0, w1 in waits:  # waiting on a person, or stale: no heartbeat owed
                if w0 < at and w1 > last:
                    last = max(last, min(w1, at))
            limit = _busy_until(last + t.heartbeat, busy[sent.chat], after) + slack
            if _touches_outage(run, start, limit):
                break
            if at > limit and shown:
                out.append(f"{sent.message_id}: nothing shown from {last} to {at} while running")
                break
            last = at
    return out


# The stale line's ends (after its last placeholder): "silent for 30 s; still waiting".
STALE = tuple(T(key).rsplit("}", 1)[-1] for key in ("presence.stale", "presence.stale_no_activity"))


def _stale(got: list[Seen], read: float) -> list[tuple[float, float]]:
    """When the turn was stale: from its stale line (the bridge said it still waits) until
    the agent was heard from again: the next thing shown for it once the agent had read the
    prompt (at `read`; a card's change as the line goes only shows the line). No heartbeat
    follows that line (the core's STALE state): it says what one would; the stall rules run."""
    shown = sorted(s.at for s in got if s.ok and not s.op.endswith("_reaction"))
    lines = [s.at for s in got if s.ok and s.op == "reply_text" and s.text.endswith(STALE)]
    return [(at, next((t for t in shown if t > max(at, read)), float("inf"))) for at in lines]


def _waiting(run: Run, seen: dict[str, list[Seen]], sent: Sent) -> list[tuple[float, float]]:
    """When the message's turn waited on its requester: from each approval card to the
    requester's click on that card that the bridge took, or to the card's closing (it
    expired, or was withdrawn as the round began again), or forever."""
    out = []
    for card in run.posts:
        if card.op != "reply_card" or card.target != sent.message_id or not card.ok:
            continue
        clicked = [
            _t(c.at)
            for c in run.clicks
            if c.card == card.result and c.operator == f"ou_{sent.chat}" and c.toast == TAKEN
        ]
        closed = [
            _t(p.start) for p in run.posts if p.op == "update_card" and p.target == card.result
        ]
        out.append((_t(card.start), min([*clicked, *closed], default=float("inf"))))
    return out


def quiet_while_waiting(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """No 'still working' line while the turn waits for its requester's decision."""
    out = []
    for sent in run.sent:
        for w0, w1 in _waiting(run, seen, sent):
            for s in seen[sent.message_id]:
                if s.ok and w0 < s.at < w1 and s.text.startswith(RUNNING):
                    out.append(f"{sent.message_id}: '{s.text}' at {s.at} while waiting since {w0}")
    return out


BACKOFF = RetryPolicy().max_delay  # the longest the client waits before trying a call again


def _touches_outage(run: Run, start: float, end: float) -> bool:
    """Whether Feishu's outage, the database's, or the bridge's kill and restart, fell in
    [start, end]."""
    if run.restarted_at is not None:
        # A cluster's survivor takes a killed member's conversations over only once their
        # leases expired: the kill lasts until then.
        until = run.restart_until if run.restart_until is not None else run.restarted_at
        if start <= _t(until) + TOLERANCE and end >= _t(run.restarted_at):
            return True
    db = run.db_outage
    if db is not None and start <= db.end + DB_BACK + TOLERANCE and end >= db.start:
        return True  # what the bridge shows waits for its store's records
    # The API is back at the outage's end, but the bridge learns it only from a probe's
    # answer (Feishu's own reset header may ask it to wait longer): until then every chat's
    # posts wait at the gate.
    windows = [(_t(a), _t(b)) for a, b in run.gate_down]
    if run.faults.outage is not None:
        # A call that hangs into the outage returns only at the client's timeout, after it,
        # and is tried again after the client's backoff (seed 1032: a card's change that
        # timed out 8 s after Feishu was back, then waited its backoff); a 429 asks the
        # bridge to wait out its reset (the client, the budget and the breaker do, for that
        # API), however soon Feishu is back.
        refused = [
            _t(p.end) + (p.reset or BACKOFF)
            for p in run.posts
            if not p.ok and not p.repeat and p.end
        ]
        windows.append((run.faults.outage[0], max([run.faults.outage[1], *refused])))
    return any(start <= b + TOLERANCE and end >= a for a, b in windows)


def _paused(run: Run, start: float, end: float) -> bool:
    """Whether the client's breaker paused reactions at some time in [start, end]."""
    return any(start <= _t(b) and end >= _t(a) for a, b in run.reactions_paused)


def _reaction_given_up(run: Run, sent: Sent) -> bool:
    """Whether a change of a reaction in the message's chat, after it was sent, waited its
    patience for the reaction API's budget in vain and was left as it is (busier than
    Feishu's reaction APIs allow: bridge/engine/reactions.py)."""
    return any(
        not w.granted
        and w.chat == sent.chat
        and "/reactions" in w.api
        and w.since >= sent.at
        and w.until - w.since >= PATIENCE - TOLERANCE
        for w in run.waits
    )


def answers_in_order(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """A chat's end signals reach it in the order its messages were taken: as they were
    sent, unless Feishu redelivered one the bridge could not take (its database away)."""
    out = []
    by_chat: dict[str, list[tuple[float, str]]] = defaultdict(list)
    # The order the bridge took them in, not their times: two hand-overs may end at one
    # instant (seed 8412: a duplicate delivery and a redelivery, taken one after the other).
    position = {message_id: i for i, message_id in enumerate(run.taken)}
    taken = sorted(run.sent, key=lambda s: position.get(s.message_id, len(position)))
    for sent in taken:
        ends = _ends(seen[sent.message_id], sent.text) if sent.plan is not None else []
        if ends:
            by_chat[sent.chat].append((ends[0].at, sent.message_id))
    for chat, ends_at in by_chat.items():
        order = [mid for _, mid in sorted(ends_at)]
        taken_order = [mid for _, mid in ends_at]
        if order != taken_order:
            out.append(f"{chat}: answers came as {order}, messages were taken as {taken_order}")
    return out


def few_calls_while_down(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """While Feishu is down the bridge probes; it does not retry every post on its own.
    Each call the bridge makes (a post in flight when Feishu went away, a probe) is tried
    by the client a few times within seconds before the gate hears of it: Feishu sees each
    up to `max_attempts` times."""
    outage = run.faults.outage
    if outage is None:
        return []
    start, end = outage[0] + EPOCH, outage[1] + EPOCH
    calls = [p for p in run.posts if start <= p.start < end]
    # One ack per message, never retried; a change of a reaction waits for Feishu to be back.
    acks = [p for p in calls if p.op == "add_reaction" and p.text == ACK]
    chats = len({s.chat for s in run.sent})
    allowed = (2 * chats + (end - start) / 4 + 3) * RetryPolicy().max_attempts
    if len(calls) - len(acks) > allowed:
        return [f"{len(calls) - len(acks)} calls in {end - start:.0f} s of outage"]
    return []


def no_approval_timed_out_unseen(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """An approval times out only once its card was on the chat for the whole timeout: a
    card still waiting for its turn (an outage, the call budget) has asked nobody yet."""
    timed_out = T("presence.approval_timed_out").split("{")[0]
    by_text = {s.text: s for s in run.sent if s.plan is not None}
    shown: dict[str, float] = {}  # request id -> when Feishu first took its card
    for post in run.posts:
        if post.op == "reply_card" and post.ok:
            for value in buttons(post.card or {}):
                shown.setdefault(str(value.get("request_id")), _t(post.start))
    out = []
    for ask in run.runtime.asks.values():
        sent = by_text.get(ask.prompt)
        if ask.answered is None or ask.option is not None or sent is None:
            continue
        if not any(s.text.startswith(timed_out) for s in seen[sent.message_id]):
            continue  # refused for another reason: a /stop, a recall, a card Feishu refused
        at, since = _t(ask.answered), shown.get(ask.request_id)
        if since is None:
            out.append(f"{sent.message_id}: {ask.request_id} timed out at {at}, never shown")
        elif at < since + run.timings.approval_timeout - TOLERANCE:
            out.append(f"{sent.message_id}: {ask.request_id} timed out at {at}, shown at {since}")
    return out


def no_overlapping_prompts(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    return list(run.runtime.overlaps)


def nothing_posted_twice(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    uuids = [p.uuid for p in run.posts if p.uuid and p.ok and not p.repeat]
    return [f"uuid {u} posted twice" for u in sorted({u for u in uuids if uuids.count(u) > 1})]


def one_reaction_ending_in_its_rounds_state(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """Never two of the bot's reactions on a message at once; and a message whose round
    ran to its end (Feishu up and the bridge alive from it on) ends with one reaction: how
    its round ended (done for an answer)."""
    added: dict[str, tuple[str, str]] = {}  # reaction id -> (message, emoji)
    on: dict[str, dict[str, str]] = defaultdict(dict)  # message -> reaction id -> emoji
    out = []
    for post in run.posts:  # each message's changes are made one after the other
        if post.op == "add_reaction" and post.ok and not post.repeat:
            added[post.result] = (post.target, post.text)
            on[post.target][post.result] = post.text
            if len(on[post.target]) > 1:
                shown = sorted(on[post.target].values())
                out.append(f"{post.target}: reactions {shown} at once at {_t(post.start)}")
        elif post.op == "remove_reaction" and post.ok:
            on[post.target].pop(post.text, None)
    for sent in run.sent:
        if sent.plan is None or sent.message_id in run.recalled:
            continue
        if _touches_outage(run, _t(sent.at), float("inf")):
            continue  # best-effort: a change Feishu refused is not tried again
        if _paused(run, _t(sent.at), float("inf")):
            continue  # nor one skipped while the breaker paused reactions
        if _reaction_given_up(run, sent):
            continue  # nor one whose turn in the reaction API's budget did not come in time
        ends = _ends(seen[sent.message_id], sent.text)
        if not ends:
            continue  # in a card, or never ran
        final = sorted(on[sent.message_id].values())
        answered = not ends[0].text.startswith(ENDINGS)
        want = ["DONE"] if answered else None
        if len(final) != 1 or final[0] not in _END_EMOJI or (want and final != want):
            out.append(f"{sent.message_id}: ends with reactions {final}")
    return out


def no_agent_process_leaked(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """Every agent process the bridge started is stopped, or its pool's own."""
    return [f"agent process {pid} alive and no pool's own" for pid in run.leaked]


def no_429_at_its_own_pace(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """Paced by its own call budget (Feishu's limits × the margin), the bridge never meets
    one of Feishu's limits: no call is answered 429 for a limit (an outage's 429s are not
    limits; the world's Feishu meters the app at the limits the bridge is set to: the
    published ones, or a crowd's smaller share of them)."""
    restart = run.restarted_at if run.restarted_at is not None else float("inf")
    return [
        f"{p.op} {p.target} at {_t(p.start)}: 429, past Feishu's {p.limited} limit"
        for p in run.posts
        if p.limited is not None
        # A second's limit met in the second after a restart: the world starts the new
        # process at once, its budget full while Feishu still counts the old one's calls
        # (a real process takes longer than that to start).
        and not (p.limited in ("api", "chat") and 0.0 <= p.start - restart < 1.0)
    ]


def nothing_refused_as_malformed(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """Feishu refuses none of the bridge's calls for what it asks: a card's sequence, an
    element that is not there, a reaction that is not, an expired token."""
    out = []
    restart = run.restarted_at
    changed: dict[str, list[Post]] = defaultdict(list)  # card id -> its changes, in order
    for post in run.posts:
        if post.op in _CARD_CHANGES:
            changed[post.target].append(post)
    for post in run.posts:
        if not post.refused:
            continue
        if post.refused == CARD_SEQUENCE.code and restart is not None:
            # A card's sequence counts tenths of a second (bridge/engine/status_cards.py):
            # a process started within the tenth of the old one's last change may repeat it
            # in its first (drawn then, sent once its turn in the call budget came). The
            # world restarts the bridge at once; a real process takes longer to start.
            before = [p for p in changed[post.target] if p.start < restart]
            first = next((p for p in changed[post.target] if p.start >= restart), None)
            if before and first is post and restart - before[-1].start < 0.1:
                continue
        out.append(f"{post.op} {post.target} at {_t(post.start)}: refused with code {post.refused}")
    return out


SPACING_TOLERANCE = (
    1e-6  # seconds: the bridge re-checks every wake-up (see cards_keep_their_spacing)
)


def cards_follow_their_views(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """A live card shows each view it is asked to (or a newer one): a change of it starts
    by the later of the asking and its spacing after its previous change came back (the
    change in flight then, or the last before it), moved past its changes' waits for
    their turn in the call budget (`no_lane_starved` bounds those). A view left pending behind
    a slow change, until the next view happens to come, breaks it (seed 1252's bug). Not
    held to it: a view asked while Feishu was away or the bridge restarting."""
    if not run.asked:
        return []
    changes: dict[str, list[Post]] = defaultdict(list)  # card id -> its posting and changes
    for post in sorted(run.posts, key=lambda p: p.start):
        if post.op in _CARD_CHANGES and post.op != "update_card":
            changes[post.target].append(post)
        elif post.op == "reply_card_entity" and post.ok:
            changes[post.text].append(post)
    waits: dict[str, list[Seen]] = defaultdict(list)  # chat -> its card changes' waits
    for wait in run.waits:
        if "cardkit" in wait.api and wait.chat is not None:
            waits[wait.chat].append(Seen(_t(wait.since), _t(wait.until), "wait", ""))
    spacing = card_spacing(run)
    out = []
    for asked in run.asked:
        if asked.final:
            continue
        at = _t(asked.at)
        calls = [(_t(p.start), _t(p.end or p.start)) for p in changes[asked.card]]
        before = [end for start, end in calls if start < at]
        after = [start for start, _ in calls if start >= at]
        apart = spacing * (2 if asked.quiet else 1)
        due = max(at, before[-1] + apart) if before else at + apart
        due = _busy_until(due, waits[asked.chat], 0.0)
        came = after[0] if after else None
        if came is not None and came <= due + TOLERANCE:
            continue
        if _touches_outage(run, at, came if came is not None else float("inf")):
            continue
        out.append(f"card {asked.card}: a view asked at {at} was due by {due:.3f}, came at {came}")
    return out


def _final(post: Post) -> bool:
    """A card's last change: streaming off (the whole update of its final view), or the
    settings call that turns it off. It goes at once, after any change in flight."""
    if post.op == "card_settings":
        return True
    config = (post.card or {}).get("config", {})
    return post.op == "update_card_entity" and config.get("streaming_mode") is False


def _ending(
    posts: list[Post], killed: float, away: Callable[[float, float], bool] = lambda a, b: False
) -> list[bool]:
    """Which posts are part of their card's final change: the final itself, and the element
    changes that carry the final text with the settings call behind them, each going as
    the one before it came back (bridge/engine/status_cards.py `_end_by_element`, when the
    whole update's API has no room) or once Feishu is back (`away`: the settings call
    waited out an outage, seed 4596); a card's last change, an element's, that the
    bridge's kill cut off before the settings call could follow (seed 23132)."""
    out = [False] * len(posts)
    later: dict[str, int] = {}  # card id -> its next change
    for i in range(len(posts) - 1, -1, -1):
        post = posts[i]
        if post.op not in _CARD_CHANGES:
            continue
        nxt = later.get(post.target)
        end = post.end or post.start
        chained = (
            nxt is not None
            and post.op in _ELEMENT_CHANGES
            and out[nxt]
            and (posts[nxt].start <= end + TOLERANCE or away(end, posts[nxt].start))
        )
        cut = nxt is None and post.op in _ELEMENT_CHANGES and post.start < killed <= end + TOLERANCE
        out[i] = _final(post) or chained or cut
        later[post.target] = i
    return out


def cards_keep_their_spacing(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """A live card changes at most once per card interval: a change (not the final one)
    starts no sooner than the interval after the previous change of that card came back
    (or after the card was posted). The bridge counts from when the previous change
    returned, and re-checks the clock after every wake-up, so no early wake-up of the
    clock excuses a change closer than that; across a restart the new process starts
    afresh (it cannot know when the old one last changed the card)."""
    last: dict[str, float] = {}  # card id -> when its last change came back
    restart = run.restarted_at if run.restarted_at is not None else float("inf")
    out = []
    # The final's chain counts its tries Feishu failed (seed 2479: the settings call behind
    # the text met an outage, and went again once it was over).
    posts = sorted(run.posts, key=lambda p: p.start)
    spacing = _Spacing(run, posts, restart)

    def away(start: float, end: float) -> bool:
        return _touches_outage(run, _t(start), _t(end))

    for post, ending in zip(posts, _ending(posts, restart, away), strict=True):
        if not post.ok:
            continue
        if post.op == "reply_card_entity":
            last[post.text] = post.end
            continue
        if post.op not in _CARD_CHANGES or post.op == "update_card":
            continue
        before = last.get(post.target)
        last[post.target] = post.end
        if before is None or ending or before < restart <= post.start:
            continue
        least, live = spacing.at(post.target, post.start)
        if post.start < before + least - SPACING_TOLERANCE:
            out.append(
                f"card {post.target}: {post.op} at {_t(post.start)}, "
                f"{post.start - before:.3f} s after its previous change came back"
                f" ({least:.3f} s with {live} cards live)"
            )
    return out


class _Spacing:
    """The least spacing of a card's changes when many cards are live: the card interval,
    or more when the live cards together would ask the card APIs for more than their
    share of one API's steady pace (bridge/engine/status_cards.py `_spacing`). Counted low,
    as Feishu's record shows them: a card live from its first change (it was registered
    before) to its last call (it is forgotten after), those live `SETTLING` before the
    change only (the bridge weighed its spacing a moment before the call went); a card
    that may have closed its page counts half (`_maybe_quiet`)."""

    SETTLING = 0.05

    def __init__(self, run: Run, posts: list[Post], restart: float) -> None:
        self.interval = run.card_interval
        scheduler = run.budgets[0].scheduler
        self.pace = min(scheduler.policy.app_per_second, scheduler.minute_rate()) * REFRESH_SHARE
        self.restart = restart
        life: dict[str, list[float]] = {}
        chat_of: dict[str, str | None] = {}
        for post in posts:
            if post.op == "reply_card_entity" and post.ok:
                chat_of[post.text] = post.chat
            elif post.op in _CARD_CHANGES and post.target in chat_of:
                span = life.setdefault(post.target, [post.start, post.start])
                span[1] = post.start
        self.life = life
        self.chat_of = chat_of

    def at(self, card: str, when: float) -> tuple[float, int]:
        """The least spacing of `card`'s change at `when`, and the cards it counted live."""
        side = when >= self.restart
        live = [
            key
            for key, (first, last) in self.life.items()
            if key == card
            or (first <= when - self.SETTLING and last >= when and (first >= self.restart) == side)
        ]
        quiet = sum(self._maybe_quiet(key) for key in live)
        asked = len(live) - quiet / 2
        return max(self.interval, asked / self.pace), len(live)

    def _maybe_quiet(self, key: str) -> bool:
        """Whether `key` may have closed its page: a later card of its chat followed it (its
        continuation, which may come after its last change: seed 409), or the bridge was
        killed while it lived (the kill may have cut its continuation's post: seed 79774)."""
        first = self.life[key][0]
        return first < self.restart < math.inf or any(
            other != key
            and self.chat_of.get(other) == self.chat_of.get(key)
            and self.life[other][0] > first
            for other in self.life
        )


def _said(plan: Plan) -> str | None:
    """What the agent said in a turn that ran to its end (None: it crashed)."""
    if any(step.kind == "crash" for step in plan.steps):
        return None
    return "".join(step.text for step in plan.steps if step.kind == "chunk")


def the_answer_is_what_the_agent_said(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """A turn that ran to its end shows what its agent said, all of it, once, in order: the
    answer's messages together, or the answer in its card as the card ends (its words:
    the card sets the text on each side of a tool call apart as paragraphs)."""
    prompts = {p.text: p for p in run.runtime.prompts}
    restart = run.restarted_at if run.restarted_at is not None else float("inf")
    out = []
    for sent in run.sent:
        prompt = prompts.get(sent.text)
        if sent.plan is None or prompt is None or prompt.cancelled_at is not None:
            continue
        said = _said(sent.plan)
        got = seen[sent.message_id]
        if said is None or sent.at >= restart or prompt.started >= restart:
            continue
        if any(s.op == "reply_text" and s.ok and s.text.startswith(ENDINGS) for s in got):
            continue  # ended otherwise (an approval timed out, say): the ending line says so
        texts = "".join(
            s.text
            for s in got
            if s.op == "reply_text" and s.ok and ("chunk of " in s.text or "answer to " in s.text)
        )
        cards = [
            p.text
            for p in run.posts
            if p.op == "reply_card_entity" and p.ok and p.target == sent.message_id
        ]
        if len(cards) == 1:
            # The card sets the text around a tool call apart as paragraphs: what is
            # compared is all but the blanks.
            shown = run.card_answers.get(cards[0], "")
            if "".join(shown.split()) != "".join(answer_markdown(said).split()):
                out.append(
                    f"{sent.message_id}: its card ends with {shown!r}, the agent said {said!r}"
                )
            if texts and "".join(texts.split()) != "".join(said.split()):
                out.append(f"{sent.message_id}: messages say {texts!r}, the agent said {said!r}")
        elif not cards and "".join(texts.split()) != "".join(said.split()):
            out.append(f"{sent.message_id}: messages say {texts!r}, the agent said {said!r}")
    return out


def no_lane_starved(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """No call waits for its turn in the call budget longer than the budget says it may
    (`CallQueue.longest_wait`): its buckets' time to refill, from empty, to what its lane
    may take and to what the calls that took from them meanwhile took. Those calls are
    Feishu's record: every call Feishu saw of the wait's API (its second's and its minute's
    windows) and, for a send, of its chat's sends, each a token of the bridge's (counted
    until `HELD` after the wait: a token held for a call that goes later). A call waiting
    longer was passed over while Feishu allowed it: its lane or its chat starved.
    Nor while its API's calls were held (`Held`: by Feishu's record, as many of them
    between their arrival and a second after their answer as the budget holds at most): a
    slow Feishu slows the budget, and that time comes on top of the bound.
    Not held to it: a wait that touches an outage or the bridge's restart, or follows a
    429 (Feishu's reset is a pause the budget keeps, and it halves the API's rate)."""
    if not run.waits:
        return []
    scheduler = run.budgets[0].scheduler
    calls: dict[str, list[float]] = defaultdict(list)  # API -> when Feishu saw each call
    sends: dict[str, list[float]] = defaultdict(list)  # chat -> when Feishu saw each send
    limited: list[float] = []
    for post in run.posts:
        calls[post.api].append(post.start)
        if post.chat is not None:
            sends[post.chat].append(post.start)
        if post.limited is not None:
            limited.append(post.start)

    def went(times: list[float], since: float, until: float) -> int:
        return bisect.bisect_left(times, until) - bisect.bisect_left(times, since)

    out = []
    for wait in run.waits:
        waited = wait.until - wait.since
        if waited <= TOLERANCE:
            continue
        end = wait.until + HELD
        chat_went = went(sends[wait.chat], wait.since, end) if wait.chat else 0
        took = went(calls[wait.api], wait.since, end)
        bound = scheduler.longest_wait(wait.lane, wait.send, took, chat_went)
        if waited <= bound + TOLERANCE:
            continue
        bound += _held_for(run, wait.api, wait.since, wait.until, scheduler.policy.held_per_api)
        if waited <= bound + TOLERANCE:
            continue
        # (A token held past the wait for a call the bridge's kill then cut off is one
        # Feishu never saw: seed 4477, a reaction's add waiting for the removal before it.)
        if _touches_outage(run, _t(wait.since), _t(wait.until) + HELD):
            continue
        if any(wait.since - RECOVERY <= at <= wait.until for at in limited):
            continue
        state = "waited" if wait.granted else "waited in vain"
        out.append(
            f"{wait.lane.name.lower()} call of {wait.api} in {wait.chat}: {state} "
            f"{_t(wait.since)}..{_t(wait.until)}, {waited:.3f} s, past its bound {bound:.3f} s "
            f"({took} calls of its API, {chat_went} sends to its chat meanwhile)"
        )
    return out


def _held_for(run: Run, api: str, since: float, until: float, most: float) -> float:
    """How long within `since..until` Feishu's record holds `most` calls of `api` (one
    less: a grant goes a moment before its call) from their arrival until a second after
    their answer."""
    if most <= 0:
        return 0.0
    edges = sorted(
        edge
        for post in run.posts
        if post.api == api and post.start < until and post.end + 1.0 > since
        for edge in ((post.start, 1), (post.end + 1.0, -1))
    )
    held, covered, full_since = 0, 0.0, None
    for at, step in edges:
        held += step
        if held >= most - 1 and full_since is None:
            full_since = at
        elif held < most - 1 and full_since is not None:
            covered += max(0.0, min(at, until) - max(full_since, since))
            full_since = None
    if full_since is not None:
        covered += max(0.0, until - max(full_since, since))
    return covered


STALLED = T("presence.stalled_ended")


def no_answered_round_ended_as_unresponsive(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """A round that showed its answer is not then ended as unresponsive (the stall rules'
    line): its agent ended it. So too after a cancelled turn's leftover result answered the
    next prompt (a tail): that prompt is sent again on a restarted agent, not kept open for
    the result the agent owes the prompt after it. Not held to it: an agent that cannot load
    sessions, whose tail keeps the round open (a restart would lose the session) until a
    cancel, the user's or the stall rules'."""
    if not run.runtime.temper.can_load:
        return []
    out = []
    for sent in run.sent:
        if sent.plan is None:
            continue
        got = seen[sent.message_id]
        shown = [s.at for s in got if s.ok and answer_for(sent.text) in s.text]
        ended = [s for s in got if s.ok and s.op == "reply_text"]
        stalled = [s.at for s in ended if s.text.startswith(STALLED)]
        if shown and stalled and stalled[0] > shown[0]:
            out.append(
                f"{sent.message_id}: ended as unresponsive at {stalled[0]},"
                f" after its answer at {shown[0]}"
            )
    return out


def every_conversation_settles(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    return [f"{key}: still running or queued at the horizon" for key in run.stuck]


RESTARTED = (T("recovery.resumed"), T("recovery.resumed_queued"))


def no_restart_that_never_was(run: Run, seen: dict[str, list[Seen]]) -> list[str]:
    """No process was killed, so nobody is told the service restarted: a database outage
    (every lease expiring while it is away, in a cluster) or a Feishu outage is not one."""
    if run.restarted_at is not None:
        return []
    return [
        f"{message_id}: told of a restart at {s.at:.3f} ({s.text[:20]}…)"
        for message_id, got in seen.items()
        for s in got
        if s.ok and s.text in RESTARTED
    ]


RULES: tuple[Callable[[Run, dict[str, list[Seen]]], list[str]], ...] = (
    one_ack_each,
    one_end_each,
    nothing_running_after_the_end,
    nothing_running_once_the_agent_ended,
    hint_and_heartbeat,
    answers_in_order,
    quiet_while_waiting,
    no_approval_timed_out_unseen,
    few_calls_while_down,
    no_overlapping_prompts,
    nothing_posted_twice,
    one_reaction_ending_in_its_rounds_state,
    every_conversation_settles,
    no_answered_round_ended_as_unresponsive,
    no_agent_process_leaked,
    no_429_at_its_own_pace,
    nothing_refused_as_malformed,
    cards_keep_their_spacing,
    cards_follow_their_views,
    the_answer_is_what_the_agent_said,
    no_lane_starved,
    no_restart_that_never_was,
)


def transcript(run: Run) -> str:
    """The run as a person would read it: what each user said and what each got, in order."""
    seen = by_message(run.posts)
    outage = run.faults.outage
    down = f", Feishu down {outage[0]:.3f}..{outage[1]:.3f}" if outage else ""
    if run.db_outage is not None:
        db = run.db_outage
        down += f", database down {db.start:.3f}..{db.end:.3f} (a call waits {db.wait:g} s)"
    if run.restarted_at is not None:
        down += f", bridge killed and restarted at {_t(run.restarted_at):.3f}"
    if run.cluster is not None:
        down += (
            f", {run.cluster.members} bridge processes on it (leases of {run.cluster.lease:g} s)"
        )
    crowd = run.crowd
    if crowd is not None:
        down += (
            f", a crowd of {crowd.chats} chats at {crowd.calls_per_second:g} calls a second"
            f" and {crowd.per_minute} a minute to each API"
        )
    lines = [f"seed {run.seed}, style {run.style.value}{down}"]
    for sent in sorted(run.sent, key=lambda s: (s.chat, s.at)):
        plan = "" if sent.plan is None else f"  plan {[(s.after, s.kind) for s in sent.plan.steps]}"
        lines.append(f"{_t(sent.at):9.3f} >> {sent.chat} {sent.message_id}: {sent.text}{plan}")
        taken = run.taken.get(sent.message_id)
        if taken is None or _t(taken) > _t(sent.at):
            lines.append(f"{_t(taken) if taken else 'never':>9}    taken (redelivered)")
        for prompt in run.runtime.prompts:
            if prompt.text == sent.text:
                cancel = f", cancel at {_t(prompt.cancelled_at)}" if prompt.cancelled_at else ""
                ended = _t(prompt.ended) if prompt.ended is not None else None
                lines.append(f"{_t(prompt.started):9.3f}    prompt sent (ended {ended}{cancel})")
        for s in seen[sent.message_id]:
            text = s.text if len(s.text) < 90 else s.text[:87] + "..."
            failed = "" if s.ok else " (refused)"
            lines.append(f"{s.at:9.3f}    {s.op} -> {s.end:.3f}{failed}: {text}")
    return "\n".join(lines)

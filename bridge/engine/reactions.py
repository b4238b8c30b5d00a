"""The reactions on users' messages: the ack, and the states of their rounds the core asks
for (`SetReaction`), one reaction of the bot's on a message at a time.

Each message's changes are made in order by one task of its own, never by the actor that
asked: the actor hands the change over and goes on, so no answer, line or card of the chat
waits behind a reaction (the ack alone holds its chat's next post, `ACK_WAIT` at most, as it
always has). The task removes the reaction there before it adds the next, and adds only the
newest state asked for: a state superseded before its turn came is never shown. A remove
that fails leaves the old reaction and adds nothing, so a message never carries two.

Best-effort, like the ack: the calls go through the app's call budget (the ack in the hint
lane, a change in the lowest), the client's breaker skips them after a rate limit, and a
failed call is not tried again. While Feishu is known to be down a change waits for it to
come back (the ack alone may be the gate's probe). A message whose reaction this process
did not add (the ack of the process before a restart) is left as it is: its reaction's id
is not known, and a second one is not added beside it.

A change begins (removes the old reaction) only once it holds the token its new reaction
will be added with, waited for `PATIENCE` at most: a bridge busier than Feishu's reaction
API allows (every message's ack and end, hundreds a minute) leaves a reaction as it is
rather than queueing changes without end, and a removed reaction is replaced at once,
never left at none while the next waits its turn.

A message is forgotten once its reaction says how its round ended, and the oldest idle ones
past `KEPT` (a message queued behind a long round keeps its place until then).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bridge.core.delivery import Lane
from bridge.core.state import Reaction
from bridge.feishu.api import FeishuApi
from bridge.feishu.budget import CallBudget, api_of
from bridge.feishu.delivery import FeishuGate
from bridge.feishu.requests import CallTerms, Paid
from bridge.tasks import TaskTracker

log = logging.getLogger(__name__)

ACK_WAIT = 2.0  # seconds a chat's next post waits for its ack reaction, at most
KEPT = 10_000  # messages whose reaction is remembered while their rounds run, at most
PATIENCE = 15.0  # seconds a change waits for the budget before it begins, at most
_ADD_API = api_of("POST", "/open-apis/im/v1/messages/m/reactions")


@dataclass(frozen=True)
class ReactionEmoji:
    """The Feishu `emoji_type` each state shows: the received one is BRIDGE_ACK_EMOJI, the
    others are the product's (docs/user-quickstart.md shows them)."""

    received: str = "OnIt"
    waiting: str = "Alarm"
    done: str = "DONE"
    stopped: str = "CrossMark"
    fault: str = "ERROR"

    def of(self, state: Reaction) -> str:
        emoji: str = getattr(self, state.value)
        return emoji


@dataclass
class _Message:
    chat: str | None
    want: Reaction
    shown: Reaction | None = None  # what the bot's reaction on it says (None: none of ours)
    reaction_id: str | None = None
    task: asyncio.Task[bool] | None = None


class Reactions:
    def __init__(
        self,
        *,
        feishu: FeishuApi,
        gate: FeishuGate,
        emoji: ReactionEmoji,
        tasks: TaskTracker,
        kept: int = KEPT,
        budget: CallBudget | None = None,
        patience: float = PATIENCE,
    ) -> None:
        self._budget = budget
        self._patience = patience
        self._feishu = feishu
        self._gate = gate
        self._emoji = emoji
        self._tasks = tasks
        self._kept = kept
        self._messages: dict[str, _Message] = {}  # oldest first

    async def ack(self, message_id: str, chat: str | None) -> None:
        """The ack: best-effort, and never what holds a chat's posts. While Feishu is down it
        goes only as the gate's probe (else it would only fail); the chat's next post waits
        for it at most `ACK_WAIT` (a hanging call goes on alone, in its message's task)."""
        if not self._gate.probe_due():
            self._entry(message_id, chat)  # none of ours on it: a later state adds its own
            return
        task = self._want(self._entry(message_id, chat), message_id, Reaction.RECEIVED)
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=ACK_WAIT)
        if task in done and not task.cancelled() and task.exception() is None:
            self._gate.heard_back(task.result())

    def show(self, message_id: str, chat: str | None, state: Reaction) -> None:
        """Have the message's reaction say `state`, after what it says now; returns at once."""
        entry = self._messages.get(message_id)
        if entry is None:
            log.debug("reaction of %s left as it is: not added by this process", message_id)
            return
        self._want(entry, message_id, state)

    async def wait_idle(self) -> None:
        """Until every change asked for was made or given up (tests and shutdown)."""
        while running := [e.task for e in self._messages.values() if e.task and not e.task.done()]:
            await asyncio.wait(running)

    def __len__(self) -> int:
        return len(self._messages)

    # -- each message's changes, in order -------------------------------------------------

    def _entry(self, message_id: str, chat: str | None) -> _Message:
        entry = self._messages.get(message_id)
        if entry is None:
            entry = self._messages[message_id] = _Message(chat, Reaction.RECEIVED)
            if len(self._messages) > self._kept:
                self._forget_oldest()
        return entry

    def _want(self, entry: _Message, message_id: str, state: Reaction) -> asyncio.Task[bool] | None:
        entry.want = state
        if entry.task is not None and not entry.task.done():
            return entry.task  # it adds the newest state asked for when its turn comes
        drive = self._drive(message_id, entry)
        try:
            entry.task = self._tasks.spawn(
                drive, name=f"reaction:{message_id}", while_draining=True
            )
        except RuntimeError:
            drive.close()  # never started
            return None  # shutting down
        return entry.task

    async def _drive(self, message_id: str, entry: _Message) -> bool:
        """Bring the message's reaction to the newest state asked for: the old one removed,
        then the new one added. True when the last call Feishu answered took it."""
        heard = False
        while entry.want is not entry.shown:
            want = entry.want
            lane = Lane.HINT if want is Reaction.RECEIVED else Lane.REFRESH
            if entry.shown is not None and self._emoji.of(entry.shown) == self._emoji.of(want):
                entry.shown = want  # the same emoji for both states: nothing to change
                continue
            first = entry.shown is None and entry.reaction_id is None and want is Reaction.RECEIVED
            if not first:
                await self._gate.until_up()  # (the ack itself may be the gate's probe)
            terms = CallTerms(entry.chat, lane)
            held = False
            if entry.reaction_id is not None:
                if not await self._hold_add(lane, entry.chat):
                    log.debug("reaction of %s left as it is: no room for it", message_id)
                    break
                held = self._budget is not None
                heard = await self._feishu.remove_reaction(
                    message_id, entry.reaction_id, terms=terms
                )
                if not heard:
                    if held and self._budget is not None:
                        self._budget.refund(_ADD_API)
                    break  # it may still be there: never a second one beside it
                entry.shown = entry.reaction_id = None
                want = entry.want  # the newest state asked for meanwhile
            adding = CallTerms(entry.chat, lane, paid=Paid(_ADD_API)) if held else terms
            reaction_id = await self._feishu.add_reaction(
                message_id, self._emoji.of(want), terms=adding
            )
            heard = reaction_id is not None
            if not heard:
                break  # best-effort: not tried again
            entry.shown, entry.reaction_id = want, reaction_id
        if entry.want.final and self._messages.get(message_id) is entry:
            del self._messages[message_id]  # its round is over: nothing will change it again
        return heard

    async def _hold_add(self, lane: Lane, chat: str | None) -> bool:
        """The token the new reaction will be added with, waited for `patience` at most."""
        if self._budget is None:
            return True
        waited = False

        async def patience() -> None:
            nonlocal waited
            await asyncio.sleep(self._patience)
            waited = True

        return await self._budget.take_unless(
            lane, lambda: waited, patience, api=_ADD_API, chat=chat
        )

    def _forget_oldest(self) -> None:
        idle = [mid for mid, e in self._messages.items() if e.task is None or e.task.done()]
        for mid in idle[: max(1, len(self._messages) - self._kept)]:
            del self._messages[mid]

"""Carrying out `/send` and the files an answer links, and `/diff`: a file of the
conversation's workspace uploaded and posted (an image as an image), or why not; the last
round's file changes posted as code. Paths are resolved (symlinks, `..`) before the check
that they lie inside the workspace."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlparse

from bridge.core.effects import SendFile, ShowDiffs
from bridge.core.inputs import FileSent
from bridge.engine.actor import ConversationActor, terms_of
from bridge.engine.outbox import Answers, Owing
from bridge.feishu.api import FeishuApi
from bridge.feishu.errors import FeishuError
from bridge.feishu.requests import CallTerms
from bridge.feishu.resources import FILE_LIMIT, IMAGE_LIMIT, IMAGE_TYPES
from bridge.paths import within
from bridge.runtime.router import Projects
from bridge.store.port import Store

log = logging.getLogger(__name__)

MB = 1024 * 1024


class FilesOut:
    def __init__(
        self,
        *,
        feishu: FeishuApi,
        store: Store,
        routes: Projects,
        answers: Answers,
        clock: Callable[[], float],
    ) -> None:
        self._feishu = feishu
        self._store = store
        self._routes = routes
        self._answers = answers
        self._clock = clock

    async def send(self, actor: ConversationActor, work: SendFile) -> None:
        chosen = await self._store.preferences(actor.key)
        root, folder = self._routes.of(actor.key, chosen).folder(chosen)
        asked = work.path
        path = (
            Path(unquote(urlparse(asked).path)) if asked.startswith("file://") else folder / asked
        )
        target = path.resolve()
        name = target.name or asked
        result, limit = await self._post(actor, work, root, target)
        actor.feed(FileSent(work.reply_to, name, result, limit))

    async def _post(
        self, actor: ConversationActor, work: SendFile, root: Path, target: Path
    ) -> tuple[str, int]:
        refused = _refusal(root, target)
        if refused is not None:
            return refused
        if await self._store.sent(work.idempotency_key) is not None:
            return "sent", 0  # posted before a restart
        try:
            terms = terms_of(actor, work)
            message_id = await self._feishu.upload_and_reply(
                work.reply_to,
                target,
                uuid=work.idempotency_key,
                in_thread=terms.in_thread,
                terms=CallTerms.of(terms),
            )
        except (FeishuError, OSError) as exc:
            log.warning("could not post a file (%s)", exc)
            return "failed", 0
        await self._store.mark_sent(work.idempotency_key, [message_id], self._clock())
        return "sent", 0

    async def diffs(self, actor: ConversationActor, work: ShowDiffs) -> None:
        # Agent data, as code blocks; the rich answer keeps each diff whole where it fits.
        text = "\n\n".join(f"`{path}`\n\n```diff\n{diff}```" for path, diff in work.diffs)
        owing = Owing(terms_of(actor, work), work)
        await self._answers.post_answer(
            actor, work.message_id, text, work.idempotency_key, owing=owing
        )


def _resolve(folder: Path, asked: str) -> Path:
    """Where `asked` points: a file:// URI, an absolute path, or one under `folder`; with
    symlinks and `..` resolved."""
    path = Path(unquote(urlparse(asked).path)) if asked.startswith("file://") else folder / asked
    return path.resolve()


def _refusal(root: Path, target: Path) -> tuple[str, int] | None:
    """Why the file cannot go, and the limit where size is why; None when it can."""
    if not within(target, root):
        return "outside", 0
    if not target.is_file():
        return "missing", 0
    limit = IMAGE_LIMIT if target.suffix.lower() in IMAGE_TYPES else FILE_LIMIT
    if target.stat().st_size > limit:
        return "too_large", limit // MB
    return None

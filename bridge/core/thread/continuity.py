"""How a thread's conversation goes on after a takeover, a restart or a move between
instances: resumed where its agy state is in reach, else a new one given the thread's history
(the texts: :mod:`bridge.core.handover`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from bridge.core import handover
from bridge.core.prompt import history_context
from bridge.core.store.rows import ThreadRow, TurnRow
from bridge.core.thread.parts import ThreadParts
from bridge.core.turn import TurnRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Continuity:
    key: str
    parts: ThreadParts
    session_dir: Path
    # The thread was taken over from a lost instance (its notice says what is kept).
    takeover: bool
    say: Callable[[str], Awaitable[None]]

    async def reachable(self) -> bool | None:
        """Whether agy started here resumes the thread's conversation (None: it has none)."""
        return (await self._look())[0]

    async def _look(self) -> tuple[bool | None, ThreadRow, TurnRow | None]:
        """(reachable, the thread's row, its last turn). Looked at on the files only after a
        takeover, a cut-off or a move between instances (otherwise agy itself says whether it
        knows the conversation when it starts)."""
        parts = self.parts
        row = await parts.store.thread(self.key)
        if not row.conversation_id:
            return None, row, None
        last = await parts.store.last_turn(self.key)
        moved = row.conversation_instance not in (None, parts.instance)
        if not (moved or self.takeover or handover.turn_was_cut_off(last)):
            return True, row, last
        reachable = await anyio.to_thread.run_sync(
            parts.runtime.conversation_reachable, self.session_dir, row.conversation_id
        )
        return reachable, row, last

    async def carry_on(self, runner: TurnRunner) -> None:
        """Before agy starts: the conversation goes on where its state is in reach (with a
        note when its last turn was cut off); else a new one starts, given the thread's
        history (the thread is told, unless the cut-off's notice said so)."""
        parts = self.parts
        reachable, row, last = await self._look()
        if reachable is None:
            return  # no conversation: a new thread, !new, or one dropped (history given)
        if reachable:
            runner.context = handover.resume_note(last, row.conversation_id)
            if row.conversation_instance not in (None, parts.instance):
                # Its agy runs here now: no need to look at the files at every start.
                await parts.store.set_conversation(
                    self.key, row.conversation_id, instance=parts.instance
                )
            return
        await parts.store.set_conversation(self.key, None)
        runner.context = await history_context(parts.store, self.key)
        log.info(
            "the thread's conversation is out of reach here: a new one starts with its history",
            extra={"chat_thread": self.key, "conversation": row.conversation_id},
        )
        if not handover.turn_was_cut_off(last):
            await self.say(
                handover.HANDOVER_NOTICE.format(
                    name=parts.instance, previous=row.conversation_instance or "another instance"
                )
            )

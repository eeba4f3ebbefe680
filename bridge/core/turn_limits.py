"""What a turn's sandbox limits and the disk rules add to a turn (bridge.core.disk,
bridge.agy.limits): a turn refused while the disk is full, the disk watched while it runs, and
what its sandbox hit told under its answer. Kept apart from :class:`TurnRunner`, which only
calls these at their three points."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from bridge.agy.process import AgyHandle
from bridge.agy.turn import TurnEnd
from bridge.core.disk import DiskSpace, watched, workspace_bytes
from bridge.core.outcome import Classified
from bridge.core.store.rows import TurnState

log = logging.getLogger(__name__)


class TurnLimits:
    """One thread's disk rules and sandbox caps, as its turns meet them."""

    def __init__(
        self,
        key: str,
        disk: DiskSpace | None,
        workdir: Path | None,
        say: Callable[[str], Awaitable[object]],
    ):
        self.key = key
        # The disk rules, and the workspace they watch (None: no workspace to watch).
        self.disk = disk if workdir is not None else None
        self.workdir = workdir
        self._say = say

    async def may_start(self) -> bool:
        """False when the disk rules hold the thread's next turn back (the thread is told
        once; its messages wait in the inbox)."""
        if self.disk is None or self.workdir is None:
            return True
        refused = await self.disk.may_start(self.key, self.workdir)
        if refused is None:
            return True
        if refused:
            await self._say(refused)
        return False

    async def baseline(self) -> int:
        """The workspace's size before agy reads the turn (a walk, off the event loop): the
        disk watch tells the turn that writes from the others."""
        return await workspace_bytes(self.disk, self.workdir)

    async def follow(
        self,
        following: Coroutine[Any, Any, TurnEnd],
        baseline: int,
        stop: Callable[[str], None],
    ) -> TurnEnd:
        """``following`` (a turn's stream), with the disk watched beside it: a turn filling the
        disk is stopped through ``stop`` with the reason."""
        return await watched(self.disk, self.workdir, baseline, following, stop)

    async def noted(self, proc: AgyHandle, result: Classified, disk_stopped: str) -> Classified:
        """A stopped turn's leftover processes ended; the sandbox's caps it hit told."""
        try:
            notes = await proc.after_turn(interrupted=result.state is TurnState.INTERRUPTED)
        except OSError:
            log.exception("could not check the sandbox's limits", extra={"chat_thread": self.key})
            notes = []
        if disk_stopped:
            notes.insert(0, disk_stopped)
        if not notes:
            return result
        outcome = result.outcome.model_copy(update={"notes": [*result.outcome.notes, *notes]})
        return Classified(outcome, result.state)

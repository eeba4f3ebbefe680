"""What one thread's turns tell the team controls (:class:`TeamControls`), in the turn's
words: nothing at all when the bridge runs without them (tests of other parts)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bridge.agy.turn import ToolUpdate
from bridge.core.events import ThreadRef
from bridge.core.store.rows import StoredMessage
from bridge.core.team.controls import Say, TeamControls
from bridge.core.team.policy import Reading
from bridge.core.thread.turn_policy import Ask, Verdict


class TeamHooks:
    def __init__(self, team: TeamControls | None, ref: ThreadRef, say: Say):
        self.team = team
        self.ref = ref
        self._say = say

    async def prepare(self, ask: Ask) -> Reading | None:
        """Read the budgets the turn policy is about to judge ``ask`` by."""
        return await self.team.prepare(ask, self._say) if self.team is not None else None

    async def judged(
        self,
        reading: Reading | None,
        verdict: Verdict,
        messages: list[StoredMessage],
        turn_id: int,
        conversation: str | None = None,
    ) -> None:
        if self.team is not None:
            await self.team.judged(self.ref, reading, verdict, messages, turn_id, conversation)

    def on_tool(self, turn_id: int) -> Callable[[ToolUpdate], Awaitable[object]] | None:
        team, ref = self.team, self.ref
        if team is None:
            return None
        return lambda tool: team.tool_call(ref, turn_id, tool)

    async def injected(self, turn_id: int, messages: list[StoredMessage]) -> None:
        if self.team is not None:
            await self.team.injected(self.ref, turn_id, messages)

    async def ended(self, turn_id: int, state: str, error: str | None) -> None:
        if self.team is not None:
            await self.team.turn_ended(self.ref, turn_id, state, error)

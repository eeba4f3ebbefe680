"""What the console uses of the core (:class:`bridge.core.core.Core` is one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from bridge.config import Config
from bridge.core.capabilities import KnowsMembers
from bridge.core.events import (
    ApprovalChoice,
    Author,
    DecideOutcome,
    IncomingMessage,
    SubmitOutcome,
    ThreadRef,
)
from bridge.core.leases import Leases
from bridge.core.live import LiveHub
from bridge.core.schedules.scheduler import Scheduler
from bridge.core.slots import ProcessSlots
from bridge.core.store import Store
from bridge.core.team.controls import TeamControls


class Isolation(Protocol):
    def isolation_status(self) -> str: ...


class ConsoleCore(Protocol):
    @property
    def config(self) -> Config: ...

    @property
    def store(self) -> Store: ...

    @property
    def live(self) -> LiveHub: ...

    @property
    def team(self) -> TeamControls | None: ...

    @property
    def scheduler(self) -> Scheduler | None: ...

    @property
    def slots(self) -> ProcessSlots: ...

    @property
    def leases(self) -> Leases: ...

    @property
    def runtime(self) -> Isolation: ...

    @property
    def members(self) -> Mapping[str, KnowsMembers]: ...

    @property
    def threads(self) -> Mapping[str, object]: ...

    async def submit(self, message: IncomingMessage) -> SubmitOutcome: ...

    async def decide(
        self,
        thread: ThreadRef,
        handle: str,
        choice: ApprovalChoice,
        by: Author,
        reason: str = "",
    ) -> DecideOutcome: ...

"""What every thread worker shares: one of each per bridge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from anyio.abc import TaskGroup

from bridge.agy.process import ProcessOpener, open_agy
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core.events import ChatAdapter, ThreadRef
from bridge.core.leases import Leases, LocalLeases
from bridge.core.slots import ProcessSlots
from bridge.core.store import Store
from bridge.core.workspaces import Place
from bridge.metrics import Metrics


class ThreadView(Protocol):
    """What a thread's MCP servers (the chat tools) read of its worker: typed here, so that
    nothing shared needs the worker's module (which builds on this one)."""

    @property
    def ref(self) -> ThreadRef: ...

    @property
    def key(self) -> str: ...

    @property
    def adapter(self) -> ChatAdapter: ...

    @property
    def place(self) -> Place | None: ...

    @property
    def deps(self) -> CoreDeps: ...


@dataclass
class CoreDeps:
    config: Config
    store: Store
    runtime: AgyRuntime
    slots: ProcessSlots
    adapters: dict[str, ChatAdapter]
    task_group: TaskGroup
    metrics: Metrics
    # The MCP servers a thread's agy gets (the chat tools), built per worker.
    mcp_servers: Callable[[ThreadView], dict[str, Any]] | None = None
    # How agy is started (tests drive the worker with a scripted double instead).
    open_process: ProcessOpener = open_agy
    # Which threads run on this instance (every one, unless the store is shared).
    leases: Leases = field(default_factory=lambda: LocalLeases("local"))

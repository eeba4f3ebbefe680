"""What a thread's work is built from: the bridge's shared pieces, the thread's chat."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.agy.process import ProcessOpener
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core.disk import DiskSpace
from bridge.core.events import ChatAdapter
from bridge.core.signals import Marks
from bridge.core.slots import ProcessSlots
from bridge.core.store import Store
from bridge.core.thread.view import ThreadView
from bridge.metrics import Metrics


@dataclass(frozen=True)
class ThreadParts:
    config: Config
    store: Store
    runtime: AgyRuntime
    slots: ProcessSlots
    adapter: ChatAdapter
    metrics: Metrics
    marks: Marks
    open_process: ProcessOpener
    # This run of this instance (process rows, turns) and its name (conversations).
    owner: str
    instance: str
    # The MCP servers a thread's agy gets (the chat tools), built per thread.
    mcp_servers: Callable[[ThreadView], dict[str, Any]] | None = None
    # The disk rules (free-space floor, workspace cap, the store's reserve).
    disk: DiskSpace | None = None

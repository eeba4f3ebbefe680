"""What a thread's work is built from: the bridge's shared pieces, the thread's chat."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.agy.process import ProcessOpener
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core.approvals.hook_health import HookHealth
from bridge.core.disk import DiskSpace
from bridge.core.events import ChatAdapter
from bridge.core.marks import Marks
from bridge.core.slots import ProcessSlots
from bridge.core.store import Store
from bridge.core.team.controls import TeamControls
from bridge.core.thread.turn_policy import OPEN, TurnPolicy
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
    # Budgets, usage and the audit trail (docs/team-controls.md).
    team: TeamControls | None = None
    # Asked by the state machine before a turn runs (bridge/core/thread/turn_policy.py).
    policy: TurnPolicy = OPEN
    # The disk rules (free-space floor, workspace cap, the store's reserve).
    disk: DiskSpace | None = None
    # Threads held since their agy ran tools without the gate's hooks.
    hook_health: HookHealth | None = None

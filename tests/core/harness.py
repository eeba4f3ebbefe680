"""A running bridge on the agy simulator in front of a recording chat adapter, for core tests."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from bridge.app import Bridge, open_bridge
from bridge.config import build_config
from bridge.core.events import (
    AttachmentRef,
    Author,
    IncomingMessage,
    SubmitOutcome,
    ThreadRef,
)
from bridge.core.schedules.clock import Clock
from bridge.core.store import Store
from tests.doubles import Changes, RecordedReply, RecordingAdapter, signed_in

__all__ = [
    "Changes",
    "Harness",
    "RecordedReply",
    "RecordingAdapter",
    "heard_once_listening",
    "hold_after_taking",
    "running",
    "thread",
]

SIMULATOR = [sys.executable, "-m", "bridge.simulator"]
# The simulator's own settings, which tests set in the bridge's environment: agy inherits only
# an allow-list of it, so every test config passes these by name ([agy] pass_env).
SIMULATOR_ENV = [
    "AGY_SIM_HOME",
    "AGY_SIM_HELP_OMIT",
    "AGY_SIM_DRIVER_MODE",
    "AGY_SIM_SIGNED_OUT",
    "AGY_SIM_MCP_TIMEOUT",
    "AGY_SIM_STARTUP_DELAY",
    "AGY_SIM_TURN_DELAY",
    "AGY_SIM_ACCEPTS_URL",
    "AGY_SIM_INIT_LAYOUT",
    "AGY_SIM_MCP_MODE",
    "AGY_SIM_WORKSPACE_PLUGINS",
    "AGY_SIM_NO_HOOKS",
    "AGY_SIM_NO_TOOL_HOOKS",
]


def thread(name: str = "t1") -> ThreadRef:
    return ThreadRef(platform="test", channel="room", thread=name)


@dataclass
class Harness:
    bridge: Bridge
    adapter: RecordingAdapter
    tmp: Path

    async def say(
        self,
        text: str,
        *,
        where: ThreadRef | None = None,
        who: str = "alice",
        attachments: list[AttachmentRef] | None = None,
        event_id: str | None = None,
        sent_at: datetime | None = None,
    ) -> str:
        self.adapter.sent += 1
        mid = event_id or self._next_id()
        outcome = await self.bridge.core.submit(
            IncomingMessage(
                thread=where or thread(),
                event_id=mid,
                message_id=mid,
                author=Author(id=f"@{who}:test", display_name=who.title()),
                text=text,
                attachments=attachments or [],
                sent_at=sent_at,
            )
        )
        # Only a test that hands an event again (its own id) may be answered "duplicate": a
        # duplicate of a counted id is a message the test meant to send and the bridge dropped.
        allowed = (SubmitOutcome.ACCEPTED, SubmitOutcome.COMMAND)
        if event_id is not None:
            allowed = (*allowed, SubmitOutcome.DUPLICATE)
        assert outcome in allowed, f"{mid!r}: {outcome}"
        return mid

    def _next_id(self) -> str:
        """The platform's event id for the next message. Ids are the platform's, unique
        across instances: two harnesses on one shared store count apart (each counts its
        own messages, and the second one's "m1" would be the first one's duplicate)."""
        if not self.bridge.store.database.shared:
            return f"m{self.adapter.sent}"
        return f"{self.bridge.core.leases.name}-m{self.adapter.sent}"

    def flag(self, name: str) -> Path:
        return self.tmp / "flags" / name

    async def worker_gone(self, where: ThreadRef | None = None) -> None:
        key = (where or thread()).key
        with anyio.fail_after(20):
            while key in self.bridge.core.threads:
                await anyio.sleep(0.02)


def heard_once_listening(bridge: Bridge) -> anyio.Event:
    """Set once the instance listens to the others (its store's ``LISTEN`` is open). Call it
    before ``core.recover()``, which starts the listening. An instance hears nothing sent
    before then (``NOTIFY`` keeps nothing for a listener not yet there): a two-instance test
    that sends a command to an instance that has just started waits for this first, as the
    instances of a real deployment have long been listening."""
    db = bridge.store.database
    listen = db.listen
    heard = anyio.Event()

    async def listening(
        channels: Any, on_notify: Any, on_listening: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        async def caught_up() -> None:
            if on_listening is not None:
                await on_listening()
            heard.set()

        await listen(channels, on_notify, caught_up)

    db.listen = listening  # type: ignore[method-assign]
    return heard


@asynccontextmanager
async def running(
    tmp: Path,
    extra: dict[str, Any] | None = None,
    clock: Clock | None = None,
    platform: str = "test",
    adapter: RecordingAdapter | None = None,
    **agy: Any,
) -> AsyncIterator[Harness]:
    """A bridge on ``tmp`` with a recording chat (``adapter``, to keep one chat across starts),
    recovered as at a start."""
    (tmp / "flags").mkdir(exist_ok=True)
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp / "sim-home"))
    # Unsandboxed unless a test asks: these tests signal the agent through files outside its
    # workspace (the sandbox's own tests are tests/agy/test_sandbox*.py).
    settings = {
        "command": SIMULATOR,
        "init_timeout": 20,
        "stop_grace": 2,
        "isolation": "none",
        "pass_env": SIMULATOR_ENV,
        "state_dirs": [],
    }
    settings.update(agy)
    # Tests of other areas run tools freely; approvals tests turn the gate on themselves.
    raw = {
        "bridge": {"data_dir": str(tmp / "data")},
        "agy": settings,
        "approvals": {"mode": "off"},
        **(extra or {}),
    }
    config = build_config(raw, environ={})
    adapter = adapter or RecordingAdapter(platform=platform)
    async with open_bridge(config, {platform: adapter}, clock=clock) as bridge:
        await bridge.core.recover()
        yield Harness(bridge, adapter, tmp)


def hold_after_taking(*stores: Store, turns: int = 1) -> tuple[anyio.Event, anyio.Event]:
    """Every turn of the bridges of ``stores`` stops just after it has taken its messages from
    the inbox, before it runs: the first event is set once ``turns`` turns have (on whichever
    of them: instances on one PostgreSQL may run each other's threads), and the turns go on
    once the second is set. A take that finds nothing waiting is no turn: it is not held."""
    taken, go_on = anyio.Event(), anyio.Event()
    took = 0

    def hold(take_turn: Any) -> Any:
        async def held(*args: Any, **kwargs: Any) -> Any:
            nonlocal took
            result = await take_turn(*args, **kwargs)
            if result is None:
                return result
            took += 1
            if took >= turns:
                taken.set()
            await go_on.wait()
            return result

        return held

    for store in stores:
        store.take_turn = hold(store.take_turn)  # type: ignore[method-assign]
    return taken, go_on

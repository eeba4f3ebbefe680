"""A scripted agy double for the core's tests: no subprocess, no timing.

A test plays agy's side by hand (what it prints, when it exits) through :class:`ScriptedAgy`
and checks what the thread's actor does with the process.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from bridge.agy import wire
from bridge.agy.capabilities import Capabilities
from bridge.agy.process import AgyOutput, AgyStartError, ProcessExit, ProcessSpec
from bridge.app import Bridge, open_bridge
from bridge.config import build_config
from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.thread.turn_policy import TurnPolicy
from tests.doubles import RecordingAdapter


def event(obj: dict[str, Any]) -> wire.AgyEvent:
    return wire.parse_event(json.dumps(obj))


def delta(text: str) -> wire.AgyEvent:
    return event(
        {"event": "step_update", "step_update": {"step_type": "agent_response", "text_delta": text}}
    )


def result(status: str = "SUCCESS", response: str = "", error: str | None = None) -> wire.AgyEvent:
    body: dict[str, Any] = {"status": status, "response": response}
    if error is not None:
        body["error"] = error
    return event({"event": "result", "result": body})


@dataclass
class ScriptedAgy:
    """One agy process as the test plays it."""

    number: int
    spec: ProcessSpec
    conversation: str
    turns: list[list[str]] = field(default_factory=list)
    interrupted: int = 0
    closed: bool = False
    exit: ProcessExit | None = None
    _send: Any = None
    _receive: Any = None
    turn_arrived: anyio.Event = field(default_factory=anyio.Event)
    # What the worker gave the process for lines it cannot read.
    bad_line: Callable[[str], None] | None = None
    # What after_turn reports (a cap the sandbox hit), as the test sets it.
    limit_notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[AgyOutput](100)

    # --- AgyHandle ---------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return 100_000 + self.number

    @property
    def conversation_id(self) -> str:
        return self.conversation

    @property
    def alive(self) -> bool:
        return self.exit is None and not self.closed

    async def send_turn(self, blocks: list[str]) -> None:
        if not self.alive:
            raise anyio.BrokenResourceError
        self.turns.append(blocks)
        self.turn_arrived.set()
        self.turn_arrived = anyio.Event()

    async def next(self) -> AgyOutput:
        if self.exit is not None:
            return self.exit
        out: AgyOutput = await self._receive.receive()
        if isinstance(out, ProcessExit):
            self.exit = out
        return out

    async def next_batch(self) -> list[AgyOutput]:
        batch = [await self.next()]
        while self.exit is None and isinstance(batch[-1], wire.StepUpdateEvent):
            try:
                batch.append(self._receive.receive_nowait())
            except anyio.WouldBlock:
                break
            if isinstance(batch[-1], ProcessExit):
                self.exit = batch[-1]
        return batch

    async def drain(self) -> None:
        while not isinstance(await self.next(), ProcessExit):
            pass

    def interrupt(self) -> None:
        """As agy does on SIGINT: an ``interrupted`` result, then it exits."""
        self.interrupted += 1
        if self.alive:
            self.say(result(status="ERROR", error="interrupted"), ProcessExit(1, ""))

    async def after_turn(self, *, interrupted: bool) -> list[str]:
        return list(self.limit_notes)

    # --- the test's side ---------------------------------------------------------------------

    def say(self, *outputs: AgyOutput) -> None:
        for out in outputs:
            self._send.send_nowait(out)

    def die(self, code: int = 1, stderr: str = "") -> None:
        self.say(ProcessExit(code, stderr))

    async def wait_turns(self, count: int) -> list[str]:
        with anyio.fail_after(10):
            while len(self.turns) < count:
                await self.turn_arrived.wait()
        return self.turns[count - 1]


class ScriptedAgys:
    """The process opener: every start is recorded, and the test decides how it goes."""

    def __init__(self) -> None:
        self.started: list[ScriptedAgy] = []
        self.start_errors: list[AgyStartError] = []
        self._changed = anyio.Event()
        self._ids = itertools.count(1)

    @asynccontextmanager
    async def __call__(
        self, spec: ProcessSpec, on_bad_line: Callable[[str], None]
    ) -> AsyncIterator[ScriptedAgy]:
        if self.start_errors:
            raise self.start_errors.pop(0)
        argv = list(spec.argv)
        conversation = (
            argv[argv.index("--conversation") + 1]
            if "--conversation" in argv
            else f"conv-{next(self._ids)}"
        )
        agy = ScriptedAgy(len(self.started) + 1, spec, conversation, bad_line=on_bad_line)
        self.started.append(agy)
        self._touch()
        try:
            yield agy
        finally:
            agy.closed = True
            self._touch()

    def _touch(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(10):
            while not predicate():
                await self._changed.wait()

    async def nth(self, number: int) -> ScriptedAgy:
        await self.wait(lambda: len(self.started) >= number)
        return self.started[number - 1]


@dataclass
class World:
    bridge: Bridge
    adapter: RecordingAdapter
    agys: ScriptedAgys

    async def say(self, text: str, thread: str = "t1", author: Author | None = None) -> str:
        self.adapter.sent += 1
        mid = f"m{self.adapter.sent}"
        await self.bridge.core.submit(
            IncomingMessage(
                thread=ThreadRef(platform="test", channel="room", thread=thread),
                event_id=mid,
                message_id=mid,
                author=author or Author(id="@alice:test", display_name="Alice"),
                text=text,
            )
        )
        return mid


@asynccontextmanager
async def world(
    tmp_path: Path,
    sections: dict[str, Any] | None = None,
    turn_policy: TurnPolicy | None = None,
    **agy: Any,
) -> AsyncIterator[World]:
    """``agy``: the [agy] settings; ``sections``: other sections of the config."""
    # No agy state directory: the scripted agy keeps none (and a missing ~/.gemini would stop
    # the sandbox from being built).
    settings = {
        "command": ["agy"],
        "idle_timeout": 3600,
        "turn_timeout": 3600,
        "state_dirs": [],
        **agy,
    }
    config = build_config(
        {"bridge": {"data_dir": str(tmp_path / "data")}, "agy": settings, **(sections or {})},
        environ={},
    )
    adapter = RecordingAdapter()
    agys = ScriptedAgys()
    caps = Capabilities(probed=False)
    async with open_bridge(
        config, {"test": adapter}, caps=caps, open_process=agys, turn_policy=turn_policy
    ) as bridge:
        yield World(bridge, adapter, agys)


async def pre_invocation(tmp_path: Path, conversation: str) -> dict[str, Any]:
    """agy's PreInvocation call, made as the hook command makes it (to the plugin's URL)."""
    [hooks] = (tmp_path / "data" / "sessions").glob("*/.agents/plugins/*/hooks.json")
    # The URL is in the curl config file beside hooks.json (never in the command line).
    text = (hooks.parent / "PreInvocation.curl").read_text()
    url = re.search(r"http://127\.0\.0\.1:\d+/\S+/hook/PreInvocation", text)
    assert url is not None
    async with aiohttp.ClientSession() as http:
        answer = await http.post(url.group(0), json={"conversationId": conversation})
        return dict(await answer.json(content_type=None))


async def streaming_turn(w: World, text: str) -> ScriptedAgy:
    """A first message whose turn agy has taken and is streaming text into (the reply is open)."""
    await w.say(text)
    agy = await w.agys.nth(1)
    await agy.wait_turns(1)
    agy.say(delta("working"))
    await w.adapter.changes.until(lambda: w.adapter.replies and w.adapter.replies[0].deltas)
    return agy


def ref(name: str = "t1") -> ThreadRef:
    return ThreadRef(platform="test", channel="room", thread=name)

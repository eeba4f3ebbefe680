"""The thread worker's state machine, driven by a scripted agy double: no subprocess, no timing.

Each test plays agy's side by hand (what it prints, when it exits) and checks what the worker
does with the process: keep it, drain it, replace it, close it when idle or evicted, requeue
a turn it never read.
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
import pytest

from bridge.agy import wire
from bridge.agy.capabilities import Capabilities
from bridge.agy.process import AgyOutput, AgyStartError, ProcessExit, ProcessSpec
from bridge.app import Bridge, open_bridge
from bridge.config import build_config
from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.store_model import MessageState
from tests.doubles import RecordingAdapter

pytestmark = pytest.mark.anyio


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

    async def say(self, text: str, thread: str = "t1") -> str:
        self.adapter.sent += 1
        mid = f"m{self.adapter.sent}"
        await self.bridge.core.submit(
            IncomingMessage(
                thread=ThreadRef(platform="test", channel="room", thread=thread),
                event_id=mid,
                message_id=mid,
                author=Author(id="@alice:test", display_name="Alice"),
                text=text,
            )
        )
        return mid


@asynccontextmanager
async def world(
    tmp_path: Path, sections: dict[str, Any] | None = None, **agy: Any
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
    async with open_bridge(config, {"test": adapter}, caps=caps, open_process=agys) as bridge:
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


async def test_one_process_serves_turn_after_turn(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.say("one")
        agy = await w.agys.nth(1)
        await agy.wait_turns(1)
        agy.say(delta("an"), delta("swer"), result(response="answer"))
        [first] = await w.adapter.wait_finished(1)
        assert first.deltas == ["answer"], "deltas printed together reach the chat as one"
        await w.adapter.changes.until(lambda: first.closed)  # the working status is cleared
        await w.say("two")
        await agy.wait_turns(2)
        agy.say(result(response="second"))
        await w.adapter.wait_finished(2)
        assert len(w.agys.started) == 1 and agy.alive


async def test_an_idle_process_is_closed_and_the_next_message_resumes_it(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, idle_timeout=0.05) as w:
        await w.say("one")
        first = await w.agys.nth(1)
        await first.wait_turns(1)
        first.say(result(response="ok"))
        await w.agys.wait(lambda: first.closed)
        await w.say("two")
        second = await w.agys.nth(2)
        assert second.conversation == first.conversation, "resumed by id"
        assert "--conversation" in second.spec.argv


async def test_an_idle_holder_is_evicted_for_another_thread(tmp_path: Path) -> None:
    async with world(tmp_path, max_processes=1) as w:
        await w.say("a", thread="A")
        a = await w.agys.nth(1)
        await a.wait_turns(1)
        a.say(result(response="done"))
        await w.adapter.wait_finished(1)
        await w.say("b", thread="B")
        b = await w.agys.nth(2)
        assert a.closed, "A's idle process made room for B"
        await b.wait_turns(1)
        b.say(result(response="done too"))
        await w.adapter.wait_finished(2)


async def test_a_restart_request_replaces_the_idle_process(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.say("one")
        first = await w.agys.nth(1)
        await first.wait_turns(1)
        first.say(result(response="ok"))
        await w.adapter.wait_finished(1)
        await w.say("!model other-model")
        second = await w.agys.nth(2)
        assert first.closed
        argv = list(second.spec.argv)
        assert argv[argv.index("--model") + 1] == "other-model"


async def test_stop_interrupts_then_the_next_turn_gets_a_fresh_process(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        first = await streaming_turn(w, "long job")
        await w.say("!stop")
        [stopped] = await w.adapter.wait_finished(1)
        assert first.interrupted == 1
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert stopped.outcome.error is None
        assert stopped.outcome.notes == ["Stopped by Alice (@alice:test)."]
        await w.agys.wait(lambda: first.closed)
        await w.say("again")
        second = await w.agys.nth(2)
        assert second.conversation == first.conversation
        await second.wait_turns(1)


async def test_after_an_error_result_the_dying_process_is_not_given_the_next_turn(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        await w.say("one")
        first = await w.agys.nth(1)
        await first.wait_turns(1)
        await w.say("queued meanwhile")
        first.say(result(status="ERROR", error="Individual quota reached"))
        [failed] = await w.adapter.wait_finished(1)
        assert failed.outcome is not None and failed.outcome.error == "Individual quota reached"
        first.die()
        second = await w.agys.nth(2)
        assert len(first.turns) == 1, "the queued message went to the next process"
        assert "queued meanwhile" in (await second.wait_turns(1))[0]


async def test_a_turn_agy_never_read_is_requeued_once(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.say("hello")
        first = await w.agys.nth(1)
        await first.wait_turns(1)
        first.die(2, "panic: going away")
        second = await w.agys.nth(2)
        assert "hello" in (await second.wait_turns(1))[0]
        assert not w.adapter.replies, "nothing was shown for the turn agy never read"
        second.die(2, "panic: again")
        [failed] = await w.adapter.wait_finished(1)
        assert failed.outcome is not None and "panic: again" in (failed.outcome.error or "")
        rows = await w.bridge.store.running_turns()
        assert rows == []
        assert await w.bridge.store.pending(ref().key) == []


async def test_an_injection_agy_never_read_goes_back_to_the_inbox(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        await w.say("late")
        reply = await pre_invocation(tmp_path, agy.conversation)
        assert "late" in json.dumps(reply)
        agy.die(2, "panic: after the hook")  # before any next step: the reply was never read
        second = await w.agys.nth(2)
        assert "late" in (await second.wait_turns(1))[0]
        states = [m.state for m in await w.bridge.store.pending(ref().key)]
        assert states == []  # taken again by the new turn, not left injected


async def test_a_message_during_a_turn_waits_as_pending_and_becomes_the_next_turn(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        await w.say("one")
        agy = await w.agys.nth(1)
        await agy.wait_turns(1)
        await w.say("two")
        [waiting] = await w.bridge.store.pending(ref().key)
        assert waiting.state is MessageState.PENDING
        agy.say(result(response="first"))
        assert "two" in (await agy.wait_turns(2))[0]
        agy.say(result(response="second"))
        await w.adapter.wait_finished(2)
        assert [t.state for t in await w.bridge.store.running_turns()] == []


async def until_idle(w: World, key: str) -> None:
    """Until the thread's worker has decided nothing waits and gone idle with its process."""
    with anyio.fail_after(10):
        while not ((holder := w.bridge.core.slots._holders.get(key)) and holder.idle):
            await anyio.sleep(0.01)


async def test_an_injection_reported_lost_after_its_turn_becomes_the_next_turn(
    tmp_path: Path,
) -> None:
    """The listener may learn only after the turn ended that agy never read a hook answer (it
    came past the deadline); the messages it carried go back to the inbox and are taken
    without waiting for someone to write again."""
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        await w.say("late")
        assert "late" in json.dumps(await pre_invocation(tmp_path, agy.conversation))
        agy.say(result(response="first"))
        await w.adapter.wait_finished(1)
        await until_idle(w, ref().key)
        # What the listener calls then (tests/agy/test_listener.py shows when it does).
        await w.bridge.core.threads[ref().key].work._injection_lost()
        assert "late" in (await agy.wait_turns(2))[0]


async def test_the_hook_flag_is_raised_only_while_a_turn_runs(tmp_path: Path) -> None:
    """Only a turn makes hook calls: a message between turns is the next turn's, with no flag
    for the hook (no file written), while one during a turn raises it for the next call."""
    async with world(tmp_path) as w:
        await w.say("one")
        agy = await w.agys.nth(1)
        await agy.wait_turns(1)
        [flag] = (tmp_path / "data" / "sessions").glob("*/.agents/plugins/*")
        flag = flag / "pending"
        assert not flag.exists()
        await w.say("during")
        assert flag.exists(), "a message during a turn calls the hook in"
        agy.say(result(response="first"))
        assert "during" in (await agy.wait_turns(2))[0]
        assert not flag.exists(), "the turn that took it lowered the flag"
        agy.say(result(response="second"))
        await w.adapter.wait_finished(2)
        await until_idle(w, ref().key)
        await w.say("between")
        assert not flag.exists(), "between turns the next turn takes the message"
        assert "between" in (await agy.wait_turns(3))[0]
        agy.say(result(response="third"))
        await w.adapter.wait_finished(3)


async def test_a_shutdown_mid_turn_leaves_what_waits_for_the_next_start(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        first = await streaming_turn(w, "one")
        await w.say("late")  # waits: agy has made no hook call since
    assert first.interrupted == 1
    assert len(w.agys.started) == 1, "no new agy (nor turn) for a message once the bridge stops"
    async with world(tmp_path) as again:
        await again.bridge.core.recover()
        agy = await again.agys.nth(1)
        blocks = await agy.wait_turns(1)
        assert "late" in "\n".join(blocks), "the waiting message runs at the next start"
        agy.say(result(response="done"))
        await again.adapter.wait_finished(1)

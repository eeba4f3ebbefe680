"""The live reply's coalescing, splitting and final text, against a recording outbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from bridge.chat.matrix.format import Limits, Renderer
from bridge.chat.matrix.pacing import Priority
from bridge.chat.matrix.reply import (
    MatrixLiveReply,
    ReplyTuning,
    SendFailed,
    tool_line,
)
from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome

pytestmark = pytest.mark.anyio

ROOM = ThreadRef(platform="matrix", channel="!room:x")


@dataclass
class FakeOutbox:
    """Records every call; the current body of each message is kept like a client would."""

    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    bodies: dict[str, str] = field(default_factory=dict)
    sent: list[dict[str, Any]] = field(default_factory=list)
    fail_edits: bool = False
    changed: anyio.Event = field(default_factory=anyio.Event)

    def _record(self, kind: str, target: str, payload: Any) -> None:
        self.calls.append((kind, target, payload))
        self.changed.set()
        self.changed = anyio.Event()

    def encrypts(self, room_id: str) -> bool:
        return False

    async def send(
        self, room_id: str, content: dict[str, Any], priority: Priority = Priority.ORDINARY
    ) -> str:
        event_id = f"$m{len(self.sent)}"
        self.sent.append(content)
        self.bodies[event_id] = content["body"]
        self._record("send", event_id, content)
        return event_id

    async def edit(
        self,
        room_id: str,
        event_id: str,
        new_content: dict[str, Any],
        priority: Priority = Priority.ORDINARY,
    ) -> None:
        if self.fail_edits:
            raise SendFailed("M_FORBIDDEN")
        self.bodies[event_id] = new_content["body"]
        self._record("edit", event_id, new_content)

    async def redact(
        self, room_id: str, event_id: str, priority: Priority = Priority.ORDINARY
    ) -> None:
        self.bodies.pop(event_id, None)
        self._record("redact", event_id, None)

    async def typing(self, room_id: str, busy: bool, timeout_ms: int) -> None:
        self._record("typing", room_id, busy)

    async def notice(self, room_id: str, text: str, thread_root: str = "") -> None:
        self._record("notice", room_id, text)

    def count(self, kind: str) -> int:
        return sum(1 for call in self.calls if call[0] == kind)

    async def wait_for(self, predicate: Any) -> None:
        with anyio.fail_after(10):
            while not predicate(self):
                await self.changed.wait()


TUNING = ReplyTuning(edit_interval=0.05, max_edits=5, typing_refresh=0.05)


async def _reply(
    outbox: FakeOutbox,
    tg: Any,
    *,
    thread: ThreadRef = ROOM,
    reply_to: str | None = "$question",
    tuning: ReplyTuning = TUNING,
) -> MatrixLiveReply:
    sent: list[str] = []
    reply = MatrixLiveReply(
        outbox, Renderer(), thread, reply_to, tuning=tuning, on_sent=sent.append
    )
    await reply.start(tg)
    return reply


async def test_appends_become_one_message_and_coalesced_edits() -> None:
    outbox = FakeOutbox()
    async with anyio.create_task_group() as tg:
        reply = await _reply(outbox, tg)
        await reply.append("Hello")
        await outbox.wait_for(lambda o: o.count("send") == 1)
        for n in range(50):
            await reply.append(f" {n}")
        await reply.finish(TurnOutcome(final_text="Hello, **done**."))
    assert outbox.count("send") == 1
    first = outbox.sent[0]
    assert first["body"] == "Hello"
    assert first["m.relates_to"] == {"m.in_reply_to": {"event_id": "$question"}}
    # 50 appends, a handful of edits at most: the budget plus the final edit.
    assert 1 <= outbox.count("edit") <= TUNING.max_edits + 1
    assert outbox.bodies == {"$m0": "Hello, **done**."}
    final = outbox.calls[-2]
    assert final[0] == "edit"
    assert "<strong>done</strong>" in final[2]["formatted_body"]
    assert outbox.calls[0] == ("typing", ROOM.channel, True)
    assert outbox.calls[-1] == ("typing", ROOM.channel, False)


async def test_edit_budget_leaves_the_last_word_to_finish() -> None:
    outbox = FakeOutbox()
    tuning = ReplyTuning(edit_interval=0.0, max_edits=3, typing_refresh=10)
    async with anyio.create_task_group() as tg:
        reply = await _reply(outbox, tg, tuning=tuning)
        for n in range(20):
            await reply.append(f"chunk{n} ")
            await outbox.wait_for(lambda o, n=n: f"chunk{n}" in "".join(o.bodies.values()))
            if outbox.count("edit") >= 3:
                break
        for n in range(20, 30):
            await reply.append(f"chunk{n} ")
            await anyio.sleep(0.01)
        assert outbox.count("edit") == 3
        await reply.finish(TurnOutcome(final_text="all of it"))
    assert outbox.count("edit") == 4
    assert outbox.bodies["$m0"] == "all of it"


async def test_a_long_stream_continues_in_new_messages() -> None:
    outbox = FakeOutbox()
    tuning = ReplyTuning(edit_interval=0.0, limits=Limits(text_bytes=1_600))
    words = [f"word{n}" for n in range(600)]
    async with anyio.create_task_group() as tg:
        thread = ROOM.model_copy(update={"thread": "$root"})
        reply = await _reply(outbox, tg, thread=thread, tuning=tuning)
        for word in words:
            await reply.append(word + " ")
        await outbox.wait_for(lambda o: o.count("send") >= 2)
        text = " ".join(words)
        await reply.finish(TurnOutcome(final_text=text))
    bodies = [outbox.bodies[f"$m{n}"] for n in range(len(outbox.sent))]
    assert len(bodies) >= 3
    assert " ".join(bodies) == text
    # The messages that filled up while streaming kept their place.
    assert outbox.count("redact") == 0
    # Every message of a threaded reply stays in the thread.
    for content in outbox.sent:
        assert content["m.relates_to"]["rel_type"] == "m.thread"
        assert content["m.relates_to"]["event_id"] == "$root"


async def test_a_shorter_final_text_removes_surplus_messages() -> None:
    outbox = FakeOutbox()
    tuning = ReplyTuning(edit_interval=0.0, limits=Limits(text_bytes=1_600))
    async with anyio.create_task_group() as tg:
        reply = await _reply(outbox, tg, tuning=tuning)
        await reply.append("x " * 2000)
        await outbox.wait_for(lambda o: o.count("send") >= 2)
        await reply.finish(TurnOutcome(final_text="short"))
    assert list(outbox.bodies.values()) == ["short"]
    assert outbox.count("redact") >= 1


async def test_tool_lines_show_while_working_and_go_at_the_end() -> None:
    outbox = FakeOutbox()
    async with anyio.create_task_group() as tg:
        reply = await _reply(outbox, tg)
        await reply.append("Looking.")
        await reply.tool(ToolActivity(name="run_command", summary="ls -la", state="ACTIVE"))
        await outbox.wait_for(lambda o: "ls -la" in o.bodies.get("$m0", ""))
        await reply.tool(ToolActivity(name="run_command", summary="ls -la", state="DONE"))
        await outbox.wait_for(lambda o: "✅" in o.bodies.get("$m0", ""))
        assert outbox.bodies["$m0"].count("ls -la") == 1
        await reply.finish(TurnOutcome(final_text="Found it."))
    assert outbox.bodies["$m0"] == "Found it."


async def test_only_the_latest_tool_lines_are_shown() -> None:
    outbox = FakeOutbox()
    tuning = ReplyTuning(edit_interval=0.0, max_tool_lines=2)
    async with anyio.create_task_group() as tg:
        reply = await _reply(outbox, tg, tuning=tuning)
        for n in range(5):
            await reply.tool(ToolActivity(name="view_file", summary=f"file{n}.py", state="DONE"))
        await outbox.wait_for(lambda o: "file4.py" in o.bodies.get("$m0", ""))
        body = outbox.bodies["$m0"]
        assert "file2.py" not in body
        assert "3 earlier" in body
        await reply.finish(TurnOutcome(final_text="ok"))


async def test_finish_without_any_stream_sends_the_outcome() -> None:
    outbox = FakeOutbox()
    async with anyio.create_task_group() as tg:
        reply = await _reply(outbox, tg)
        await reply.finish(TurnOutcome(error="Individual quota reached"))
        await reply.finish(TurnOutcome(final_text="ignored: finished twice"))
        await reply.append("ignored: after finish")
    assert list(outbox.bodies.values()) == ["⚠️ agy: Individual quota reached"]


async def test_failed_edits_do_not_break_the_turn() -> None:
    outbox = FakeOutbox()
    async with anyio.create_task_group() as tg:
        reply = await _reply(outbox, tg)
        await reply.append("first")
        await outbox.wait_for(lambda o: o.count("send") == 1)
        outbox.fail_edits = True
        await reply.append(" more")
        await reply.finish(TurnOutcome(final_text="first more"))
    assert ("typing", ROOM.channel, False) in outbox.calls
    # The room is told that the end of the answer is missing.
    [notice] = [text for kind, _, text in outbox.calls if kind == "notice"]
    assert "could not be sent" in notice


def test_tool_line_quotes_backticks_safely() -> None:
    line = tool_line(
        ToolActivity(name="run_command", summary="echo `date`", state="ERROR", error="exit 1")
    )
    assert line == "🔧 `run_command` `` echo `date` `` ❌ exit 1"

"""agy's PreInvocation hook as the turn runner answers it: who may take what, and the pending flag
that lets hook calls skip the bridge while nothing waits. Scripted agy (``test_worker``): no
subprocess, no timing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.agy.plugin import pending_flag
from bridge.core.events import AttachmentRef, Author, IncomingMessage, Reaction
from bridge.core.store.rows import MessageState
from bridge.core.thread.commands import MessageStored
from bridge.metrics import PREFIX
from tests.core.scripted import World, delta, pre_invocation, ref, result, streaming_turn, world
from tests.doubles import file_message

pytestmark = pytest.mark.anyio


def flag(w: World) -> Path:
    place = w.bridge.core.threads[ref().key].place
    assert place is not None
    return pending_flag(place.session_dir)


def injected(w: World) -> float:
    value = w.bridge.metrics.registry.get_sample_value(
        PREFIX + "injections_total", {"platform": "test"}
    )
    return 0.0 if value is None else value


def bobs_file() -> IncomingMessage:
    """Bob writes while a turn runs, with a file (source ``src-1``) still to be fetched."""
    return file_message(ref(), Author(id="@bob:test", display_name="Bob"), "notes.txt", "src-1")


async def states(w: World) -> list[str]:
    rows = await w.bridge.store._db.fetch("SELECT state FROM inbox ORDER BY id")
    return [r["state"] for r in rows]


async def test_the_pending_flag_is_up_exactly_while_a_message_waits(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        assert not flag(w).exists(), "the turn took everything"
        await w.say("late")
        assert flag(w).exists(), "a message waits: the next hook call must reach the bridge"
        await pre_invocation(tmp_path, "a-subagents-conversation")
        assert flag(w).exists(), "a subagent's call took nothing"
        await pre_invocation(tmp_path, agy.conversation)
        assert not flag(w).exists(), "the thread's own call took it"
        await w.bridge.core.threads[ref().key].work._injection_lost()
        assert flag(w).exists(), "the message is back in the inbox: the flag is up again"
        agy.say(result(response="done"))
        assert "late" in (await agy.wait_turns(2))[0]
        assert not flag(w).exists()
        agy.say(result(response="done too"))
        await w.adapter.wait_finished(2)


async def test_a_subagents_hook_call_takes_nothing(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        late = await w.say("for the main agent")
        answer = await pre_invocation(tmp_path, "a-subagents-conversation")
        assert "for the main agent" not in json.dumps(answer)
        assert answer.get("injectSteps", answer.get("inject_steps")) in (None, [])
        assert [m.text for m in await w.bridge.store.pending(ref().key)] == ["for the main agent"]
        assert injected(w) == 0
        answer = await pre_invocation(tmp_path, agy.conversation)
        assert "for the main agent" in json.dumps(answer)
        assert injected(w) == 1
        await w.adapter.changes.until(lambda: (late, Reaction.INJECTED) in w.adapter.reactions)
        agy.say(delta("read"), result(response="done"))
        await w.adapter.wait_finished(1)


async def test_no_hook_call_takes_anything_between_turns(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        agy.say(result(response="done"))
        [reply] = await w.adapter.wait_finished(1)
        await w.adapter.changes.until(lambda: reply.closed)
        # A message stored straight into the inbox (its worker not woken): only a turn takes it.
        await w.bridge.store.add_message(
            IncomingMessage(
                thread=ref(),
                event_id="e-direct",
                message_id="m-direct",
                author=Author(id="@bob:test", display_name="Bob"),
                text="between turns",
            )
        )
        answer = await pre_invocation(tmp_path, agy.conversation)
        assert "between turns" not in json.dumps(answer)
        assert await states(w) == [MessageState.IN_TURN, MessageState.PENDING]
        assert injected(w) == 0


async def test_injection_lost_puts_the_messages_back_and_marks_them_queued(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        late = await w.say("late")
        first = await pre_invocation(tmp_path, agy.conversation)
        assert "late" in json.dumps(first)
        await w.adapter.changes.until(lambda: (late, Reaction.INJECTED) in w.adapter.reactions)
        worker = w.bridge.core.threads[ref().key]
        await worker.work._injection_lost()  # the listener could not hand that answer to agy
        assert await states(w) == [MessageState.IN_TURN, MessageState.PENDING]
        await w.adapter.changes.until(
            lambda: [r for m, r in w.adapter.reactions if m == late][-1:] == [Reaction.QUEUED]
        )
        await worker.work._injection_lost()  # once: nothing more to put back
        assert await states(w) == [MessageState.IN_TURN, MessageState.PENDING]
        again = await pre_invocation(tmp_path, agy.conversation)
        assert "late" in json.dumps(again), "the next hook call takes it again"
        assert await states(w) == [MessageState.IN_TURN, MessageState.INJECTED]
        agy.say(delta("read it"), result(response="done"))
        await w.adapter.wait_finished(1)
        assert len(agy.turns) == 1, "read in the first turn: no second turn for it"


async def test_an_injection_read_by_agy_is_not_put_back_when_it_then_exits(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        await w.say("late")
        await pre_invocation(tmp_path, agy.conversation)
        agy.say(delta("read it"))  # agy went on: it read the hook's reply
        await w.adapter.changes.until(lambda: "read it" in "".join(w.adapter.replies[0].deltas))
        agy.die(2, "panic: later")
        await w.adapter.wait_finished(1)
        assert await states(w) == [MessageState.IN_TURN, MessageState.INJECTED]
        assert await w.bridge.store.pending(ref().key) == []


async def test_a_message_whose_files_are_not_saved_is_not_injected_nor_overtaken(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        w.adapter.files["src-1"] = b"file body"
        agy = await streaming_turn(w, "one")
        store = w.bridge.store
        # Stored straight into the inbox: nothing fetches its file before the next turn.
        for n, attachments in enumerate(
            ([AttachmentRef(name="notes.txt", source="src-1")], []), start=1
        ):
            await store.add_message(
                IncomingMessage(
                    thread=ref(),
                    event_id=f"e-{n}",
                    message_id=f"m-{n}",
                    author=Author(id="@bob:test", display_name="Bob"),
                    text=f"late {n}",
                    attachments=attachments,
                )
            )
        # As a submission does: the worker is told a message joined its inbox (it reads the
        # inbox after a turn only when told).
        w.bridge.core.threads[ref().key].tell(MessageStored())
        answer = await pre_invocation(tmp_path, agy.conversation)
        assert "late" not in json.dumps(answer)
        assert [m.text for m in await store.pending(ref().key)] == ["late 1", "late 2"]
        agy.say(result(response="done"))
        blocks = await agy.wait_turns(2)
        text = "\n".join(blocks)
        assert "late 1" in text and "late 2" in text and "notes.txt" in text
        agy.say(result(response="done too"))
        await w.adapter.wait_finished(2)


async def test_a_busy_threads_new_file_is_saved_at_once_and_then_injected(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.adapter.files["src-1"] = b"file body"
        agy = await streaming_turn(w, "one")
        store = w.bridge.store
        await w.bridge.core.submit(bobs_file())
        # Saved in the background while the turn runs, so the next hook call can take it.
        with anyio.fail_after(10):
            while not all(m.ready for m in await store.pending(ref().key)):
                await anyio.sleep(0.01)
        [waiting] = await store.pending(ref().key)
        assert waiting.saved is not None and len(waiting.saved) == 1
        saved = Path(waiting.saved[0])
        assert saved.read_bytes() == b"file body"
        assert flag(w).exists(), "once saved, the message may be injected: the flag is up"
        answer = json.dumps(await pre_invocation(tmp_path, agy.conversation))
        assert "see the file" in answer and saved.name in answer
        assert await store.pending(ref().key) == []
        agy.say(delta("read"), result(response="done"))
        await w.adapter.wait_finished(1)


async def test_a_thread_is_a_conversation_once_it_has_a_message(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        assert not await w.bridge.core.is_conversation(ref())
        await streaming_turn(w, "one")
        assert await w.bridge.core.is_conversation(ref())
        assert not await w.bridge.core.is_conversation(ref("other"))


async def test_a_lost_second_injection_leaves_the_first_unconfirmed_until_agy_reads_on(
    tmp_path: Path,
) -> None:
    """Two hook calls in a row, each taking one message, agy reading neither yet; the second
    answer is lost; then agy exits: both messages go back to the inbox (the first was never
    confirmed read either), and the next turn has both."""
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        await w.say("first late")
        assert "first late" in json.dumps(await pre_invocation(tmp_path, agy.conversation))
        await w.say("second late")
        assert "second late" in json.dumps(await pre_invocation(tmp_path, agy.conversation))
        await w.bridge.core.threads[ref().key].work._injection_lost()
        assert await states(w) == [
            MessageState.IN_TURN,
            MessageState.INJECTED,
            MessageState.PENDING,
        ]
        agy.die(2, "panic: before reading either")
        second = await w.agys.nth(2)
        blocks = "\n".join(await second.wait_turns(1))
        assert "first late" in blocks and "second late" in blocks


async def test_an_injection_lost_twice_is_put_back_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.core")
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        await w.say("late")
        await pre_invocation(tmp_path, agy.conversation)
        worker = w.bridge.core.threads[ref().key]
        await worker.work._injection_lost()
        await worker.work._injection_lost()
        never_read = [r.getMessage() for r in caplog.records if "never read" in r.getMessage()]
        assert never_read == ["agy never read 1 injected message(s); they wait for the next turn"]


async def test_a_background_fetch_of_a_message_already_taken_does_nothing(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await streaming_turn(w, "one")
        worker = w.bridge.core.threads[ref().key]
        await worker.work.fetch_in_background(999)  # not pending (taken, or never stored)
        [row] = await w.bridge.store._db.fetch("SELECT saved_json FROM inbox")
        assert row["saved_json"] is None


async def test_a_file_saved_after_a_hook_call_passed_it_by_raises_the_flag_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with world(tmp_path) as w:
        w.adapter.files["src-1"] = b"file body"
        fetching, release = anyio.Event(), anyio.Event()
        original = w.adapter.fetch_attachment

        async def slow_fetch(*args: Any) -> int:
            fetching.set()
            await release.wait()
            return await original(*args)

        monkeypatch.setattr(w.adapter, "fetch_attachment", slow_fetch)
        agy = await streaming_turn(w, "one")
        await w.bridge.core.submit(bobs_file())
        with anyio.fail_after(10):
            await fetching.wait()
        # A hook call while the file is still on its way: it takes nothing, and lowers the flag.
        assert "see the file" not in json.dumps(await pre_invocation(tmp_path, agy.conversation))
        assert not flag(w).exists()
        release.set()
        with anyio.fail_after(10):
            while not flag(w).exists():
                await anyio.sleep(0.01)
        assert "see the file" in json.dumps(await pre_invocation(tmp_path, agy.conversation))
        agy.say(delta("read"), result(response="done"))
        await w.adapter.wait_finished(1)

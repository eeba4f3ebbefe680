"""A store write or a chat call failing inside the turn loop: the thread is told, the failure is
counted and logged with the thread, and nothing is lost or repeated. Scripted agy
(``test_worker``): no subprocess, no timing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.core.events import Reaction, TurnOutcome
from bridge.core.store.rows import MessageState, StoreError
from bridge.metrics import PREFIX
from tests.core.scripted import World, delta, pre_invocation, ref, result, streaming_turn, world

pytestmark = pytest.mark.anyio
DISK_FULL = "could not write to the store: disk full"


def errors(w: World, kind: str) -> float:
    value = w.bridge.metrics.registry.get_sample_value(PREFIX + "errors_total", {"kind": kind})
    return 0.0 if value is None else value


def fail(monkeypatch: pytest.MonkeyPatch, obj: Any, method: str) -> list[Any]:
    """``obj.method`` raises StoreError from now on; the calls are recorded."""
    calls: list[Any] = []

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        raise StoreError(DISK_FULL)

    monkeypatch.setattr(obj, method, refuse)
    return calls


def logged(caplog: pytest.LogCaptureFixture, level: int, text: str) -> logging.LogRecord:
    """The one record at ``level`` whose message is ``text``, carrying the thread."""
    found = [r for r in caplog.records if r.levelno == level and r.getMessage() == text]
    assert found, [r.getMessage() for r in caplog.records]
    record = found[0]
    assert getattr(record, "chat_thread", None) == ref().key
    return record


async def test_a_turn_the_store_cannot_record_is_told_and_its_answer_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.core")
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        fail(monkeypatch, w.bridge.store, "finish_turn")
        agy.say(result(response="the answer"))
        [reply] = await w.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.final_text == "the answer"
        notice = await w.adapter.wait_notice("could not record this turn")
        assert "the answer above is all there is of it" in notice
        assert errors(w, "store") == 1
        logged(caplog, logging.ERROR, f"could not record a turn: {DISK_FULL}")
        monkeypatch.undo()
        # The thread goes on.
        await w.say("two")
        await agy.wait_turns(2)
        agy.say(result(response="second"))
        await w.adapter.wait_finished(2)


async def test_a_lost_injection_the_store_cannot_put_back_is_logged_and_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.core")
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        late = await w.say("late")
        await pre_invocation(tmp_path, agy.conversation)
        calls = fail(monkeypatch, w.bridge.store, "requeue_injected")
        await w.bridge.core.threads[ref().key].work._injection_lost()
        assert len(calls) == 1
        logged(caplog, logging.ERROR, f"could not requeue messages: {DISK_FULL}")
        assert not [r for r in caplog.records if "never read" in r.getMessage()]
        monkeypatch.undo()
        rows = await w.bridge.store._db.fetch("SELECT state FROM inbox ORDER BY id")
        assert [r["state"] for r in rows] == [MessageState.IN_TURN, MessageState.INJECTED]
        agy.say(delta("read"), result(response="done"))
        await w.adapter.wait_finished(1)
        marks = [r for m, r in w.adapter.reactions if m == late]
        assert Reaction.QUEUED in marks and marks[-1] is Reaction.INJECTED


async def test_when_agy_cannot_start_and_the_store_cannot_fail_the_messages_the_thread_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from bridge.agy.process import AgyStartError

    caplog.set_level(logging.INFO, logger="bridge.core")
    async with world(tmp_path) as w:
        w.agys.start_errors.append(AgyStartError("missing", "agy is not installed"))
        fail(monkeypatch, w.bridge.store, "take_pending")
        await w.say("one")
        notice = await w.adapter.wait_notice("agy is not installed")
        assert notice.startswith("⚠️ ")
        assert errors(w, "agy_start") == 1
        logged(caplog, logging.ERROR, f"could not mark messages failed: {DISK_FULL}")
        assert not [r for _, r in w.adapter.reactions if r is Reaction.FAILED]


async def test_when_agy_cannot_start_the_waiting_messages_are_marked_failed(
    tmp_path: Path,
) -> None:
    from bridge.agy.process import AgyStartError
    from tests.doubles import ALICE, file_message

    async with world(tmp_path) as w:
        w.agys.start_errors.append(AgyStartError("missing", "agy is not installed"))
        # Its file not saved yet (that happens when a turn takes it): it fails all the same.
        with_file = file_message(ref(), ALICE, "a.txt", "nowhere")
        await w.bridge.core.submit(with_file)
        await w.adapter.wait_notice("agy is not installed")
        await w.adapter.changes.until(lambda: ("m-file", Reaction.FAILED) in w.adapter.reactions)
        rows = await w.bridge.store._db.fetch("SELECT state, turn_id FROM inbox")
        assert [(r["state"], r["turn_id"]) for r in rows] == [(MessageState.FAILED, None)]
        assert await w.bridge.store.pending(ref().key) == []
        assert errors(w, "agy_start") == 1


class FailingFinish:
    """A reply whose last call fails (the chat service is down at the end of the turn)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def finish(self, outcome: TurnOutcome) -> None:
        raise ConnectionError("chat service down")


async def test_an_answer_the_chat_cannot_take_is_counted_and_the_turn_still_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from contextlib import asynccontextmanager

    caplog.set_level(logging.INFO, logger="bridge.core")
    async with world(tmp_path) as w:
        original = w.adapter.open_reply

        @asynccontextmanager
        async def open_reply(*args: Any, **kwargs: Any) -> Any:
            async with original(*args, **kwargs) as reply:
                yield FailingFinish(reply)

        monkeypatch.setattr(w.adapter, "open_reply", open_reply)
        agy = await streaming_turn(w, "one")
        agy.say(result(response="lost answer"))
        await w.adapter.changes.until(lambda: w.adapter.replies[0].closed)
        assert errors(w, "chat_post") == 1
        logged(caplog, logging.ERROR, "could not post the end of a turn")
        assert await w.bridge.store.running_turns() == []
        rows = await w.bridge.store._db.fetch("SELECT state, response FROM turns")
        assert [(r["state"], r["response"]) for r in rows] == [("done", "lost answer")]


async def test_a_notice_the_chat_cannot_take_is_logged_with_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from bridge.agy.process import AgyStartError

    caplog.set_level(logging.INFO, logger="bridge.core")
    async with world(tmp_path) as w:

        async def down(*args: Any) -> None:
            raise ConnectionError("chat down")

        monkeypatch.setattr(w.adapter, "post_message", down)
        await w.say("!help")  # the core's own notice
        record = logged(caplog, logging.ERROR, "could not post a notice")
        assert record.exc_info is not None and record.name == "bridge.core.router"
        w.agys.start_errors.append(AgyStartError("missing", "agy is not installed"))
        first = await w.say("one")  # the worker's notice
        await w.adapter.changes.until(lambda: (first, Reaction.FAILED) in w.adapter.reactions)
        records = [r for r in caplog.records if r.getMessage() == "could not post a notice"]
        assert {r.name for r in records} == {"bridge.core.router", "bridge.core.thread.work"}
        assert all(getattr(r, "chat_thread", None) == ref().key for r in records)
        assert all(r.exc_info is not None and r.levelno == logging.ERROR for r in records)


async def test_a_stop_while_the_answer_is_being_posted_finds_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextlib import asynccontextmanager

    async with world(tmp_path) as w:
        posting, release = anyio.Event(), anyio.Event()
        original = w.adapter.open_reply

        class SlowFinish:
            def __init__(self, inner: Any) -> None:
                self._inner = inner

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

            async def finish(self, outcome: TurnOutcome) -> None:
                posting.set()
                await release.wait()
                await self._inner.finish(outcome)

        @asynccontextmanager
        async def open_reply(*args: Any, **kwargs: Any) -> Any:
            async with original(*args, **kwargs) as reply:
                yield SlowFinish(reply)

        monkeypatch.setattr(w.adapter, "open_reply", open_reply)
        agy = await streaming_turn(w, "one")
        agy.say(result(response="the answer"))
        try:
            with anyio.fail_after(10):
                await posting.wait()
            assert not w.bridge.core.threads[ref().key].busy
            await w.say("!stop")
            assert await w.adapter.wait_notice("Nothing is running") == (
                "Nothing is running in this thread."
            )
            assert agy.interrupted == 0
        finally:
            release.set()  # the turn's end is shielded: it must not wait forever on a failure
        [reply] = await w.adapter.wait_finished(1)
        assert reply.outcome is not None and not reply.outcome.interrupted

"""What each turn leaves behind: its metrics, its row in the store, and log lines that name the
thread (and the conversation where one runs). Driven by the scripted agy of ``test_worker``: no
subprocess, no timing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.core.events import Reaction
from bridge.core.store.rows import MessageState, Usage
from bridge.metrics import PREFIX
from tests.core.harness import RecordedReply
from tests.core.scripted import (
    World,
    delta,
    event,
    pre_invocation,
    ref,
    result,
    streaming_turn,
    world,
)

pytestmark = pytest.mark.anyio

CORE_LOGGERS = (
    "bridge.core.thread.actor",
    "bridge.core.thread.work",
    "bridge.core.turn",
    "bridge.core.core",
)


def sample(w: World, name: str, **labels: str) -> float:
    value = w.bridge.metrics.registry.get_sample_value(PREFIX + name, labels)
    return 0.0 if value is None else value


def with_usage(response: str, usage: dict[str, int]) -> Any:
    return event(
        {"event": "result", "result": {"status": "SUCCESS", "response": response, "usage": usage}}
    )


async def recorded(w: World, count: int) -> list[RecordedReply]:
    """The first ``count`` finished replies, once their turns are recorded too (a reply closes
    after its turn's row is written)."""
    done = await w.adapter.wait_finished(count)
    await w.adapter.changes.until(lambda: all(r.closed for r in done[:count]))
    return done


async def turn_rows(w: World) -> list[dict[str, Any]]:
    rows = await w.bridge.store._db.fetch("SELECT * FROM turns ORDER BY id")
    return [dict(r) for r in rows]


async def test_a_turn_is_counted_and_recorded_with_its_usage(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        agy.say(
            with_usage("the answer", {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12})
        )
        [reply] = await recorded(w, 1)
        assert reply.outcome is not None and reply.outcome.final_text == "the answer"
        assert sample(w, "turns_started_total", platform="test") == 1
        assert sample(w, "turns_total", platform="test", state="done") == 1
        assert sample(w, "turns_total", platform="test", state="error") == 0
        assert sample(w, "turn_duration_seconds_count", platform="test") == 1
        usage = Usage(input_tokens=7, output_tokens=5, total_tokens=12)
        assert (await w.bridge.store.thread(ref().key)).usage == usage
        [row] = await turn_rows(w)
        assert row["state"] == "done" and row["response"] == "the answer"
        assert row["error"] is None and row["ended_at"] is not None
        assert Usage.model_validate_json(row["usage_json"]) == usage
        assert await w.bridge.store.running_turns() == []


async def test_a_turn_without_usage_leaves_the_threads_usage_alone(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        agy.say(with_usage("first", {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}))
        await recorded(w, 1)
        await w.say("two")
        await agy.wait_turns(2)
        agy.say(result(response="second"))
        await recorded(w, 2)
        usage = (await w.bridge.store.thread(ref().key)).usage
        assert usage == Usage(input_tokens=1, output_tokens=2, total_tokens=3)
        rows = await turn_rows(w)
        assert [r["usage_json"] for r in rows][1] is None


async def test_an_error_result_from_a_live_agy_is_counted_as_agys_answer(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        agy.say(result(status="ERROR", error="Individual quota reached"))
        [reply] = await recorded(w, 1)
        assert reply.outcome is not None and reply.outcome.error == "Individual quota reached"
        assert sample(w, "turns_total", platform="test", state="error") == 1
        assert sample(w, "errors_total", kind="agy_result") == 1
        assert sample(w, "errors_total", kind="agy_exit") == 0
        [row] = await turn_rows(w)
        assert row["state"] == "error" and row["error"] == "Individual quota reached"


async def test_agy_dying_mid_turn_is_counted_as_an_exit(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        agy.die(2, "panic: mid-turn")
        [reply] = await recorded(w, 1)
        assert reply.outcome is not None and "panic: mid-turn" in (reply.outcome.error or "")
        assert reply.deltas == ["working"], "what agy said before it died stays shown"
        assert sample(w, "errors_total", kind="agy_exit") == 1
        assert sample(w, "errors_total", kind="agy_result") == 0
        [row] = await turn_rows(w)
        assert row["state"] == "error"
        assert await w.bridge.store.pending(ref().key) == [], "a turn agy read is not requeued"


async def test_one_hook_call_counts_and_marks_every_message_it_takes(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        late = [await w.say("late one"), await w.say("late two")]
        answer = await pre_invocation(tmp_path, agy.conversation)
        assert "late one" in json.dumps(answer) and "late two" in json.dumps(answer)
        assert sample(w, "injections_total", platform="test") == 2
        assert sample(w, "queued_messages_total", platform="test") == 2
        await w.adapter.changes.until(
            lambda: all((m, Reaction.INJECTED) in w.adapter.reactions for m in late)
        )
        # Queued first, injected after: the marks keep their order per message.
        for m in late:
            marks = [r for mid, r in w.adapter.reactions if mid == m]
            assert marks == [Reaction.QUEUED, Reaction.INJECTED]
        assert await w.bridge.store.pending(ref().key) == []
        rows = await w.bridge.store._db.fetch("SELECT state, turn_id FROM inbox ORDER BY id")
        [first, *taken] = [dict(r) for r in rows]
        assert [r["state"] for r in taken] == [MessageState.INJECTED] * 2
        assert {r["turn_id"] for r in taken} == {first["turn_id"]}, "injected into this turn"
        # A second call takes nothing more.
        again = await pre_invocation(tmp_path, agy.conversation)
        assert "late" not in json.dumps(again)
        assert sample(w, "injections_total", platform="test") == 2
        agy.say(delta("read it"), result(response="done"))
        await recorded(w, 1)


async def test_core_log_lines_name_the_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.core")
    async with world(tmp_path, idle_timeout=0.05) as w:
        agy = await streaming_turn(w, "one")
        await w.say("late")
        await pre_invocation(tmp_path, agy.conversation)
        agy.die(2, "panic: after the hook")  # the injection was never read: it is put back
        second = await w.agys.nth(2)
        await second.wait_turns(1)
        second.say(delta("ok"), result(response="done"))
        await w.agys.wait(lambda: second.closed)  # idle: closed
        with anyio.fail_after(10):
            while ref().key in w.bridge.core.threads:
                await anyio.sleep(0.01)
    records = [r for r in caplog.records if r.name in CORE_LOGGERS]
    messages = [r.getMessage() for r in records]
    for expected in (
        "thread worker started",
        "agy ready",
        "injected 1 message(s) mid-turn",
        "agy never read 1 injected message(s); they wait for the next turn",
        "closing idle agy",
        "thread worker stopped",
    ):
        assert expected in messages, messages
    for r in records:
        assert getattr(r, "chat_thread", None) == ref().key, r.getMessage()
    for r in records:
        if r.getMessage() in ("agy ready", "injected 1 message(s) mid-turn"):
            assert getattr(r, "conversation", None) in (agy.conversation, second.conversation)


async def test_a_turn_past_the_bridges_deadline_is_interrupted_and_said_so(tmp_path: Path) -> None:
    async with world(tmp_path, turn_timeout=1.5) as w:
        agy = await streaming_turn(w, "one")
        # agy goes silent: at the deadline the bridge sends SIGINT, and agy answers it.
        [reply] = await recorded(w, 1)
        assert agy.interrupted == 1
        assert reply.outcome is not None and reply.outcome.interrupted
        assert reply.outcome.error == "the turn ran longer than 0.025 minutes and was stopped"
        assert reply.outcome.notes == [], "nobody pressed Stop"
        assert reply.deltas == ["working"]
        assert sample(w, "turns_total", platform="test", state="interrupted") == 1
        [row] = await turn_rows(w)
        assert row["state"] == "interrupted"
        assert row["error"] == "the turn ran longer than 0.025 minutes and was stopped"
        await w.agys.wait(lambda: agy.closed)
        await w.say("again")
        second = await w.agys.nth(2)
        assert second.conversation == agy.conversation, "same conversation, new process"
        await second.wait_turns(1)

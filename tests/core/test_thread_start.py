"""What a thread is told when agy cannot start, or must wait for a process slot, and how an
unreadable line is counted: the worker's side, with the scripted agy of ``test_worker`` (no
subprocess, no timing).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bridge.agy.process import AgyStartError, ProcessExit
from bridge.agy.start_failure import StartFailure
from bridge.core.events import Reaction
from bridge.metrics import PREFIX
from tests.core.scripted import World, ref, result, streaming_turn, world

pytestmark = pytest.mark.anyio


async def with_conversation(w: World, conversation: str, model: str | None = None) -> None:
    store = w.bridge.store
    await store.ensure_thread(ref())
    await store.set_conversation(ref().key, conversation)
    if model is not None:
        await store.set_model(ref().key, model)


def unknown(conversation: str, stderr: str | None) -> AgyStartError:
    exit = ProcessExit(1, stderr) if stderr is not None else None
    return AgyStartError("exited", f"conversation {conversation} not found", exit=exit)


async def test_an_unknown_conversation_is_dropped_once_and_the_thread_told_why(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        await with_conversation(w, "conv-old")
        w.agys.start_errors.append(unknown("conv-old", "  error: cascade conv-old not found \n"))
        await w.say("hello")
        agy = await w.agys.nth(1)
        assert "--conversation" not in agy.spec.argv, "started fresh"
        assert "hello" in (await agy.wait_turns(1))[0]
        [(key, notice)] = w.adapter.notices
        assert key == ref().key
        assert notice == (
            "⚠️ agy could not resume this thread's conversation (error: cascade conv-old not "
            "found). Starting a fresh conversation; earlier context is not available to the agent."
        )
        assert (await w.bridge.store.thread(ref().key)).conversation_id == agy.conversation


async def test_an_unknown_conversation_without_words_on_stderr_says_no_detail(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        await with_conversation(w, "conv-old")
        w.agys.start_errors.append(unknown("conv-old", None))
        await w.say("hello")
        await w.agys.nth(1)
        assert [n for _, n in w.adapter.notices] == [
            "⚠️ agy could not resume this thread's conversation. Starting a fresh conversation; "
            "earlier context is not available to the agent."
        ]


async def test_a_fresh_start_that_fails_again_fails_the_messages(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await with_conversation(w, "conv-old")
        w.agys.start_errors += [unknown("conv-old", "x"), unknown("conv-old", "x")]
        first = await w.say("hello")
        await w.adapter.changes.until(lambda: (first, Reaction.FAILED) in w.adapter.reactions)
        notices = [n for _, n in w.adapter.notices]
        assert len(notices) == 2 and notices[0].startswith("⚠️ agy could not resume")
        assert notices[1] == (
            "⚠️ conversation conv-old not found\n" + StartFailure.CONVERSATION_UNKNOWN.advice
        )
        assert not w.agys.started


async def test_a_failure_other_than_the_conversation_keeps_it(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await with_conversation(w, "conv-kept")
        w.agys.start_errors.append(AgyStartError("exited", "segmentation fault"))
        first = await w.say("hello")
        await w.adapter.changes.until(lambda: (first, Reaction.FAILED) in w.adapter.reactions)
        # agy's own words, with no advice: there is none to give for a failure we do not know.
        assert [n for _, n in w.adapter.notices] == ["⚠️ segmentation fault"]
        assert (await w.bridge.store.thread(ref().key)).conversation_id == "conv-kept"


async def test_a_refused_model_is_reset_and_said(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await with_conversation(w, "conv-1", model="no-such-model")
        w.agys.start_errors.append(AgyStartError("error_result", "invalid model no-such-model"))
        first = await w.say("hello")
        await w.adapter.changes.until(lambda: (first, Reaction.FAILED) in w.adapter.reactions)
        assert [n for _, n in w.adapter.notices] == [
            "⚠️ agy refused to start: invalid model no-such-model\n"
            + StartFailure.MODEL.advice
            + "\nThis thread's model was reset to the default."
        ]
        row = await w.bridge.store.thread(ref().key)
        assert row.model is None and row.conversation_id == "conv-1"


async def test_a_refused_default_model_has_nothing_to_reset(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.agys.start_errors.append(AgyStartError("error_result", "unknown model gemini-x"))
        first = await w.say("hello")
        await w.adapter.changes.until(lambda: (first, Reaction.FAILED) in w.adapter.reactions)
        assert [n for _, n in w.adapter.notices] == [
            "⚠️ agy refused to start: unknown model gemini-x\n" + StartFailure.MODEL.advice
        ]


async def test_a_thread_waiting_for_a_slot_is_told_its_place(tmp_path: Path) -> None:
    async with world(tmp_path, max_processes=1) as w:
        agy = await streaming_turn(w, "busy")
        await w.say("me too", thread="B")
        notice = await w.adapter.wait_notice("agent slots are busy")
        assert (ref("B").key, notice) in w.adapter.notices
        assert notice == (
            "All 1 agent slots are busy; this thread is number 1 in line and starts as soon as "
            "one is free."
        )
        agy.say(result(response="done"))
        b = await w.agys.nth(2)
        assert "me too" in (await b.wait_turns(1))[0]


async def test_an_unreadable_line_is_counted_and_logged_with_the_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bridge.core")
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        assert agy.bad_line is not None
        agy.bad_line("not JSON: 'garbage'")
        value = w.bridge.metrics.registry.get_sample_value(PREFIX + "agy_bad_lines_total", {})
        assert value == 1
        [record] = [r for r in caplog.records if "unreadable line" in r.getMessage()]
        assert record.levelno == logging.WARNING
        assert record.getMessage() == "unreadable line from agy: not JSON: 'garbage'"
        assert getattr(record, "chat_thread", None) == ref().key


async def test_status_of_a_thread_waiting_for_a_slot_names_its_place(tmp_path: Path) -> None:
    async with world(tmp_path, max_processes=1) as w:
        agy = await streaming_turn(w, "busy")
        await w.say("me too", thread="B")
        await w.adapter.wait_notice("agent slots are busy")
        await w.say("!status", thread="B")
        status = await w.adapter.wait_notice("Agent slots:")
        assert "• Agent slots: 1/1 in use, 1 thread(s) in line" in status
        assert status.split("\n")[-1] == "• This thread is number 1 in line"
        assert set(w.bridge.core.runtime.isolation_status().split("\n")) <= set(status.split("\n"))
        await w.say("!status")
        mine = await w.adapter.changes.until(
            lambda: [n for k, n in w.adapter.notices if k == ref().key and "Agent slots" in n]
        )
        assert "in line" not in mine[0].split("\n")[-1], "the running thread is not in line"
        agy.say(result(response="done"))
        await (await w.agys.nth(2)).wait_turns(1)

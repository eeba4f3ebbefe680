"""Processes, limits, commands and failures of the turn loop, against the agy simulator."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.agy import launch
from tests.core.harness import running, thread
from tests.core.test_turn_loop import wait_file

pytestmark = pytest.mark.anyio


async def test_idle_process_is_closed_then_resumed_with_its_history(tmp_path: Path) -> None:
    async with running(tmp_path, idle_timeout=0.3) as h:
        await h.say("remember 42")
        await h.adapter.wait_finished(1)
        first = (await h.bridge.store.thread(thread().key)).conversation_id
        await h.worker_gone()
        assert h.bridge.core.slots.live == 0
        await h.say("what was it?")
        await h.adapter.wait_finished(2)
        assert (await h.bridge.store.thread(thread().key)).conversation_id == first


async def test_a_full_house_evicts_an_idle_thread_or_queues(tmp_path: Path) -> None:
    async with running(tmp_path, max_processes=1) as h:
        a, b, c = thread("a"), thread("b"), thread("c")
        await h.say("first", where=a)
        await h.adapter.wait_finished(1, a)
        # a is idle: b takes its slot at once.
        go = h.flag("go")
        await h.say(f"busy [[waitfirst {go}]]", where=b)
        await h.adapter.changes.until(lambda: [r for r in h.adapter.replies if r.thread == b])
        assert h.bridge.core.threads.get(a.key) is None or h.bridge.core.threads[a.key].proc is None
        # b is busy: c waits in line and is told so.
        await h.say("third", where=c)
        notice = await h.adapter.wait_notice("in line")
        assert "number 1 in line" in notice
        go.touch()
        await h.adapter.wait_finished(1, b)
        await h.adapter.wait_finished(1, c)
        assert h.bridge.core.slots.live <= 1


async def test_stop_interrupts_and_the_conversation_goes_on(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        started = h.flag("started")
        await h.say(f"long [[touch {started}]] [[sleep 30]]")
        await wait_file(started)
        await h.say("!stop", who="bob")
        [stopped] = await h.adapter.wait_finished(1)
        assert stopped.outcome is not None and stopped.outcome.interrupted
        assert "Stopped by Bob" in " ".join(stopped.outcome.notes)
        conversation = (await h.bridge.store.thread(thread().key)).conversation_id
        await h.say("carry on")
        _, after = await h.adapter.wait_finished(2)
        assert after.outcome is not None and after.outcome.error is None
        assert (await h.bridge.store.thread(thread().key)).conversation_id == conversation


async def test_stop_kills_the_commands_agy_started(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        pidfile = h.flag("child.pid")
        await h.say(f"[[tool run_command echo $$ > {pidfile}; exec sleep 60]]")
        await wait_file(pidfile)
        with anyio.fail_after(5):
            while not pidfile.read_text().strip():
                await anyio.sleep(0.02)
        child = int(pidfile.read_text())
        await h.say("!stop")
        await h.adapter.wait_finished(1)
        with anyio.fail_after(10):
            while _alive(child):
                await anyio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_model_switch_keeps_the_conversation(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("hi")
        await h.adapter.wait_finished(1)
        worker = h.bridge.core.threads[thread().key]
        pid = worker.proc.pid if worker.proc else None
        before = (await h.bridge.store.thread(thread().key)).conversation_id
        await h.say("!model sim-fast")
        await h.adapter.wait_notice("now `sim-fast`")
        await h.say("again")
        await h.adapter.wait_finished(2)
        row = await h.bridge.store.thread(thread().key)
        assert row.model == "sim-fast" and row.conversation_id == before
        worker = h.bridge.core.threads[thread().key]
        assert worker.proc is not None and worker.proc.pid != pid
        assert worker.proc.init is not None and worker.proc.init.init.model == "sim-fast"
        await h.say("!model")
        await h.adapter.wait_notice("Model for this thread: `sim-fast`")


async def test_a_refused_model_is_shown_and_reset(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("!model no-such-model")
        await h.say("hello")
        notice = await h.adapter.wait_notice("agy refused to start")
        assert "invalid model selection" in notice and "reset" in notice
        await h.say("hello again")
        [reply] = await h.adapter.wait_finished(1)
        assert "hello again" in reply.outcome.final_text  # type: ignore[union-attr]


async def test_new_starts_another_conversation(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("hi")
        await h.adapter.wait_finished(1)
        before = (await h.bridge.store.thread(thread().key)).conversation_id
        await h.say("!new")
        await h.adapter.wait_notice("fresh conversation")
        await h.say("hi again")
        await h.adapter.wait_finished(2)
        after = (await h.bridge.store.thread(thread().key)).conversation_id
        assert after and after != before


async def test_status_and_help_and_unknown_commands(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("hi")
        await h.adapter.wait_finished(1)
        await h.say("!status")
        status = await h.adapter.wait_notice("Conversation:")
        assert "agy idle" in status and "Usage so far" in status
        assert "Not isolated" in status  # the harness runs without a sandbox
        await h.say("!bogus")
        assert "Unknown command `!bogus`" in await h.adapter.wait_notice("Unknown command")
        await h.say("sentinel")
        _, sentinel = await h.adapter.wait_finished(2)
        assert "!bogus" not in sentinel.outcome.final_text  # type: ignore[union-attr]
        assert len(h.adapter.finished()) == 2, "commands are not turns"


async def test_agy_crash_mid_turn_is_reported_and_resumed(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("boom [[crash]]")
        [crashed] = await h.adapter.wait_finished(1)
        assert crashed.outcome is not None and crashed.outcome.error is not None
        assert "panic: simulated crash" in crashed.outcome.error
        before = (await h.bridge.store.thread(thread().key)).conversation_id
        await h.say("are you back?")
        _, back = await h.adapter.wait_finished(2)
        assert back.outcome is not None and back.outcome.error is None
        assert (await h.bridge.store.thread(thread().key)).conversation_id == before


async def test_error_results_are_shown_in_agys_words(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.say("[[fatal Individual quota reached for this account]]")
        [failed] = await h.adapter.wait_finished(1)
        assert failed.outcome is not None
        assert failed.outcome.error == "Individual quota reached for this account"
        await h.say("[[deny]] write it")
        _, denied = await h.adapter.wait_finished(2)
        assert denied.outcome is not None and denied.outcome.denied == ["WriteToFile"]
        assert any(t.state == "ERROR" for t in denied.tools)


async def test_a_turn_past_its_deadline_is_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bridge's deadline is tested, so agy's own (--print-timeout, under ours: at a 1 s turn
    # it is 1 s too, and a loaded machine let agy's win with "timeout waiting for response")
    # comes later here, as in tests/faults/test_agy_faults.py's silent agy.
    monkeypatch.setattr(launch, "print_timeout", lambda turn_timeout: "60s")
    async with running(tmp_path, turn_timeout=1.0) as h:
        await h.say("[[sleep 20]]")
        [late] = await h.adapter.wait_finished(1)
        assert late.outcome is not None and late.outcome.interrupted
        assert "longer than" in (late.outcome.error or "")


async def test_an_unknown_conversation_is_dropped_and_started_fresh(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        await h.bridge.store.ensure_thread(thread())
        await h.bridge.store.set_conversation(thread().key, "gone-0000")
        await h.say("hello")
        notice = await h.adapter.wait_notice("could not resume")
        assert "fresh conversation" in notice
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
        assert (await h.bridge.store.thread(thread().key)).conversation_id not in (
            None,
            "gone-0000",
        )


async def test_garbage_from_agy_does_not_break_the_turn(tmp_path: Path) -> None:
    async with running(tmp_path, max_line_bytes=4096) as h:
        await h.say("[[garbage]] [[bigline 100000]] still fine")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.error is None
        assert "still fine" in reply.outcome.final_text


async def test_missing_agy_is_a_clear_message(tmp_path: Path) -> None:
    async with running(tmp_path, command=["/nonexistent/agy"]) as h:
        await h.say("hello")
        notice = await h.adapter.wait_notice("not installed")
        assert "/nonexistent/agy" in notice


async def test_a_signed_out_agy_keeps_the_threads_conversation(tmp_path: Path) -> None:
    async with running(tmp_path, idle_timeout=0.2) as h:
        await h.say("remember me")
        await h.adapter.wait_finished(1)
        conversation = (await h.bridge.store.thread(thread().key)).conversation_id
        assert conversation
        await h.worker_gone()
        login = tmp_path / "sim-home" / "sim-login.json"
        saved = login.read_text()
        login.unlink()  # signed out
        await h.say("are you there?")
        notice = await h.adapter.wait_notice("signed out")
        assert "sign agy in again" in notice and "keeps its conversation" in notice
        assert (await h.bridge.store.thread(thread().key)).conversation_id == conversation
        await h.worker_gone()
        login.write_text(saved)
        await h.say("and now?")
        _, answer = await h.adapter.wait_finished(2)
        assert answer.outcome is not None and answer.outcome.error is None
        assert (await h.bridge.store.thread(thread().key)).conversation_id == conversation

"""Approvals through the core and the agy simulator, with a recording chat adapter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.agy.session import ToolCall, ToolVerdict
from bridge.core.approvals.gate import window_left
from bridge.core.events import ApprovalChoice, ApprovalRequest, Author, DecideOutcome
from bridge.core.store.rows import ApprovalState
from tests.core.harness import Harness, RecordingAdapter, running, thread

pytestmark = pytest.mark.anyio

BOB = Author(id="@bob:test", display_name="Bob")
EVE = Author(id="@eve:test", display_name="Eve")


def approvals(**settings: Any) -> dict[str, Any]:
    return {"approvals": {"mode": "ask", "timeout": 60, **settings}}


async def request(h: Harness, count: int = 1) -> str:
    """The handle of the ``count``-th request, once it was asked."""
    await h.adapter.changes.until(lambda: len(h.adapter.requests) >= count)
    return f"req-{count}"


def workdir(h: Harness) -> Path:
    [worker] = h.bridge.core.threads.values()
    assert worker.place is not None
    return worker.place.workdir


async def test_approve_runs_the_command_and_the_message_says_who(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command touch ran.txt]]")
        handle = await request(h)
        req = h.adapter.requests[0]
        assert req.summary == "touch ran.txt" and req.always
        assert req.requested_by is not None and req.requested_by.id == "@alice:test"
        assert "touch ran.txt" in req.text
        assert not (workdir(h) / "ran.txt").exists()
        outcome = await h.bridge.core.decide(thread(), handle, ApprovalChoice.APPROVE, BOB)
        assert outcome is DecideOutcome.DECIDED
        await h.adapter.wait_finished(1)
        assert (workdir(h) / "ran.txt").exists()
        settled = h.adapter.settled[handle]
        assert settled.state == "approved" and "Approved by Bob" in settled.text
        again = await h.bridge.core.decide(thread(), handle, ApprovalChoice.DENY, BOB)
        assert again is DecideOutcome.UNKNOWN, "a decided request takes no second answer"
        metrics = h.bridge.metrics.render()[0].decode()
        assert 'agy_bridge_approval_requests_total{decision="approved"} 1.0' in metrics
        assert "agy_bridge_approval_wait_seconds_count 1.0" in metrics


class SlowFirstPost(RecordingAdapter):
    """A chat whose first request post returns only once agy has read the answer to its tool
    call: a post slower than the listener's margin over the approval window (a loaded host,
    Slack's one post a second per channel, a 429 retry), without guessing a duration."""

    async def ask_approval(self, request: ApprovalRequest) -> str:
        if not self.requests:
            await self.changes.until(
                lambda: any(t.state == "ERROR" for r in self.replies for t in r.tools)
            )
        return await super().ask_approval(request)


async def test_an_answer_after_the_listener_denied_is_never_shown_approved(
    tmp_path: Path,
) -> None:
    """The window counts from the hook call's arrival, as the listener's deadline does: a
    request whose post took the whole window is over when it shows, and an approval then is
    not shown as "Approved" for a tool agy was already told is denied."""
    adapter = SlowFirstPost()
    async with running(tmp_path, extra=approvals(timeout=3), adapter=adapter) as h:
        await h.say("[[tool run_command touch late.txt]] [[tool run_command touch ok.txt]]")
        late = await request(h)  # shown only after agy read the listener's deny
        outcome = await h.bridge.core.decide(thread(), late, ApprovalChoice.APPROVE, BOB)
        assert outcome is DecideOutcome.UNKNOWN, "the tool call was denied already"
        settled = await h.adapter.changes.until(lambda: h.adapter.settled.get(late))
        assert settled.state == "timed_out" and "Approved" not in settled.text
        # The next call is asked in its own window and approved within it: it runs.
        ok = await request(h, 2)
        outcome = await h.bridge.core.decide(thread(), ok, ApprovalChoice.APPROVE, BOB)
        assert outcome is DecideOutcome.DECIDED
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and "took too long" in reply.outcome.final_text
        assert h.adapter.settled[ok].state == "approved"
        assert (workdir(h) / "ok.txt").exists() and not (workdir(h) / "late.txt").exists()


async def test_a_call_whose_window_was_spent_in_the_queue_is_denied_unasked(
    tmp_path: Path,
) -> None:
    """Requests are asked one at a time: a call that waited behind another for its whole
    window (counted from its arrival, as the listener counts) is denied without a request
    no answer could reach agy for."""
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command touch first.txt]]")
        first = await request(h)
        [actor] = h.bridge.core.threads.values()
        gate = actor.work.gate
        verdicts: list[ToolVerdict] = []
        # Arrived one window ago: as long as the first request could keep it queued.
        queued = ToolCall(
            name="run_command",
            args={"CommandLine": "touch queued.txt"},
            arrived=anyio.current_time() - 60,
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _append(verdicts, gate.decide(queued)))
            await anyio.wait_all_tasks_blocked()
            await h.bridge.core.decide(thread(), first, ApprovalChoice.APPROVE, BOB)
        [verdict] = verdicts
        assert not verdict.allow and "whole approval window (1 minute)" in (verdict.reason or "")
        await h.adapter.wait_finished(1)
        assert len(h.adapter.requests) == 1, "no request is shown for it"
        assert (workdir(h) / "first.txt").exists()


async def _append(into: list[ToolVerdict], verdict: Any) -> None:
    into.append(await verdict)


async def test_a_request_shows_the_window_left_of_it() -> None:
    now = anyio.current_time
    assert window_left(now() + 600, 600) == 600
    assert window_left(now() + 150, 600) == 120  # rounded down: never more than is left
    assert window_left(now() + 42.7, 600) == 42
    assert window_left(now() - 1, 600) == 1


async def test_deny_with_a_reason_reaches_the_answer(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command touch nope.txt]]")
        await request(h)
        await h.say("deny 1: use the staging db", who="bob")  # the request's number
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None
        assert "denied by Bob: use the staging db" in reply.outcome.final_text
        assert not (workdir(h) / "nope.txt").exists()
        assert h.adapter.settled["req-1"].state == "denied"
        assert "use the staging db" in h.adapter.settled["req-1"].text


async def test_timeout_denies_and_the_thread_is_told(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals(timeout=0.5)) as h:
        await h.say("[[tool run_command touch late.txt]]")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None
        assert "no one in the chat approved it" in reply.outcome.final_text
        assert h.adapter.settled["req-1"].state == "timed_out"
        assert "no one answered in time" in h.adapter.settled["req-1"].text
        assert not (workdir(h) / "late.txt").exists()


async def test_a_non_approvers_answer_changes_nothing(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals(approvers=["@bob:test"])) as h:
        await h.say("[[tool run_command touch x.txt]]")
        handle = await request(h)
        outcome = await h.bridge.core.decide(thread(), handle, ApprovalChoice.APPROVE, EVE)
        assert outcome is DecideOutcome.NOT_APPROVER
        await h.say("approve", who="eve")
        await h.adapter.wait_notice("may not answer approval requests")
        assert handle not in h.adapter.settled and not (workdir(h) / "x.txt").exists()
        await h.bridge.core.decide(thread(), handle, ApprovalChoice.APPROVE, BOB)
        await h.adapter.wait_finished(1)
        assert (workdir(h) / "x.txt").exists()


async def test_always_allows_the_same_command_in_this_thread_only(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command echo hi]]")
        handle = await request(h)
        await h.bridge.core.decide(thread(), handle, ApprovalChoice.ALWAYS, BOB)
        await h.adapter.wait_finished(1)
        await h.say("[[tool run_command echo hi]] again")
        await h.adapter.wait_finished(2)
        assert len(h.adapter.requests) == 1, "the same command ran without asking"
        await h.say("!approvals")
        await h.adapter.wait_notice("`echo hi`")
        # Another thread still asks.
        other = thread("t2")
        await h.say("[[tool run_command echo hi]]", where=other)
        await request(h, 2)
        assert h.adapter.requests[1].thread == other
        await h.bridge.core.decide(other, "req-2", ApprovalChoice.DENY, BOB)
        await h.adapter.wait_finished(1, other)
        await h.say("!approvals reset")
        await h.adapter.wait_notice("1 pattern(s) removed")
        await h.say("[[tool run_command echo hi]] once more")
        await request(h, 3)
        await h.bridge.core.decide(thread(), "req-3", ApprovalChoice.APPROVE, BOB)
        await h.adapter.wait_finished(3, thread())


async def test_a_chained_command_is_never_allowed_always(tmp_path: Path) -> None:
    settings = approvals(allow_commands=["echo *"])
    async with running(tmp_path, extra=settings) as h:
        await h.say("[[tool run_command echo a; touch chained.txt]]")
        handle = await request(h)
        assert not h.adapter.requests[0].always
        await h.bridge.core.decide(thread(), handle, ApprovalChoice.ALWAYS, BOB)
        await h.adapter.wait_finished(1)
        assert h.adapter.settled[handle].state == "approved", "once, not always"
        await h.say("[[tool run_command echo a; touch chained.txt]] again")
        await request(h, 2)
        await h.bridge.core.decide(thread(), "req-2", ApprovalChoice.DENY, BOB)
        await h.adapter.wait_finished(2)
        await h.say("!approvals")
        await h.adapter.wait_notice("allow list is empty")


async def test_writes_inside_the_workspace_pass_outside_ask(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    async with running(tmp_path, extra=approvals()) as h:
        await h.say(f"[[write inside.txt hello]] [[write {outside} bye]]")
        await request(h)
        assert h.adapter.requests[0].summary == f"write_to_file {outside}"
        assert (workdir(h) / "inside.txt").read_text() == "hello"
        await h.bridge.core.decide(thread(), "req-1", ApprovalChoice.DENY, BOB)
        await h.adapter.wait_finished(1)
        assert not outside.exists()


async def test_stop_while_waiting_denies_and_interrupts(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command touch stopped.txt]]")
        await request(h)
        await h.say("!stop", who="bob")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.interrupted
        assert h.adapter.settled["req-1"].state == "stopped"
        assert not (workdir(h) / "stopped.txt").exists()


async def test_requests_are_asked_one_at_a_time_and_a_late_message_is_injected(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[calls 2]] [[tool run_command touch one.txt]]")
        await request(h)
        assert len(h.adapter.requests) == 1
        await h.say("also check the logs", who="bob")
        await h.bridge.core.decide(thread(), "req-1", ApprovalChoice.APPROVE, BOB)
        await request(h, 2)
        await h.bridge.core.decide(thread(), "req-2", ApprovalChoice.APPROVE, BOB)
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None
        assert "Injected:" in reply.outcome.final_text
        assert "also check the logs" in reply.outcome.final_text


async def test_deny_mode_refuses_without_asking(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals(mode="deny")) as h:
        await h.say("[[tool run_command touch no.txt]] [[write fine.txt ok]]")
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and "approvals mode is deny" in reply.outcome.final_text
        assert h.adapter.requests == []
        assert (workdir(h) / "fine.txt").exists() and not (workdir(h) / "no.txt").exists()


async def test_a_stopping_bridge_ends_a_waiting_request(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command touch never.txt]]")
        await request(h)
        store = h.bridge.core.store
        [waiting] = await store.waiting_approvals()
        folder = workdir(h)
    # The bridge stopped (cancelled) while it waited: the request is over.
    async with running(tmp_path, extra=approvals()) as h2:
        row = await h2.bridge.core.store.approval(waiting.id)
        assert row is not None and row.state is ApprovalState.EXPIRED
        assert not (folder / "never.txt").exists()


async def test_after_a_crash_a_waiting_request_reads_as_expired(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        # What a SIGKILLed bridge leaves behind: a request stored as waiting, its message posted.
        await h.bridge.core.store.add_approval(
            "abc", thread().key, "run_command", {"CommandLine": "rm x"}, "rm x", None
        )
        await h.bridge.core.store.set_approval_handle("abc", "req-old")
    async with running(tmp_path, extra=approvals()) as h2:
        row = await h2.bridge.core.store.approval("abc")
        assert row is not None and row.state is ApprovalState.EXPIRED
        result = h2.adapter.settled["req-old"]
        assert result.state == "expired" and "bridge restarted" in result.text


async def test_the_hook_decides_from_inside_the_sandbox(tmp_path: Path) -> None:
    from tests.agy.sandboxed import require_bwrap

    require_bwrap()
    async with running(tmp_path, extra=approvals(), isolation="bwrap") as h:
        await h.say("[[tool run_command touch boxed.txt]] [[tool run_command touch no.txt]]")
        await request(h)
        await h.bridge.core.decide(thread(), "req-1", ApprovalChoice.APPROVE, BOB)
        await request(h, 2)
        await h.bridge.core.decide(thread(), "req-2", ApprovalChoice.DENY, BOB)
        [reply] = await h.adapter.wait_finished(1)
        assert reply.outcome is not None and "denied by Bob" in reply.outcome.final_text
        assert (workdir(h) / "boxed.txt").exists() and not (workdir(h) / "no.txt").exists()


async def test_without_a_sandbox_the_gate_hides_the_data_directory(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command touch x.txt]]")
        await request(h)
        [worker] = h.bridge.core.threads.values()
        assert worker.gate is not None
        assert (tmp_path / "data").resolve() in worker.gate.place.hidden
        await h.bridge.core.decide(thread(), "req-1", ApprovalChoice.DENY, BOB)
        await h.adapter.wait_finished(1)


async def test_an_approvers_old_glob_rule_is_not_stored(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say("[[tool run_command git diff --stat]]")
        await request(h)
        outcome = await h.bridge.core.decide(
            thread(), "req-1", ApprovalChoice.ALWAYS, BOB, reason="git diff*"
        )
        assert outcome is DecideOutcome.DECIDED
        await h.adapter.wait_finished(1)
        assert await h.bridge.core.store.allow_list(thread().key) == ["rule: git diff --stat"]


async def test_an_old_stored_row_that_no_longer_means_the_same_asks_and_the_thread_is_told(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        store = h.bridge.core.store
        key = thread().key
        await store.add_allowed(key, "git diff*", None)  # an approver's old glob rule
        await store.add_allowed(key, "touch [*]ok[*]", None)  # an old escaped exact line
        await h.say("[[tool run_command touch '*ok*']] [[tool run_command git diff --stat]]")
        notice = await h.adapter.wait_notice("no longer used")
        assert "`git diff*`" in notice and "`git diff *`" in notice
        await request(h)
        assert h.adapter.requests[0].summary == "git diff --stat", "the exact old row still runs"
        assert (workdir(h) / "*ok*").exists()
        await h.bridge.core.decide(thread(), "req-1", ApprovalChoice.DENY, BOB)
        await h.adapter.wait_finished(1)


async def test_an_always_row_with_brackets_is_read_back_as_written(tmp_path: Path) -> None:
    # `[*]` in a new exact rule is the command's own text, not an old row's escaped `*`.
    line = "grep -E 'a[*]b' notes.txt"
    async with running(tmp_path, extra=approvals()) as h:
        await h.say(f"[[tool run_command {line}]]")
        await h.bridge.core.decide(thread(), await request(h), ApprovalChoice.ALWAYS, BOB)
        await h.adapter.wait_finished(1)
        await h.say(f"[[tool run_command {line}]] again")
        await h.adapter.wait_finished(2)
        assert len(h.adapter.requests) == 1, "the command allowed always asked again"
        await h.say("[[tool run_command grep -E 'a*b' notes.txt]]")
        await request(h, 2)
        await h.bridge.core.decide(thread(), "req-2", ApprovalChoice.DENY, BOB)
        await h.adapter.wait_finished(3)
        await h.say("!approvals")
        await h.adapter.wait_notice(f"`{line}`")

"""A registration's deadlines and its report of answers agy cannot have read, called directly (no
socket): the numbers and the log lines, which name the registration and never its token."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from bridge.agy import wire
from bridge.agy.listener.hook_command import answer_deadline, tool_hook_timing
from bridge.agy.listener.registration import DEFAULT_ANSWER_SECONDS, Registration

pytestmark = pytest.mark.anyio

TOKEN = "tok-secret-456"


def registration(hook: Any = None, on_undelivered: Any = None, **within: float) -> Registration:
    async def empty(event: str, hook_input: wire.HookInput) -> wire.HookAnswer:
        return wire.EMPTY_HOOK_REPLY

    return Registration(
        label="session-7",
        token=TOKEN,
        base_url="http://127.0.0.1:1",
        hook=hook or empty,
        mcp={},
        forget=lambda r: None,
        answer_within=within or None,
        on_undelivered=on_undelivered,
    )


def test_the_listeners_deadline_leaves_curl_a_margin() -> None:
    assert answer_deadline(1) == pytest.approx(0.2)
    assert answer_deadline(2) == pytest.approx(0.6)
    assert answer_deadline(5) == pytest.approx(3.0)
    assert answer_deadline(10) == pytest.approx(6.0)
    assert answer_deadline(30) == pytest.approx(23.0)


def test_a_negative_approval_timeout_is_refused_in_words() -> None:
    with pytest.raises(ValueError, match=r"^an approval timeout cannot be negative$"):
        tool_hook_timing(-1)


def test_an_event_without_its_own_deadline_gets_the_default() -> None:
    r = registration(PreToolUse=42.0)
    assert r.answer_within("PreToolUse") == 42.0
    assert r.answer_within("PreInvocation") == DEFAULT_ANSWER_SECONDS
    assert registration().answer_within("Stop") == DEFAULT_ANSWER_SECONDS


async def test_an_answer_the_caller_could_not_read_is_reported_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reply = wire.HookReply(inject_steps=[wire.InjectedStep(user_message="late note")])

    async def hook(event: str, hook_input: wire.HookInput) -> wire.HookAnswer:
        return reply

    reported: list[tuple[str, wire.HookAnswer]] = []

    async def on_undelivered(event: str, answer: wire.HookAnswer) -> None:
        reported.append((event, answer))

    r = registration(hook, on_undelivered)

    async def caller_gone(body: bytes) -> bool:
        return False

    await r.call_hook("PreInvocation", wire.HookInput(), caller_gone)
    assert reported == [("PreInvocation", reply)]
    messages = [rec.getMessage() for rec in caplog.records]
    assert messages == [
        "PreInvocation hook answer of <Registration session-7 open mcp=[]> could not be "
        "delivered to agy"
    ]
    assert TOKEN not in caplog.text


async def test_a_failing_report_is_logged_with_the_registration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reply = wire.HookReply(inject_steps=[wire.InjectedStep(user_message="late note")])

    async def hook(event: str, hook_input: wire.HookInput) -> wire.HookAnswer:
        return reply

    async def on_undelivered(event: str, answer: wire.HookAnswer) -> None:
        raise RuntimeError("store down")

    async def caller_gone(body: bytes) -> bool:
        return False

    await registration(hook, on_undelivered).call_hook(
        "PreInvocation", wire.HookInput(), caller_gone
    )
    failed = [rec for rec in caplog.records if rec.levelno == logging.ERROR]
    assert [rec.getMessage() for rec in failed] == [
        "on_undelivered of <Registration session-7 open mcp=[]> failed"
    ]
    assert failed[0].exc_info is not None
    assert TOKEN not in caplog.text


async def test_a_late_hook_is_answered_at_its_own_events_deadline() -> None:
    """The deadline is the event's own (0.05 s here), not the default of several seconds: the
    fallback is delivered while the hook function still runs; its late answer then counts as
    undelivered."""
    import anyio

    release = anyio.Event()

    async def slow(event: str, hook_input: wire.HookInput) -> wire.HookAnswer:
        await release.wait()
        return wire.HookReply(inject_steps=[wire.InjectedStep(user_message="too late")])

    reported: list[str] = []

    async def on_undelivered(event: str, answer: wire.HookAnswer) -> None:
        reported.append(event)

    delivered: list[bytes] = []
    answered = anyio.Event()

    async def deliver(body: bytes) -> bool:
        delivered.append(body)
        answered.set()
        return True

    r = registration(slow, on_undelivered, PreInvocation=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.call_hook, "PreInvocation", wire.HookInput(), deliver)
        with anyio.fail_after(DEFAULT_ANSWER_SECONDS - 1):
            await answered.wait()
        assert delivered == [b"{}"], "the fallback, while the hook still runs"
        release.set()
    assert reported == ["PreInvocation"]

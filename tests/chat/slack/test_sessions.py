"""Agent sessions: a turn is a ``processing`` session with a title and Slack's own stop button,
``active`` when it ends (on the answer's ``chat.stopStream`` where it streams), ``closed`` on
``!new``; where Slack has no sessions for the app, that is learnt once from its answer and the
bridge keeps its status line and Stop message."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from bridge.chat.slack.session_record import STATE_FILE, recorded_support
from bridge.chat.slack.status import STATUS_TEXT
from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome
from tests.chat.slack.conftest import (
    ALICE,
    CHANNEL,
    MALLORY,
    RecordingInbound,
    control_message,
    mention_event,
    message_event,
    running_adapter,
)
from tests.chat.slack.fake_slack import FakeSlack

pytestmark = pytest.mark.anyio


async def mention(fake: FakeSlack, text: str) -> tuple[ThreadRef, str]:
    ts = fake.next_ts()
    await fake.wait_ack(await fake.push_event(mention_event(text, ts=ts)))
    return ThreadRef(platform="slack", channel=CHANNEL, thread=ts), ts


async def test_a_short_answer_is_a_session_its_answer_and_its_end(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.agent_app = True
    async with running_adapter(fake_slack, inbound, tmp_path, control_delay=2.0) as adapter:
        thread, ts = await mention(fake_slack, "why is the build red?\nIt was green yesterday.")
        first = len(fake_slack.calls)
        async with adapter.open_reply(thread, ts) as reply:
            await fake_slack.wait_for(
                lambda: fake_slack.sessions.status_of(CHANNEL, ts) == "processing"
            )
            await reply.append("A flaky test.")
            await reply.finish(TurnOutcome(final_text="A flaky test."))
        calls = [c.method for c in fake_slack.calls[first:]]

    assert calls == ["agents.sessions.setStatus", "chat.postMessage", "agents.sessions.setStatus"]
    session = fake_slack.sessions.by_thread[(CHANNEL, ts)]
    assert (session.title, session.initiator, session.status) == (
        "why is the build red?",
        ALICE,
        "active",
    )
    # No status line and no Stop message of our own: Slack shows its stop button.
    assert fake_slack.status_log == []
    assert control_message(fake_slack, CHANNEL, ts) is None


async def test_a_streamed_answer_ends_the_session_on_its_stop_stream(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.agent_app = True
    text = "word " * 80
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake_slack, "explain")
        async with adapter.open_reply(thread, ts) as reply:
            await reply.append(text)
            await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.startStream")))
            await reply.finish(TurnOutcome(final_text=text.strip()))

    [stop] = fake_slack.ok_calls("chat.stopStream")
    assert stop.args.get("session_status") == "active"
    statuses = [s for c, t, s in fake_slack.sessions.log if t == ts]
    assert statuses == ["processing", "active"]  # the end rode on chat.stopStream
    assert [c.args["status"] for c in fake_slack.ok_calls("agents.sessions.setStatus")] == [
        "processing"
    ]
    assert fake_slack.answer_text(CHANNEL, ts) == text.strip()


async def test_a_rolled_over_stream_keeps_the_session_processing(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.agent_app = True
    words = [f"word{i} " for i in range(12)]
    async with running_adapter(fake_slack, inbound, tmp_path, stream_max_age=0.3) as adapter:
        thread, ts = await mention(fake_slack, "go on")
        async with adapter.open_reply(thread, ts) as reply:
            for word in words:
                await reply.append(word * 30)
                await anyio.sleep(0.1)
            assert len(fake_slack.ok_calls("chat.startStream")) >= 2
            assert fake_slack.sessions.status_of(CHANNEL, ts) == "processing"
            await reply.finish(TurnOutcome(final_text="done"))

    assert fake_slack.sessions.status_of(CHANNEL, ts) == "active"


async def test_slacks_stop_button_stops_the_turn_as_the_stop_button_does(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.agent_app = True
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake_slack, "long job")
        async with adapter.open_reply(thread, ts) as reply:
            await reply.append("x" * 300)
            await fake_slack.wait_for(lambda: bool(fake_slack.ok_calls("chat.startStream")))
            # Mallory may not stop it: told privately, nothing stops.
            await fake_slack.wait_ack(await fake_slack.press_session_stop(CHANNEL, ts, MALLORY))
            await fake_slack.wait_for(lambda: len(fake_slack.ephemerals) == 1)
            assert inbound.stops == []
            await fake_slack.wait_ack(await fake_slack.press_session_stop(CHANNEL, ts, ALICE))
            await inbound.wait_for(lambda: bool(inbound.stops))
            for _ in range(3):
                await reply.append(" more")
                await anyio.sleep(0.1)
            await reply.finish(TurnOutcome(final_text="x" * 300, interrupted=True))

    assert [(t, by.id) for t, by in inbound.stops] == [(thread, ALICE)]
    # The streams Slack stopped get no more appends; the final text is an edit.
    assert [c for c in fake_slack.calls if c.error == "stopped_by_user"] == []
    assert fake_slack.sessions.status_of(CHANNEL, ts) == "active"
    assert "Interrupted" in fake_slack.answer_text(CHANNEL, ts)


async def test_new_closes_the_threads_session(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    fake_slack.agent_app = True
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        thread, ts = await mention(fake_slack, "first")
        async with adapter.open_reply(thread, ts) as reply:
            await reply.finish(TurnOutcome(final_text="ok"))
        again = message_event("!new", ts=fake_slack.next_ts(), thread_ts=ts)
        await fake_slack.wait_ack(await fake_slack.push_event(again))
        # The core runs !new and tells the adapter so (tests/core/test_start_thread.py).
        await adapter.conversation_reset(thread)
        await fake_slack.wait_for(lambda: fake_slack.sessions.status_of(CHANNEL, ts) == "closed")


async def test_no_sessions_for_the_app_is_learnt_once_and_the_bridge_keeps_its_own_stop(
    fake_slack: FakeSlack,
    inbound: RecordingInbound,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        for _ in range(2):
            thread, ts = await mention(fake_slack, "hello")
            async with adapter.open_reply(thread, ts) as reply:
                await fake_slack.wait_for(
                    lambda: control_message(fake_slack, CHANNEL, ts) is not None  # noqa: B023
                )
                await fake_slack.wait_for(
                    lambda: fake_slack.status_of(CHANNEL, ts) == STATUS_TEXT  # noqa: B023
                )
                await reply.tool(ToolActivity(name="run_command", summary="ls"))
                await reply.finish(TurnOutcome(final_text="hi"))

    assert [c.error for c in fake_slack.calls_to("agents.sessions.setStatus")] == ["missing_scope"]
    unavailable = [m for m in caplog.messages if "agent sessions are unavailable" in m]
    assert len(unavailable) == 1 and "missing_scope" in unavailable[0]
    assert (tmp_path / STATE_FILE).exists()
    state = recorded_support(tmp_path)
    assert state is not None and state[:2] == ("unavailable", "missing_scope")


def test_doctor_shows_what_slack_answered_about_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic import SecretStr

    from bridge.chat.slack.session import SessionSupport
    from bridge.config import BridgeSection, Config, SlackSection
    from bridge.doctor import Report, check_chats

    config = Config(
        bridge=BridgeSection(data_dir=tmp_path),
        slack=SlackSection(bot_token=SecretStr("xoxb-1"), app_token=SecretStr("xapp-1")),
    )
    check_chats(config, Report())
    assert "Slack agent sessions: not known yet" in capsys.readouterr().out

    SessionSupport(data_dir=tmp_path).unavailable("missing_scope")
    said = Report()
    check_chats(config, said)
    assert any("agent sessions: unavailable (missing_scope)" in line for line in said.lines)


async def test_a_session_the_budget_cannot_start_now_does_not_hold_up_the_answer(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """Two setStatus calls a turn on a Tier 3 method: past ~25 turns a minute the budget has
    none to spare. The turn shows the status line meanwhile; one that ends first has no
    session at all (no end to set either)."""
    from bridge.chat.slack.budget import RateBudget, Tier

    fake_slack.agent_app = True
    tiers = {**RateBudget().tiers, "agents.sessions.setStatus": Tier(1, window=3600.0, burst=1)}
    budget = RateBudget(tiers=tiers)
    assert budget.try_take("agents.sessions.setStatus") == 0  # the hour's one call, spent
    async with running_adapter(
        fake_slack, inbound, tmp_path, control_delay=2.0, budget=budget
    ) as adapter:
        thread, ts = await mention(fake_slack, "quick one")
        first = len(fake_slack.calls)
        async with adapter.open_reply(thread, ts) as reply:
            await fake_slack.wait_for(lambda: fake_slack.status_of(CHANNEL, ts) == STATUS_TEXT)
            await reply.append("Done.")
            # Waiting for the token would take the hour; two calls to the fake take well under
            # 30 s even on a loaded machine (3 s was within its reach).
            with anyio.fail_after(30):
                await reply.finish(TurnOutcome(final_text="Done."))
        calls = [c.method for c in fake_slack.calls[first:]]

    assert calls == ["assistant.threads.setStatus", "chat.postMessage"]
    assert fake_slack.sessions.status_of(CHANNEL, ts) == ""


def _stopped_until(moved: anyio.Event) -> Callable[[], float]:
    """A clock stopped until ``moved`` is set, then a second ahead of anyio's."""
    stopped = anyio.current_time()
    return lambda: anyio.current_time() + 1.0 if moved.is_set() else stopped


async def test_a_session_deferred_a_moment_comes_only_if_the_turn_runs_long(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """A token due in a tenth of a second: a short answer still costs the status and the post
    (not four calls); a turn past the control delay gets its session then."""
    from bridge.chat.slack.budget import RateBudget, Tier

    fake_slack.agent_app = True
    tiers = {**RateBudget().tiers, "agents.sessions.setStatus": Tier(600, burst=1)}
    # The budget's clock moves when the test says: the spent token is still missing when the
    # turn opens (on the real clock, a loaded machine took longer than its tenth of a second
    # to open it, the session came at once and the status line never). The short turn's
    # control delay is a minute, so it is short however slow the machine; the long one's 1 s.
    for long, control_delay in ((False, 60.0), (True, 1.0)):
        token_back = anyio.Event()
        budget = RateBudget(tiers=tiers, clock=_stopped_until(token_back))
        async with running_adapter(
            fake_slack, inbound, tmp_path, control_delay=control_delay, budget=budget
        ) as adapter:
            assert budget.try_take("agents.sessions.setStatus") == 0  # spent the token
            thread, ts = await mention(fake_slack, "one")
            first = len(fake_slack.calls)
            async with adapter.open_reply(thread, ts) as reply:
                await fake_slack.wait_for(
                    lambda: fake_slack.status_of(CHANNEL, ts) == STATUS_TEXT  # noqa: B023
                )
                token_back.set()
                await anyio.sleep(0.4)  # past the token's wait (its retry), short of the delay
                if long:
                    await fake_slack.wait_for(
                        lambda: (
                            fake_slack.sessions.status_of(CHANNEL, ts)  # noqa: B023
                            == "processing"
                        )
                    )
                await reply.append("Done.")
                await reply.finish(TurnOutcome(final_text="Done."))
            calls = [c.method for c in fake_slack.calls[first:]]
            if not long:
                assert calls == ["assistant.threads.setStatus", "chat.postMessage"]
            else:
                assert fake_slack.sessions.status_of(CHANNEL, ts) == "active"


async def test_turns_starting_together_ask_slack_about_sessions_once(
    fake_slack: FakeSlack, inbound: RecordingInbound, tmp_path: Path
) -> None:
    """bench.slack_tiers --no-sessions: 20 turns at once made 10 refused calls before the first
    refusal came back. Now one asks; the others wait for its answer."""
    async with running_adapter(fake_slack, inbound, tmp_path) as adapter:
        threads = [await mention(fake_slack, f"turn {n}") for n in range(5)]
        async with anyio.create_task_group() as tg:
            for thread, ts in threads:

                async def one(thread: ThreadRef = thread, ts: str = ts) -> None:
                    async with adapter.open_reply(thread, ts) as reply:
                        await anyio.sleep(0.3)
                        await reply.finish(TurnOutcome(final_text="ok"))

                tg.start_soon(one)

    assert len(fake_slack.calls_to("agents.sessions.setStatus")) == 1
    assert all(fake_slack.answer_text(CHANNEL, ts) == "ok" for _, ts in threads)

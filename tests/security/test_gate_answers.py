"""An answer decides only the request its author saw (the Slack fake, the core, the simulator).

The race: one approver denies request A with its button; the agent at once asks request B;
a second approver's typed `approve`, written for A, arrives just after B was posted. Before,
it approved B (``Decide(None, …)`` took whichever request waited). Now a bare answer decides
only when one request has been shown for the reaction time with nothing else posted or
decided meanwhile; otherwise the thread is told which request waits and how to answer it, and
`approve 2` decides request 2 only.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.chat.slack.approvals import DENY_ACTION_ID
from bridge.core.approvals import gate
from tests.chat.slack.conftest import (  # noqa: F401 (a fixture)
    ALICE,
    BOB,
    CHANNEL,
    fake_slack,
    mention_event,
    message_event,
)
from tests.chat.slack.fake_slack import FakeSlack
from tests.chat.slack.test_approvals import approvals, click, request, workdir
from tests.chat.slack.test_end_to_end import live_bridge

pytestmark = pytest.mark.anyio
CAROL = ALICE  # the second approver (any allowed user may answer here)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def typed(fake: FakeSlack, ts: str, text: str, user: str) -> None:
    await fake.push_event(message_event(text, user=user, ts=fake.next_ts(), thread_ts=ts))


async def test_a_stale_typed_approve_does_not_approve_the_next_request(
    fake_slack: FakeSlack,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stale answer must land inside the reaction time however slow the machine is: on a
    # loaded one its trip through the fake and the bridge's loop took longer than the 2 s,
    # and the answer, then no longer stale, approved request 2. The window's end is the next
    # test's.
    monkeypatch.setattr(gate, "REACTION_SECONDS", 3600.0)
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        line = "[[tool run_command touch a.txt]] [[tool run_command touch b.txt]]"
        await fake_slack.push_event(mention_event(line, ts=ts))
        first = await request(fake_slack, ts)
        assert "(request 1)" in first.visible and "approve 1" in first.visible
        await click(fake_slack, first, BOB, DENY_ACTION_ID)
        second = await request(fake_slack, ts, 2)
        assert "touch b.txt" in second.visible
        # Carol's `approve` was written for request 1; it arrives just after request 2.
        await typed(fake_slack, ts, "approve", CAROL)
        await fake_slack.wait_for(
            lambda: (
                "Approved" in second.visible
                or any("decided nothing" in m.visible for m in fake_slack.thread(CHANNEL, ts))
            ),
            30,
        )
        assert "Approved" not in second.visible, "the stale answer approved request 2"
        assert "(request 2)" in second.visible
        told = next(m for m in fake_slack.thread(CHANNEL, ts) if "decided nothing" in m.visible)
        assert "Request 2 waits" in told.visible and "approve 2" in told.visible
        assert not (workdir(live) / "b.txt").exists()
        assert "Approved" not in second.visible
        # An answer naming another request decides nothing either.
        await typed(fake_slack, ts, "approve 1", CAROL)
        await fake_slack.wait_for(
            lambda: any(
                "request 1 is not waiting" in m.visible for m in fake_slack.thread(CHANNEL, ts)
            ),
            30,
        )
        assert not (workdir(live) / "b.txt").exists()
        # Naming it decides it.
        await typed(fake_slack, ts, "approve 2", CAROL)
        await live.answer(ts, "You said")
        assert (workdir(live) / "b.txt").exists() and not (workdir(live) / "a.txt").exists()
        assert "Approved by" in second.visible and "Request 2:" in second.visible


async def test_a_bare_answer_decides_the_only_request_once_it_was_shown_long_enough(
    fake_slack: FakeSlack,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gate, "REACTION_SECONDS", 1.0)
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(mention_event("[[tool run_command touch ok.txt]]", ts=ts))
        asked = await request(fake_slack, ts)
        # The reaction time runs from when the bridge had the request's message back (it keeps
        # its handle just after): on a loaded machine, well after the fake showed it.
        with anyio.fail_after(30):
            while not [row for row in await live.bridge.store.waiting_approvals() if row.handle]:
                await anyio.sleep(0.02)
        await anyio.sleep(gate.REACTION_SECONDS + 0.2)
        await typed(fake_slack, ts, "deny: not now", BOB)
        answer = await live.answer(ts, "not now")
        assert "denied by bob: not now" in answer
        assert "Denied by bob" in asked.visible
        assert not (workdir(live) / "ok.txt").exists()


async def test_a_bare_answer_sent_before_the_request_was_shown_does_not_decide_it(
    fake_slack: FakeSlack,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The race on a loaded host (or through another instance): Carol's `approve`, written for
    # request 1, is handled only once request 2 has been shown longer than the reaction time.
    # By the bridge's clock it is no longer too soon; by Slack's (its ts, when she sent it) it
    # came before request 2 existed. It must not approve request 2, which she never saw.
    monkeypatch.setattr(gate, "REACTION_SECONDS", 1.0)
    async with live_bridge(fake_slack, tmp_path, approvals()) as live:
        ts = fake_slack.next_ts()
        line = "[[tool run_command touch a.txt]] [[tool run_command touch b.txt]]"
        await fake_slack.push_event(mention_event(line, ts=ts))
        first = await request(fake_slack, ts)
        written = fake_slack.next_ts()  # Carol sends `approve` for request 1 as Bob denies it
        await click(fake_slack, first, BOB, DENY_ACTION_ID)
        second = await request(fake_slack, ts, 2)
        with anyio.fail_after(30):
            while not [
                row
                for row in await live.bridge.store.waiting_approvals()
                if row.number == 2 and row.handle
            ]:
                await anyio.sleep(0.02)
        await anyio.sleep(gate.REACTION_SECONDS + 0.2)  # handled late: the bridge was busy
        stale = message_event("approve", user=CAROL, ts=written, thread_ts=ts)
        await fake_slack.push_event(stale)
        await fake_slack.wait_for(
            lambda: (
                "Approved" in second.visible
                or any("decided nothing" in m.visible for m in fake_slack.thread(CHANNEL, ts))
            ),
            30,
        )
        assert "Approved" not in second.visible, "an answer sent before request 2 approved it"
        told = next(m for m in fake_slack.thread(CHANNEL, ts) if "decided nothing" in m.visible)
        assert "Request 2 waits" in told.visible
        assert not (workdir(live) / "b.txt").exists()
        # Sent now, long after request 2 was shown: a bare `approve` decides it.
        await typed(fake_slack, ts, "approve", CAROL)
        await live.answer(ts, "You said")
        assert (workdir(live) / "b.txt").exists() and not (workdir(live) / "a.txt").exists()
        assert "Approved by" in second.visible

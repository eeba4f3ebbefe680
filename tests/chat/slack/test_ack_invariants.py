"""Invariant 6 for Slack: a failed store write means no acknowledgement, and the redelivery that
follows is processed once. Slack (the fake) over Socket Mode, the real core and store, the agy
simulator. The store refuses writes the way a full disk does (``PRAGMA query_only``, as in
tests/faults/test_store_faults.py).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.core.events import IncomingMessage, SubmitOutcome
from bridge.core.store.rows import StoreError
from tests.chat.slack.conftest import CHANNEL, mention_event
from tests.chat.slack.fake_slack import FakeSlack
from tests.chat.slack.test_end_to_end import live_bridge
from tests.faults.console import sim_conversation_messages
from tests.faults.test_store_faults import refuse_writes

pytestmark = pytest.mark.anyio


async def test_a_refused_event_is_not_acked_and_its_redelivery_runs_once(
    fake_slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with live_bridge(fake_slack, tmp_path) as live:
        core = live.bridge.core
        refused = anyio.Event()
        outcomes: list[SubmitOutcome] = []
        submit = core.submit

        async def watched(message: IncomingMessage) -> SubmitOutcome:
            try:
                outcome = await submit(message)
            except StoreError:
                refused.set()
                raise
            outcomes.append(outcome)
            return outcome

        monkeypatch.setattr(core, "submit", watched)
        ts = fake_slack.next_ts()
        event = mention_event("deliver me once", ts=ts)

        await refuse_writes(live, True)  # type: ignore[arg-type]
        unacked = await fake_slack.push_event(event, event_id="EvONCE")
        with anyio.fail_after(20):
            await refused.wait()
        await refuse_writes(live, False)  # type: ignore[arg-type]

        # Slack redelivers what it never got an ack for.
        again = await fake_slack.push_event(event, event_id="EvONCE", retry_attempt=1)
        await fake_slack.wait_ack(again, 20)
        assert unacked not in fake_slack.acks, "an event the store refused was acknowledged"
        await live.answer(ts, "deliver me once")

        # And once more, after it was stored: acknowledged, and dropped as a duplicate.
        third = await fake_slack.push_event(event, event_id="EvONCE", retry_attempt=2)
        await fake_slack.wait_ack(third, 20)
        assert outcomes == [SubmitOutcome.ACCEPTED, SubmitOutcome.DUPLICATE]
        history = await live.bridge.store.history(f"slack|{CHANNEL}|{ts}", 50)
        assert [text for _, who, text in history if who != "agent"] == ["deliver me once"]
        sent = sim_conversation_messages(tmp_path / "sim-home", ["user"])
        assert sum(text.count("deliver me once") for text in sent) == 1

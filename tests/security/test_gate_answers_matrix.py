"""An answer decides only the request its author saw, in Matrix (a real Synapse, the core, the
agy simulator): the stale typed `approve` of the race decides nothing, and a Matrix reply to a
request's event decides that request."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.chat.matrix.approvals import DENY_KEY
from bridge.core.approvals import gate
from tests.chat.matrix.conftest import synapse  # noqa: F401 (a fixture)
from tests.chat.matrix.synapse import Synapse
from tests.chat.matrix.test_approvals import asked, by_bot, live_bridge, react

pytestmark = [pytest.mark.anyio, pytest.mark.synapse, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_stale_answer_decides_nothing_and_a_reply_decides_its_request(
    synapse: Synapse,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stale answer must land inside the reaction time however slow the machine is: its
    # trip through a loaded Synapse and the bridge's sync can take longer than the 2 s, and the
    # answer, then no longer stale, would approve request 2 (tests/security/test_gate_answers.py
    # has the window's end).
    monkeypatch.setattr(gate, "REACTION_SECONDS", 3600.0)
    async with live_bridge(synapse, tmp_path) as live:
        await live.alice.say(
            live.room, "[[tool run_command touch a.txt]] [[tool run_command touch b.txt]]"
        )
        first = await asked(live, "touch a.txt")
        await react(live.bob, live.room, first, DENY_KEY)
        second = await asked(live, "touch b.txt")
        # Bob's typed `approve`, meant for the first request, arrives just after the second.
        await live.bob.say(live.room, "approve")
        await live.alice.wait_event(live.room, by_bot(live, "decided nothing"), within=60)
        notice = await live.alice.wait_event(live.room, by_bot(live, "Request 2 waits"))
        assert "approve 2" in notice.source["content"]["body"]
        assert not (live.work / "b.txt").exists()
        # A reply to the request's own event decides it, whenever it comes.
        await live.bob.say(
            live.room, "approve", **{"m.relates_to": {"m.in_reply_to": {"event_id": second}}}
        )
        await live.alice.wait_event(live.room, by_bot(live, "Approved by Bob"), within=60)
        await live.alice.wait_event(live.room, by_bot(live, "You said"), within=60)
        assert (live.work / "b.txt").exists() and not (live.work / "a.txt").exists()

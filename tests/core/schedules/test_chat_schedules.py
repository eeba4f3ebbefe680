"""``!schedule`` in a thread: added (typographic quotes, a time zone, ``--here``), listed with
the next and last runs, removed by its author or an approver; bad expressions answered
clearly; a run is its author's turn, refused (told, not run) when the author lost access or is
over a budget."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from bridge.core.events import Author, IncomingMessage, ThreadRef
from tests.core.harness import Harness, running
from tests.core.schedules.fake_clock import FakeClock, utc

pytestmark = pytest.mark.anyio

HERE = ThreadRef(platform="slack", channel="C1", thread="100.1")


def access(*users: str, **more: Any) -> dict[str, Any]:
    return {
        "slack": {"allowed_users": list(users), "allowed_channels": ["C1"]},
        "approvals": {"mode": "off", "approvers": ["U3"]},
        **more,
    }


async def say(h: Harness, text: str, who: str = "U1", name: str = "Alice") -> None:
    h.adapter.sent += 1
    mid = f"m{h.adapter.sent}"
    await h.bridge.core.submit(
        IncomingMessage(
            thread=HERE,
            event_id=mid,
            message_id=mid,
            author=Author(id=who, display_name=name),
            text=text,
        )
    )


def last_notice(h: Harness) -> str:
    return h.adapter.notices[-1][1]


async def add(h: Harness, text: str) -> str:
    await say(h, text)
    found = re.search(r"Scheduled `([0-9a-f]{6})`", last_notice(h))
    assert found, last_notice(h)
    return found.group(1)


async def test_add_list_and_remove_in_the_chat(tmp_path: Path) -> None:
    clock = FakeClock(utc("2027-01-04 07:50"))
    async with running(
        tmp_path, extra=access("U1", "U2", "U3"), clock=clock, platform="slack"
    ) as h:
        await clock.idle()
        # Typographic quotes (a phone's), a zone, --here.
        ident = await add(h, "!schedule add “0 9 * * 1-5” Europe/Paris --here check the CI")
        assert "Next run: 2027-01-04 09:00 Europe/Paris" in last_notice(h)  # Monday
        other = await add(h, '!schedule add "30 6 * * *" summarise the night')
        assert "(UTC), a new thread each run" in last_notice(h)
        # Bad expressions: a clear answer, nothing added.
        await say(h, '!schedule add "61 * * * *" never')
        assert "is not a valid cron expression" in last_notice(h)
        await say(h, '!schedule add "0 9 * *" four fields')
        assert "it needs five fields" in last_notice(h) and "it has 4" in last_notice(h)
        await say(h, '!schedule add "0 9 * * *" Mars/Olympus climb')
        assert "unknown time zone `Mars/Olympus`" in last_notice(h)
        await say(h, "!schedule add 0 9 * * * unquoted")
        assert "put the cron expression in quotes" in last_notice(h)
        await say(h, "!schedule list")
        listing = last_notice(h)
        assert f"`{ident}` `0 9 * * 1-5` (Europe/Paris), by Alice (U1), in this thread" in listing
        assert f"`{other}` `30 6 * * *` (UTC)" in listing and "never" not in listing
        # What a home view (Slack's App Home) lists for Alice, and for Bob (nothing).
        scheduler = h.bridge.core.scheduler
        assert scheduler is not None
        mine = {s.id: s for s in await scheduler.person_schedules("slack", "U1")}
        assert mine[ident].when == "At 09:00 on Monday through Friday (Europe/Paris)"
        assert mine[ident].thread == HERE and mine[other].thread is None
        assert mine[ident].next_at == utc("2027-01-04 08:00").timestamp()
        assert await scheduler.person_schedules("slack", "U2") == []
        # 09:00 in Paris is 08:00 UTC: the run is posted here, as Alice's.
        await clock.move_to(utc("2027-01-04 08:00"))
        assert (HERE.key, f"**Alice (schedule {ident}) (U1)** asks:\n\ncheck the CI") in (
            h.adapter.notices
        )
        [reply] = await h.adapter.wait_finished(1, HERE)
        assert reply.author is not None and reply.author.id == "U1"
        await say(h, "!schedule list")
        assert re.search(
            r"last: 2027-01-04 09:00 Europe/Paris: done, \d+ s, [\d,.]+k? tokens", last_notice(h)
        ), last_notice(h)
        # Bob may not remove Alice's schedule; an approver (U3) may, and Alice hers.
        await say(h, f"!schedule remove {ident}", who="U2", name="Bob")
        assert "only its author (Alice (U1)) or an approver" in last_notice(h)
        await say(h, f"!schedule remove {ident}", who="U3", name="Carol")
        assert f"Schedule `{ident}` removed." == last_notice(h)
        await say(h, f"!schedule remove {other}")
        await say(h, "!schedule list")
        assert "No schedules in this channel" in last_notice(h)
        await clock.move_to(utc("2027-01-05 08:00"))
        assert len(h.adapter.replies) == 1, "removed schedules do not run"


async def test_a_run_of_someone_who_lost_access_is_refused_and_told(tmp_path: Path) -> None:
    clock = FakeClock(utc("2027-01-04 07:50"))
    async with running(tmp_path, extra=access("U1", "U2"), clock=clock, platform="slack") as h:
        await clock.idle()
        ident = await add(h, '!schedule add "0 8 * * *" --here check the CI')
    # The operator takes Alice off the list; her schedule stays, and does not run as her.
    clock = FakeClock(utc("2027-01-04 07:55"))
    async with running(tmp_path, extra=access("U2"), clock=clock, platform="slack") as h:
        await clock.move_to(utc("2027-01-04 08:00"))
        text = (
            f"**schedule {ident}** (Alice (U1)) did not run at 2027-01-04 08:00 UTC: "
            "Alice (U1) is no longer allowed to use the agent here"
        )
        assert (HERE.key, text) in h.adapter.notices
        assert h.adapter.calls["open_reply"] == 0 and h.adapter.opened == 0


async def test_a_run_over_its_authors_budget_is_refused_and_told(tmp_path: Path) -> None:
    tiny = [{"name": "tiny", "scope": "user", "period": "day", "limit_tokens": 1}]
    clock = FakeClock(utc("2027-01-04 07:50"))
    settings = access("U1", "U2", budgets=tiny)
    async with running(tmp_path, extra=settings, clock=clock, platform="slack") as h:
        await clock.idle()
        ident = await add(h, '!schedule add "0 8 * * *" check the CI')
        await say(h, "hello")  # Alice's turn uses her budget up
        await h.adapter.wait_finished(1, HERE)
        await clock.move_to(utc("2027-01-04 08:00"))
        [note] = [t for _, t in h.adapter.notices if "did not run" in t]
        assert f"**schedule {ident}** (Alice (U1))" in note
        assert "Alice (U1) is over the budget `tiny`" in note
        assert len(h.adapter.replies) == 1, "not run"
        await say(h, "!schedule list")
        assert "refused: Alice (U1) is over the budget `tiny`" in last_notice(h)

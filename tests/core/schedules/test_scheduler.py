"""The scheduler on the simulator, with a clock the test moves: a run due while the bridge is
down is made once after start (or skipped, with a note, beyond catch_up); a clock that jumps
forwards makes one run, not a burst, and one that goes back repeats none; a thread busy with a
person's turn is not joined."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.config import ConfigError, build_config
from bridge.core.events import ApprovalChoice, Author, ThreadRef
from tests.core.harness import Harness, running, thread
from tests.core.schedules.fake_clock import FakeClock, utc

pytestmark = pytest.mark.anyio

OPENING = "**schedule nightly** asks:"


def nightly(**fields: Any) -> dict[str, Any]:
    schedule = {
        "name": "nightly",
        "cron": "0 9 * * *",
        "timezone": "UTC",
        "chat": "test",
        "channel": "room",
        "prompt": "summarise the issues opened yesterday",
    }
    return {"schedules": [schedule | fields]}


def openings(h: Harness) -> list[str]:
    return [key for key, text in h.adapter.notices if text.startswith(OPENING)]


def notes(h: Harness, words: str) -> list[str]:
    return [text for _, text in h.adapter.notices if words in text]


async def test_a_run_due_while_the_bridge_was_down_is_made_once_after_start(
    tmp_path: Path,
) -> None:
    clock = FakeClock(utc("2027-01-04 08:00"))
    async with running(tmp_path, extra=nightly(), clock=clock) as h:
        await clock.idle()  # first seen at 08:00: nothing is owed before that
        assert openings(h) == []
    # Down at 09:00; up at 09:40, within the hour of catch_up: made once, on its model, as
    # the bridge's schedule (in the thread and the audit trail).
    clock = FakeClock(utc("2027-01-04 09:40"))
    async with running(tmp_path, extra=nightly(model="sim-echo"), clock=clock) as h:
        await clock.idle()
        [key] = openings(h)
        [reply] = await h.adapter.wait_finished(1, ThreadRef.from_key(key))
        assert reply.outcome is not None and reply.outcome.error is None
        assert (await h.bridge.store.thread(key)).model == "sim-echo"
        [audited] = await h.bridge.store.database.fetch(
            "SELECT person, thread_key, detail_json FROM audit WHERE kind = 'schedule_run'"
        )
        assert audited["person"] == "schedule:nightly" and audited["thread_key"] == key
        assert '"due": "2027-01-04T09:00:00+00:00"' in audited["detail_json"]
        assert '"outcome": "started"' in audited["detail_json"]
        await h.say("!status", where=ThreadRef.from_key(key))
        assert notes(h, "• Scheduled run: `nightly` (`0 9 * * *`, UTC), as the bridge, last at")
        for later in ("2027-01-04 09:41", "2027-01-04 09:59", "2027-01-04 10:30"):
            await clock.move_to(utc(later))
        assert len(openings(h)) == 1
    # A restart within the same catch-up window makes it no second time.
    clock = FakeClock(utc("2027-01-04 09:50"))
    async with running(tmp_path, extra=nightly(), clock=clock) as h:
        await clock.idle()
        assert openings(h) == []
        await clock.move_to(utc("2027-01-05 09:00"))  # the next day's run
        assert len(openings(h)) == 1


async def test_a_run_missed_beyond_catch_up_is_skipped_and_the_channel_is_told(
    tmp_path: Path,
) -> None:
    clock = FakeClock(utc("2027-01-04 08:00"))
    async with running(tmp_path, extra=nightly(catch_up="30m"), clock=clock) as h:
        await clock.idle()
    clock = FakeClock(utc("2027-01-04 11:00"))
    async with running(tmp_path, extra=nightly(catch_up="30m"), clock=clock) as h:
        await clock.idle()
        assert openings(h) == []
        [note] = notes(h, "did not run at 2027-01-04 09:00 UTC")
        assert "30 minutes" in note and "skipped" in note and "2027-01-05 09:00 UTC" in note
        await clock.move_to(utc("2027-01-04 11:05"))
        assert len(notes(h, "did not run")) == 1, "told once"
        await clock.move_to(utc("2027-01-05 09:00"))
        [key] = openings(h)
        await h.adapter.wait_finished(1, ThreadRef.from_key(key))


async def test_a_clock_that_jumps_forwards_makes_one_run_and_one_that_goes_back_none(
    tmp_path: Path,
) -> None:
    hourly = nightly(cron="0 * * * *")
    clock = FakeClock(utc("2027-01-04 08:30"))
    async with running(tmp_path, extra=hourly, clock=clock) as h:
        await clock.idle()
        await clock.move_to(utc("2027-01-04 09:00"))
        assert len(openings(h)) == 1
        # The host slept (or the clock was set) through 10:00 and 11:00: one run, for 12:00.
        await clock.move_to(utc("2027-01-04 12:20"))
        assert len(openings(h)) == 2
        # Back by two hours: 10:00 and 11:00 are not made now, nor 12:00 again.
        for back in ("2027-01-04 10:05", "2027-01-04 11:00", "2027-01-04 12:00"):
            await clock.move_to(utc(back))
        assert len(openings(h)) == 2
        await clock.move_to(utc("2027-01-04 13:00"))
        assert len(openings(h)) == 3
        await h.adapter.wait_finished(3)
        # Never slept past a due time: at most the next run, at most MAX_SLEEP.
        assert all(0 <= s <= 30 for s in clock.slept)


async def test_a_run_for_a_thread_busy_with_a_persons_turn_opens_a_new_thread(
    tmp_path: Path,
) -> None:
    """Documented choice (docs/schedules.md): a run never joins a running turn (it would be
    injected into that person's turn); it opens a new thread, and says so in the busy one."""
    clock = FakeClock(utc("2027-01-04 08:00"))
    async with running(tmp_path, extra=nightly(thread="t1"), clock=clock) as h:
        await clock.idle()
        started, go = h.flag("started"), h.flag("go")
        # The turn runs until the run was due (a sleep of 3 s was a guess at how long that
        # takes, which a loaded machine could outrun).
        await h.say(f"long work [[touch {started}]] [[hold {go}]]")
        with anyio.fail_after(20):
            while not started.exists():
                await anyio.sleep(0.05)
        await clock.move_to(utc("2027-01-04 09:00"))
        [moved] = notes(h, "a turn is running in this thread")
        assert (thread().key, moved) in h.adapter.notices
        [key] = openings(h)
        assert key != thread().key
        go.touch()
        [mine] = await h.adapter.wait_finished(1, thread())
        assert mine.author is not None and mine.author.id == "@alice:test"
        assert mine.outcome is not None and mine.outcome.error is None
        await h.adapter.wait_finished(1, ThreadRef.from_key(key))
        # Idle the next day: the run is posted in the thread itself, its turn answers there.
        await clock.move_to(utc("2027-01-05 09:00"))
        assert (thread().key, f"{OPENING}\n\nsummarise the issues opened yesterday") in (
            h.adapter.notices
        )
        await h.adapter.wait_finished(2, thread())


async def test_a_run_for_a_busy_room_without_threads_waits_for_the_turn_to_end(
    tmp_path: Path,
) -> None:
    """A room without threads is one conversation (thread = "new" posts in the room): a run
    due while a person's turn runs there waits for that turn's end, then starts."""
    room = ThreadRef(platform="test", channel="room")
    clock = FakeClock(utc("2027-01-04 08:00"))
    async with running(tmp_path, extra=nightly(), clock=clock) as h:
        await clock.idle()
        started, go = h.flag("started"), h.flag("go")
        await h.say(f"long work [[touch {started}]] [[hold {go}]]", where=room)
        with anyio.fail_after(20):
            while not started.exists():
                await anyio.sleep(0.05)
        await clock.move_to(utc("2027-01-04 09:00"))
        assert notes(h, "it starts when that turn ends")
        assert openings(h) == [], "not while the person's turn runs"
        go.touch()
        [mine] = await h.adapter.wait_finished(1, room)
        assert mine.author is not None and mine.author.id == "@alice:test"
        with anyio.fail_after(20):
            while not openings(h):
                await anyio.sleep(0.05)
        [key] = openings(h)
        await h.adapter.wait_finished(1, ThreadRef.from_key(key))


async def test_a_run_asks_a_person_to_approve_in_its_thread(tmp_path: Path) -> None:
    approvals = {"approvals": {"mode": "ask", "timeout": 60, "approvers": ["@bob:test"]}}
    prompt = "[[tool run_command touch fixed.txt]]"
    clock = FakeClock(utc("2027-01-04 08:00"))
    async with running(tmp_path, extra=nightly(prompt=prompt) | approvals, clock=clock) as h:
        await clock.idle()
        await clock.move_to(utc("2027-01-04 09:00"))
        [key] = openings(h)
        await h.adapter.changes.until(lambda: h.adapter.requests)
        [request] = h.adapter.requests
        assert request.thread.key == key and request.requested_by == Author.schedule("nightly")
        bob = Author(id="@bob:test", display_name="Bob")
        await h.bridge.core.decide(request.thread, "req-1", ApprovalChoice.APPROVE, bob)
        [reply] = await h.adapter.wait_finished(1, request.thread)
        assert reply.outcome is not None and reply.outcome.error is None


async def test_a_run_works_in_the_schedules_workspace(tmp_path: Path) -> None:
    channel_dir, reports = tmp_path / "channel-repo", tmp_path / "reports"
    channel_dir.mkdir()
    reports.mkdir()
    settings = nightly(prompt="write it [[touch made-here]]", workspace=str(reports)) | {
        "workspaces": [{"channel": "room", "path": str(channel_dir)}, {"path": str(reports)}]
    }
    clock = FakeClock(utc("2027-01-04 08:00"))
    async with running(tmp_path, extra=settings, clock=clock) as h:
        await clock.idle()
        await clock.move_to(utc("2027-01-04 09:00"))
        [key] = openings(h)
        await h.adapter.wait_finished(1, ThreadRef.from_key(key))
        assert (reports / "made-here").exists() and not (channel_dir / "made-here").exists()
        # A person's thread in the same channel works in the channel's.
        await h.say("mine [[touch mine-here]]")
        await h.adapter.wait_finished(1, thread())
        assert (channel_dir / "mine-here").exists()


def test_a_schedules_workspace_must_be_a_configured_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not the path of a \\[\\[workspaces\\]\\] entry"):
        build_config(nightly(workspace=str(tmp_path)), environ={})

"""CI back in the thread (bridge/core/pulls/follow.py): each change told once, whoever saw it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.config import build_config
from bridge.core.events import ThreadRef
from bridge.core.leases import LocalLeases
from bridge.core.pulls.follow import CheckFollower, change_text
from bridge.core.pulls.service import PullRequests
from bridge.core.store import PullRow
from bridge.core.store.opening import open_store
from bridge.forge.base import Check

pytestmark = pytest.mark.anyio
THREAD = ThreadRef(platform="slack", channel="C1", thread="1.0")
SHA = "a" * 40


def row() -> PullRow:
    return PullRow(
        thread_key=THREAD.key,
        forge="github",
        repo="team/app",
        number=4,
        head="agy/x",
        base="main",
        url="https://forge/team/app/pull/4",
        state="open",
        pushed_sha=SHA,
        checks_sha="",
        checks={},
    )


def follower(store: Any, said: list[str]) -> CheckFollower:
    async def say(thread: ThreadRef, text: str) -> None:
        said.append(text)

    async def nothing(*_: Any) -> None:
        return None

    config = build_config({}, {})
    pulls = PullRequests(config, store, None, say, nothing, nothing, None, lambda: None, scrub=str)  # type: ignore[arg-type]
    return CheckFollower(pulls, LocalLeases("here"))


async def test_each_change_is_told_once_by_whichever_follower_saw_it(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        await store.save_pull(row())
        one: list[str] = []
        two: list[str] = []
        first, second = follower(store, one), follower(store, two)
        running = [Check(name="build", state="pending"), Check(name="lint", state="running")]
        assert await first.report_checks(THREAD.key, SHA, running)
        assert not await second.report_checks(THREAD.key, SHA, running)  # a webhook, late
        assert not await first.report_checks(THREAD.key, SHA, running)  # the next poll
        failed = [
            Check(name="build", state="failed", url="https://ci/build/9", job_id="9"),
            Check(name="lint", state="running"),
        ]
        assert await second.report_checks(THREAD.key, SHA, failed)
        assert not await first.report_checks(THREAD.key, SHA, failed)
        told = one + two
        assert len(told) == 2
        assert "⏳ running: **build**, **lint**" in told[0]
        assert "❌ failed: **build** (https://ci/build/9)" in told[1]
        assert "⏳ running: lint" in told[1] and "`!fix`" in told[1]
        # A new commit starts over: its checks are told again.
        assert await first.report_checks(
            THREAD.key, "b" * 40, [Check(name="build", state="passed")]
        )
        assert "all checks passed" in one[-1]


def test_change_text_marks_what_changed() -> None:
    text = change_text(
        row(),
        SHA,
        {"build": "running", "lint": "passed"},
        [Check(name="build", state="passed"), Check(name="lint", state="passed")],
    )
    assert text.splitlines()[0] == "CI on pull request #4 (`aaaaaaa`): all checks passed."
    assert "✅ passed: **build**, lint" in text


class HeldElsewhere(LocalLeases):
    async def holder(self, key: str) -> str | None:
        return "another-instance"


async def test_only_the_lease_holder_looks(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        await store.save_pull(row())
        said: list[str] = []
        looked: list[str] = []
        mine = follower(store, said)

        async def target(thread: ThreadRef) -> Any:
            looked.append(thread.key)
            raise AssertionError("not for this instance")

        elsewhere = CheckFollower(mine.pulls, HeldElsewhere("here"))
        mine.pulls.target = target  # type: ignore[method-assign]
        assert not await elsewhere._look(row())
        assert looked == []

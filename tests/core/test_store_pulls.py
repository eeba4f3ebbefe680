"""A thread's pull request link (store/pulls.py), on both databases."""

from __future__ import annotations

import pytest

from bridge.core.store import PullRow
from bridge.core.store.opening import open_store

pytestmark = pytest.mark.anyio


def pull(**change: object) -> PullRow:
    values: dict[str, object] = {
        "thread_key": "slack:C1:1.0",
        "forge": "github",
        "repo": "team/app",
        "number": 7,
        "head": "agy/t1",
        "base": "main",
        "url": "https://x/7",
        "state": "open",
        "pushed_sha": "a" * 40,
        "checks_sha": "",
        "checks": {},
    }
    values.update(change)
    return PullRow.model_validate(values)


async def test_link_found_by_thread_and_by_number(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.save_pull(pull())
        assert (await store.pull("slack:C1:1.0")) == pull()
        assert (await store.pull_by_number("github", "team/app", 7)) == pull()
        assert await store.pull_by_number("gitlab", "team/app", 7) is None
        await store.set_pull_pushed("slack:C1:1.0", "b" * 40)
        assert await store.close_pull("slack:C1:1.0", "merged")
        row = await store.pull("slack:C1:1.0")
        assert row is not None and row.pushed_sha == "b" * 40 and row.state == "merged"
        assert await store.open_pulls() == []


async def test_a_check_change_is_claimed_once(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.save_pull(pull())
        seen = await store.pull("slack:C1:1.0")
        assert seen is not None
        now = {"ci": "running"}
        # Two followers (a webhook and a poll, or two instances) read the same row.
        assert await store.claim_checks(seen, "c" * 40, now)
        assert not await store.claim_checks(seen, "c" * 40, now)
        again = await store.pull("slack:C1:1.0")
        assert again is not None and again.checks == now and again.checks_sha == "c" * 40
        assert await store.claim_checks(again, "c" * 40, {"ci": "failed"})


async def test_a_pull_leaves_open_once_across_instances(store_where: str) -> None:
    """``!merge`` and the CI follower (of this instance or another) both saw the merge: the
    one whose record moves the row from open tells it, the other does not."""
    async with open_store(store_where) as one, open_store(store_where) as two:
        await one.save_pull(pull())
        assert await two.close_pull("slack:C1:1.0", "merged")
        assert not await one.close_pull("slack:C1:1.0", "merged")
        assert not await two.close_pull("slack:C1:1.0", "closed")
        row = await one.pull("slack:C1:1.0")
        assert row is not None and row.state == "merged"
        # A new PR of the thread is open again, and leaves open once again.
        await one.save_pull(pull(number=8))
        assert await one.close_pull("slack:C1:1.0", "closed")
        assert not await two.close_pull("slack:C1:1.0", "merged")

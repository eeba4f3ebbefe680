"""Stored requests, decisions and allow lists: decided once, kept across a reopen (on SQLite
and on PostgreSQL alike)."""

from __future__ import annotations

import pytest

from bridge.core.events import Author
from bridge.core.store.opening import open_store
from bridge.core.store.rows import ApprovalState

pytestmark = pytest.mark.anyio
BOB = Author(id="@bob:x", display_name="Bob")


async def test_a_request_is_decided_once_and_survives_a_reopen(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_approval("a", "t|c|1", "run_command", {"CommandLine": "ls"}, "ls", BOB)
        await store.add_approval("b", "t|c|1", "run_command", {"CommandLine": "pwd"}, "pwd", None)
        await store.set_approval_handle("a", "m1")
        assert [r.id for r in await store.waiting_approvals("t|c|1")] == ["a", "b"]
        assert await store.settle_approval("a", ApprovalState.DENIED, by=BOB, reason="no")
        assert not await store.settle_approval("a", ApprovalState.APPROVED, by=BOB)
    async with open_store(store_where) as store:
        row = await store.approval_by_handle("t|c|1", "m1")
        assert row is not None and row.state is ApprovalState.DENIED
        assert row.decided_by == BOB and row.reason == "no" and row.args == {"CommandLine": "ls"}
        assert row.requested_by == BOB and row.decided_at is not None
        assert [r.id for r in await store.waiting_approvals()] == ["b"]


async def test_allow_lists_are_per_thread_and_can_be_cleared(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_allowed("t|c|1", "make test", BOB)
        await store.add_allowed("t|c|1", "make test", BOB)  # once only
        await store.add_allowed("t|c|1", "ls", None)
        await store.add_allowed("t|c|2", "pwd", None)
        assert await store.allow_list("t|c|1") == ["make test", "ls"]
        assert await store.clear_allowed("t|c|1") == 2
        assert await store.allow_list("t|c|1") == []
        assert await store.allow_list("t|c|2") == ["pwd"]

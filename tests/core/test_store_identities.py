"""Pinned identities and verifications (issue 31), on SQLite and PostgreSQL (``store_where``)."""

from __future__ import annotations

import pytest

from bridge.core.store.identities import (
    VERIFICATION_CONFIRMED,
    VERIFICATION_ENDED,
    VERIFICATION_REJECTED,
)
from bridge.core.store.opening import open_store

pytestmark = pytest.mark.anyio
ALICE = "@alice:example.org"


async def test_the_first_key_is_pinned_and_a_change_waits_for_acknowledgement(
    store_where: str,
) -> None:
    async with open_store(store_where) as store:
        assert (await store.check_identity(ALICE, "K1")).master_key == "K1"
        assert await store.acknowledge_identity(ALICE) is None
        changed = await store.check_identity(ALICE, "K2")
        assert (changed.master_key, changed.changed_key) == ("K1", "K2")
        # Seen again: still untrusted, and the time of the change stays the first one's.
        again = await store.check_identity(ALICE, "K2")
        assert (again.master_key, again.changed_at) == ("K1", changed.changed_at)
        # Back to the pinned key: the change is forgotten, nothing to acknowledge.
        back = await store.check_identity(ALICE, "K1")
        assert (back.master_key, back.changed_key) == ("K1", None)
        await store.check_identity(ALICE, "K3")
        acknowledged = await store.acknowledge_identity(ALICE)
        assert acknowledged is not None and acknowledged.master_key == "K3"
        assert (await store.check_identity(ALICE, "K3")).changed_key is None
        assert [p.user_id for p in await store.identity_pins()] == [ALICE]


async def test_a_verification_is_answered_once(store_where: str) -> None:
    async with open_store(store_where) as store:
        await store.add_verification("v1", ALICE, "DEV", "🐶 🐱")
        await store.add_verification("v2", ALICE, "DEV", "🦁 🐎")
        assert [v.id for v in await store.verifications()] == ["v1", "v2"]
        assert await store.answer_verification("v1", VERIFICATION_CONFIRMED)
        assert not await store.answer_verification("v1", VERIFICATION_REJECTED)
        row = await store.verification("v1")
        assert row is not None and row.state == VERIFICATION_CONFIRMED
        # A new run of the adapter: what waited cannot finish any more.
        assert await store.end_waiting_verifications() == 1
        assert await store.verifications() == []
        row = await store.verification("v2")
        assert row is not None and row.state == VERIFICATION_ENDED

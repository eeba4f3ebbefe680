"""The console's sign-in links and sessions in the store: one key for every instance, a link
used once whichever instances race for it, on both databases."""

from __future__ import annotations

import anyio
import pytest

from bridge.core.events import Author
from bridge.core.signin import WebSessions
from bridge.core.store.opening import open_store

pytestmark = pytest.mark.anyio

ALICE = Author(id="@alice:test", display_name="Alice")


async def test_a_link_made_on_one_instance_is_used_once_across_instances(
    store_where: str,
) -> None:
    async with open_store(store_where) as a, open_store(store_where) as b:
        one = WebSessions(a.database, 300, 3600)
        other = WebSessions(b.database, 300, 3600)
        link = await one.new_link(ALICE, "test")
        assert await other.link_usable(link)  # the same signing key, read from the store
        results: list[object] = []

        async def use(sessions: WebSessions) -> None:
            results.append(await sessions.use_link(link))

        async with anyio.create_task_group() as tg:
            for sessions in (one, other, one, other):
                tg.start_soon(use, sessions)
        assert [r for r in results if r is not None] == [(ALICE, "test")]
        assert not await one.link_usable(link) and not await other.link_usable(link)
        # A session opened on one instance holds on the other; closed, on neither.
        session_id = await one.open(ALICE, "test")
        seen = await other.session(session_id)
        assert seen is not None and seen.author == ALICE and len(seen.csrf) >= 32
        await other.close(session_id)
        assert await one.session(session_id) is None


async def test_a_link_past_its_time_or_with_a_bad_signature_is_refused(store_where: str) -> None:
    async with open_store(store_where) as store:
        short = WebSessions(store.database, 0.001, 3600)
        link = await short.new_link(ALICE, "test")
        with anyio.fail_after(5):
            while await short.link_usable(link):
                await anyio.sleep(0.01)
        assert await short.use_link(link) is None
        fresh = await WebSessions(store.database, 300, 3600).new_link(ALICE, "test")
        token, _, signature = fresh.partition(".")
        assert await short.use_link(f"{token}.{signature[::-1]}") is None
        assert await short.use_link(token) is None
        assert await short.use_link(fresh) == (ALICE, "test")

"""Two instances on one PostgreSQL: the console of the instance that does not run a thread
acts on it through the chat's own routing (an approval reaches the holder's gate and agy runs
the command; a Stop is the holder's `!stop`)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio.from_thread
from starlette.testclient import TestClient

from bridge.app import open_bridge
from bridge.config import build_config
from bridge.web.app import console_app
from tests.core.harness import Harness, heard_once_listening
from tests.doubles import signed_in
from tests.pg import Postgres
from tests.web.harness import BASE, ROOM, MembersAdapter, dm, people, settings


@asynccontextmanager
async def _instance(tmp: Path, name: str, url: str) -> AsyncIterator[Harness]:
    raw = settings(
        tmp / name,
        # The product's lease: the test assumes the thread stays where it runs (a 3 s lease
        # lapses in a stall of over 2 s under load, and the other instance takes it over).
        store={"url": url, "instance": name},
        approvals={"mode": "ask", "timeout": 60, "approvers": ["@alice:test"]},
    )
    adapter = MembersAdapter(people())
    async with open_bridge(build_config(raw, environ={}), {"test": adapter}) as bridge:
        listening = heard_once_listening(bridge)
        await bridge.core.recover()
        with anyio.fail_after(30):
            await listening.wait()  # the other instance's commands reach this one
        yield Harness(bridge, adapter, tmp / name)


@asynccontextmanager
async def _two(tmp: Path, url: str) -> AsyncIterator[tuple[Harness, Harness]]:
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp / "sim-home"))
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(_instance(tmp, "a", url))
        b = await stack.enter_async_context(_instance(tmp, "b", url))
        yield a, b


async def _holder(first: Harness, second: Harness) -> tuple[Harness, Harness]:
    """The instance that asked for the thread's approval (it runs the thread), and the other."""
    with anyio.fail_after(60):
        while True:
            for holder, other in ((first, second), (second, first)):
                if holder.adapter.requests:
                    return holder, other
            await anyio.sleep(0.05)


def test_the_other_instances_console_approves_and_stops(tmp_path: Path, postgres: Postgres) -> None:
    go = tmp_path / "flags" / "go"
    go.parent.mkdir(parents=True)
    with anyio.from_thread.start_blocking_portal(backend="asyncio") as portal:

        def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
            return portal.call(functools.partial(fn, *args, **kwargs))

        with portal.wrap_async_context_manager(_two(tmp_path, postgres.new_database())) as (
            first,
            second,
        ):
            run(first.say, "[[tool run_command touch ran.txt]]", where=ROOM, who="alice")
            # Both instances read the one inbox: whichever claims the thread first runs it
            # (usually the one that stored the message, not always). The other one's console
            # acts on it.
            a, b = run(_holder, first, second)
            assert ROOM.key in a.bridge.core.threads and ROOM.key not in b.bridge.core.threads
            # Alice signs in at instance b's console.
            # Event ids are the platform's, unique across instances (the harness counts per one).
            run(b.say, "!web", where=dm("alice"), who="alice", event_id="b-web")
            assert isinstance(b.adapter, MembersAdapter)
            link = re.findall(r"https?://\S+", b.adapter.quiet[-1][1])[0]
            client = TestClient(console_app(b.bridge.core), base_url=BASE)
            client.portal = portal
            assert client.post(urlsplit(link).path, follow_redirects=False).status_code == 303
            page = client.get(f"/thread?t={ROOM.key}").text
            holder = a.bridge.core.leases.name
            assert "touch ran.txt" in page and f"instance {holder}" in page
            assert f"Runs on instance {holder}" in page
            csrf = re.findall(r'name="csrf" value="([^"]+)"', page)[0]
            [row] = run(b.bridge.store.waiting_approvals, ROOM.key)
            form = {"csrf": csrf, "t": ROOM.key, "approval": row.id, "choice": "approve"}
            answer = client.post("/thread/decide", data=form, follow_redirects=False)
            assert answer.status_code == 303
            run(a.adapter.wait_finished, 1, timeout=60)
            [worker] = a.bridge.core.threads.values()
            assert worker.place is not None and (worker.place.workdir / "ran.txt").exists()
            # A turn at instance a, stopped from instance b's console as soon as the message
            # is stored, as a user would (a Stop that met the thread between instances was
            # lost: tests/core/test_router_stop_sweep.py).
            run(a.say, f"long job [[waitfirst {go}]]", where=ROOM, who="alice")
            form = {"csrf": csrf, "t": ROOM.key}
            assert client.post("/thread/stop", data=form, follow_redirects=False).status_code == 303
            [_, stopped] = run(a.adapter.wait_finished, 2, timeout=60)
            assert stopped.outcome is not None and stopped.outcome.interrupted
            told = [n for h in (a, b) for _, n in h.adapter.notices if "Nothing is running" in n]
            assert not told

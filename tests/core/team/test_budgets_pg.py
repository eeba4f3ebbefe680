"""Budgets held by two instances on one PostgreSQL: the store counts, not either instance, and
two turns that race at the limit are each counted once (issue 43)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.app import open_bridge
from bridge.config import build_config
from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.store.rows import Usage
from bridge.core.team.audit import AuditLog
from tests.core.harness import (
    SIMULATOR,
    SIMULATOR_ENV,
    Harness,
    RecordingAdapter,
    heard_once_listening,
    hold_after_taking,
)
from tests.doubles import signed_in
from tests.pg import Postgres

pytestmark = pytest.mark.anyio

ALICE = Author(id="@alice:test", display_name="Alice")
# One token: the first turn of each conversation is under it, anything after is over.
TINY = [{"name": "tiny", "scope": "user", "period": "day", "limit_tokens": 1}]


@asynccontextmanager
async def instance(tmp: Path, name: str, url: str) -> AsyncIterator[Harness]:
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp / "sim-home"))
    raw: dict[str, Any] = {
        "bridge": {"data_dir": str(tmp / name)},
        "agy": {
            "command": SIMULATOR,
            "pass_env": SIMULATOR_ENV,
            "init_timeout": 20,
            "stop_grace": 2,
            "isolation": "none",
        },
        # The product's lease: the tests assume a thread stays where it runs (a 3 s lease
        # lapses in a stall of over 2 s under load, and the other instance takes it over).
        "store": {"url": url, "instance": name},
        "approvals": {"mode": "off"},
        "budgets": TINY,
    }
    adapter = RecordingAdapter()
    async with open_bridge(build_config(raw, environ={}), {"test": adapter}) as bridge:
        listening = heard_once_listening(bridge)
        await bridge.core.recover()
        with anyio.fail_after(30):
            await listening.wait()  # the other instance's commands reach this one
        yield Harness(bridge, adapter, tmp)


@asynccontextmanager
async def two(tmp: Path, url: str) -> AsyncIterator[tuple[Harness, Harness]]:
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(instance(tmp, "a", url))
        b = await stack.enter_async_context(instance(tmp, "b", url))
        yield a, b


async def say(h: Harness, where: str, text: str, mid: str) -> None:
    await h.bridge.core.submit(
        IncomingMessage(
            thread=h.adapter.thread(where),
            event_id=mid,
            message_id=mid,
            author=ALICE,
            text=text,
        )
    )


async def until(predicate: Any, timeout: float = 60) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.05)


def refusals(*hs: Harness) -> list[str]:
    return [n for h in hs for _, n in h.adapter.notices if "your message was not sent" in n]


def answers(*hs: Harness) -> int:
    return sum(len(h.adapter.finished()) for h in hs)


async def shares(h: Harness) -> list[dict[str, Any]]:
    rows = await h.bridge.store.database.fetch("SELECT * FROM usage_shares ORDER BY turn_id")
    return [dict(r) for r in rows]


async def recorded(h: Harness, count: int) -> list[dict[str, Any]]:
    """The usage rows, once ``count`` turns are recorded (a turn's answer is posted first)."""
    with anyio.fail_after(30):
        while len(rows := await shares(h)) < count:
            await anyio.sleep(0.05)
    return rows


async def turn_totals(h: Harness) -> dict[int, int]:
    rows = await h.bridge.store.database.fetch(
        "SELECT id, usage_json FROM turns WHERE usage_json IS NOT NULL"
    )
    return {r["id"]: Usage.model_validate_json(r["usage_json"]).total_tokens for r in rows}


async def test_two_instances_count_one_budget(tmp_path: Path, postgres: Postgres) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        await say(a, "t1", "a first question", "e1")
        await until(lambda: answers(a, b) == 1)
        [row] = await recorded(b, 1)  # what instance a's turn used, as instance b reads it
        assert row["person"] == ALICE.id and row["total_tokens"] > 1
        # Another thread, at the other instance: her budget is spent there too.
        await say(b, "t2", "another thread, same person", "e2")
        await until(lambda: len(refusals(a, b)) == 1)
        assert "Budget `tiny`" in refusals(a, b)[0]
        assert answers(a, b) == 1
        kinds = [r.kind for r in await AuditLog(a.bridge.store.database).records()]
        assert kinds.count("budget_refused") == 1 and kinds.count("turn_started") == 1
        assert (await AuditLog(b.bridge.store.database).verify()).intact


async def test_two_turns_racing_at_the_limit_are_each_counted_once(
    tmp_path: Path, postgres: Postgres
) -> None:
    async with two(tmp_path, postgres.new_database()) as (a, b):
        # Held at whichever instance runs each thread: usually the one that stored its
        # message, but the other one's sweep for waiting work may claim it first.
        taken, go_on = hold_after_taking(a.bridge.store, b.bridge.store, turns=2)
        await say(a, "t1", "one thread", "e1")
        await say(b, "t2", "another thread", "e2")
        # Both turns have taken their messages before either was judged: both under the limit.
        with anyio.fail_after(30):
            await taken.wait()
        go_on.set()
        await until(lambda: answers(a, b) == 2)
        rows = await recorded(a, 2)
        totals = await turn_totals(a)
        # Each turn once, with exactly what agy reported for it (new conversations each).
        assert sorted(r["turn_id"] for r in rows) == sorted(totals)
        assert sum(r["total_tokens"] for r in rows) == sum(totals.values())
        # Recording a turn again (a retry, the other instance) changes nothing.
        team = b.bridge.core.team
        assert team is not None
        again = ThreadRef.from_key(rows[0]["thread_key"])
        assert await team.book.record(rows[0]["turn_id"], again) is not None
        assert len(await shares(b)) == 2
        # Over the limit now, at either instance.
        await say(a, "t1", "a third", "e3")
        await say(b, "t2", "a fourth", "e4")
        await until(lambda: len(refusals(a, b)) == 2)
        assert answers(a, b) == 2

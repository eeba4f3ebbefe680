"""Each turn's usage from agy's cumulative counts, attributed and priced (issue 43)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.core.events import Author, ChannelRef
from bridge.core.store.rows import Usage
from bridge.core.team.usage import BRIDGE, Tokens, attribute, cost_of, split, turn_delta
from bridge.team_settings import ModelPrice, PricingSection
from tests.core.harness import Harness, running, thread

pytestmark = pytest.mark.anyio


def test_a_turn_is_the_difference_of_two_totals() -> None:
    before = Usage(input_tokens=100, output_tokens=40, thinking_tokens=10, total_tokens=140)
    after = Usage(input_tokens=250, output_tokens=90, thinking_tokens=25, total_tokens=340)
    after = after.model_copy(update={"cache_read_tokens": 7})
    assert turn_delta(after, before) == Tokens(150, 50, 15, 7, 200)
    assert turn_delta(after, None) == Tokens(250, 90, 25, 7, 340)


def test_a_total_that_went_down_is_a_fresh_count() -> None:
    before = Usage(input_tokens=500, output_tokens=100, total_tokens=600)
    after = Usage(input_tokens=30, output_tokens=10, total_tokens=40)
    assert turn_delta(after, before) == Tokens(30, 10, 0, 0, 40)


def test_a_missing_total_is_input_plus_output() -> None:
    assert turn_delta(Usage(input_tokens=3, output_tokens=4), None).total == 7


def test_split_evenly_with_the_remainder_to_the_first() -> None:
    parts = split(Tokens(10, 7, 0, 1, 17), 3)
    assert [p.input for p in parts] == [4, 3, 3]
    assert [p.output for p in parts] == [3, 2, 2]
    assert [p.cache_read for p in parts] == [1, 0, 0]
    assert sum((p for p in parts), Tokens()) == Tokens(10, 7, 0, 1, 17)


def test_attributed_to_each_author_once_in_order() -> None:
    alice, bob = Author(id="@a", display_name="Alice"), Author(id="@b", display_name="Bob")
    shares = attribute(Tokens(total=9, input=9), 0.9, [alice, bob, alice])
    assert [(s.person, s.tokens.total) for s in shares] == [("@a", 5), ("@b", 4)]
    assert [s.cost for s in shares] == [pytest.approx(0.45), pytest.approx(0.45)]
    [nobody] = attribute(Tokens(total=3), None, [])
    assert nobody.person == BRIDGE and nobody.cost is None


def test_cost_per_million_with_thinking_inside_output() -> None:
    pricing = PricingSection(
        currency="EUR", models={"m": ModelPrice(input=2.0, output=10.0, cache_read=0.5)}
    )
    tokens = Tokens(input=1_000_000, output=500_000, thinking=400_000, cache_read=2_000_000)
    assert cost_of(tokens, "m", pricing) == pytest.approx(2.0 + 5.0 + 1.0)
    assert cost_of(tokens, "other", pricing) is None


async def shares(h: Harness) -> list[dict[str, Any]]:
    rows = await h.bridge.store.database.fetch("SELECT * FROM usage_shares ORDER BY turn_id")
    return [dict(r) for r in rows]


async def last_total(h: Harness) -> Usage:
    rows = await h.bridge.store.database.fetch(
        "SELECT usage_json FROM turns WHERE usage_json IS NOT NULL ORDER BY id DESC LIMIT 1"
    )
    return Usage.model_validate_json(rows[0]["usage_json"])


async def turn(h: Harness, text: str, count: int, who: str = "alice") -> None:
    await h.say(text, who=who)
    done = await h.adapter.wait_finished(count)
    await h.adapter.changes.until(lambda: all(r.closed for r in done[:count]))


async def test_usage_across_a_resume_and_a_restart_sums_to_agys_total(tmp_path: Path) -> None:
    # Three turns of one conversation: the second after agy was closed for idleness (a resume
    # with --conversation), the third after the bridge itself restarted. agy's result.usage
    # is the conversation's running total each time: a bridge that stored it as the turn's
    # usage (or added the totals up) would count the first turn three times.
    async with running(tmp_path, idle_timeout=0.3) as h:
        await turn(h, "first question, a short one", 1)
        first = await last_total(h)
        with anyio.fail_after(20):
            while h.bridge.core.threads:
                await anyio.sleep(0.05)  # agy closed for idleness, the thread's actor gone
        await turn(h, "second question " + "with more words " * 20, 2)
    async with running(tmp_path) as h:
        h.adapter.sent = 10  # new event ids: the store keeps the first run's
        await turn(h, "third question after a restart", 1)
        total = await last_total(h)
        rows = await shares(h)
    assert len(rows) == 3
    assert rows[0]["total_tokens"] == first.total_tokens
    assert sum(r["total_tokens"] for r in rows) == total.total_tokens
    assert sum(r["input_tokens"] for r in rows) == total.input_tokens
    assert sum(r["output_tokens"] for r in rows) == total.output_tokens
    assert sum(r["thinking_tokens"] for r in rows) == total.thinking_tokens
    assert all(r["total_tokens"] > 0 for r in rows)
    assert {r["person"] for r in rows} == {"@alice:test"}
    assert {r["model"] for r in rows} == {"default"}
    assert len({r["turn_id"] for r in rows}) == 3


async def test_a_turn_with_an_injected_message_is_split_between_its_authors(
    tmp_path: Path,
) -> None:
    extra = {"pricing": {"currency": "EUR", "models": {"sim-pro": {"input": 1.0, "output": 4.0}}}}
    async with running(tmp_path, extra=extra, model="sim-pro") as h:
        go = h.flag("go")
        await h.say(f"long job [[waitfirst {go}]]", who="alice")
        await h.adapter.changes.until(lambda: h.adapter.replies)
        await h.say("also check the tests", who="bob")
        go.touch()
        done = await h.adapter.wait_finished(1)
        await h.adapter.changes.until(lambda: done[0].closed)
        rows = await shares(h)
        total = await last_total(h)
    assert [r["person"] for r in rows] == ["@alice:test", "@bob:test"]
    assert sum(r["total_tokens"] for r in rows) == total.total_tokens
    assert abs(rows[0]["total_tokens"] - rows[1]["total_tokens"]) <= 1
    expected = (total.input_tokens * 1.0 + total.output_tokens * 4.0) / 1_000_000
    assert sum(r["cost"] for r in rows) == pytest.approx(expected)
    assert {r["model"] for r in rows} == {"sim-pro"}
    assert rows[0]["channel"] == thread().channel


async def test_a_scheduled_turn_is_attributed_to_its_schedule(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        nightly = Author.schedule("nightly")
        where = await h.bridge.core.start_thread(
            ChannelRef(platform="test", channel="room"), "summarise the open issues", nightly
        )
        done = await h.adapter.wait_finished(1, where)
        await h.adapter.changes.until(lambda: done[0].closed)
        [row] = await shares(h)
    assert row["person"] == nightly.id and row["total_tokens"] > 0

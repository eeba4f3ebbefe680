"""Budgets through the turn policy, on the simulator: the warning once per period, a refused
message (kept as refused, the thread told which budget, what was used and when it resets), a
refused message injected into another person's turn (which runs on), `!budget extend`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bridge.core.events import Reaction
from bridge.core.store.rows import StoreError
from bridge.core.team.audit import AuditLog
from bridge.core.team.budgets import amount
from bridge.core.team.periods import period_of
from tests.core.harness import Harness, running, thread

pytestmark = pytest.mark.anyio

PER_PERSON = {"name": "daily", "scope": "user", "period": "day", "limit_tokens": 1000}
APPROVERS = {"mode": "off", "approvers": ["@carol:test"]}


def settings(*budgets: dict[str, Any]) -> dict[str, Any]:
    return {"budgets": list(budgets), "approvals": APPROVERS}


async def spend(h: Harness, person: str, tokens: int, channel: str = "room") -> None:
    """``tokens`` already used today by ``person`` (a turn of another thread, another time:
    numbered below every turn there is)."""
    db = h.bridge.store.database
    [row] = await db.fetch("SELECT COALESCE(MIN(turn_id), 0) - 1 AS turn FROM usage_shares")
    await db.execute(
        "INSERT INTO usage_shares (turn_id, person, person_name, thread_key, platform, channel,"
        " model, at, input_tokens, output_tokens, thinking_tokens, cache_read_tokens,"
        " total_tokens, cost) VALUES (?, ?, ?, 'test|room|other', 'test', ?, 'default', ?,"
        " ?, 0, 0, 0, ?, NULL)",
        (min(int(row["turn"]), -1), person, person, channel, time.time(), tokens, tokens),
    )


async def states(h: Harness) -> dict[str, str]:
    rows = await h.bridge.store.database.fetch("SELECT message_id, state FROM inbox")
    return {r["message_id"]: r["state"] for r in rows}


async def finished(h: Harness, count: int) -> None:
    done = await h.adapter.wait_finished(count)
    await h.adapter.changes.until(lambda: all(r.closed for r in done[:count]))


def notices(h: Harness, text: str) -> list[str]:
    return [n for _, n in h.adapter.notices if text in n]


def test_amounts() -> None:
    assert amount("200k") == (200_000, 0.0)
    assert amount("1.5m") == (1_500_000, 0.0)
    assert amount("50,000") == (50_000, 0.0)
    assert amount("$5") == (0, 5.0)
    assert amount("2.50 EUR") == (0, 2.5)
    assert amount("lots") is None and amount("0") is None and amount("$0") is None


async def test_warned_once_then_refused_and_kept(tmp_path: Path) -> None:
    async with running(tmp_path, extra=settings({**PER_PERSON, "warn_at": 0.5})) as h:
        await spend(h, "@alice:test", 600)
        await h.say("first question", who="alice")
        await finished(h, 1)
        [warning] = notices(h, "Budget `daily`")
        assert warning.startswith("⚠️ Budget `daily` (Alice's daily budget) is at 6")
        assert "resets " in warning
        await h.say("second question", who="alice")
        await finished(h, 2)
        assert len(notices(h, "Budget `daily`")) == 1  # once per period and thread

        await spend(h, "@alice:test", 1000)
        refused = await h.say("third question", who="alice")
        text = await h.adapter.wait_notice("your message was not sent")
        reset = period_of("day", time.time(), "UTC").resets()
        assert "Alice: your message was not sent to the agent. Budget `daily`" in text
        assert "tokens today; it resets " + reset in text
        assert "!budget extend daily" in text
        await h.adapter.changes.until(lambda: (refused, Reaction.FAILED) in h.adapter.reactions)
        assert (await states(h))[refused] == "refused"
        assert len(h.adapter.finished()) == 2  # no turn ran for it

        await h.say("bob has his own budget", who="bob")
        await finished(h, 3)
        assert (await states(h))["m4"] == "turn"

        records = await AuditLog(h.bridge.store.database).records()
        [refusal] = [r for r in records if r.kind == "budget_refused"]
        assert refusal.person == "@alice:test" and refusal.detail["budget"] == "daily"
        assert refusal.detail["text"] == "third question"
        assert refusal.detail["into_running_turn"] is False
        registry = h.bridge.metrics.registry
        refused_count = registry.get_sample_value(
            "agy_bridge_budget_refusals_total", {"budget": "daily"}
        )
        assert refused_count == 1
        tokens = registry.get_sample_value(
            "agy_bridge_usage_tokens_total",
            {"model": "default", "channel": "room", "person": "@alice:test"},
        )
        assert tokens is not None and tokens > 0


async def test_a_refused_message_injected_into_anothers_turn(tmp_path: Path) -> None:
    async with running(tmp_path, extra=settings(PER_PERSON)) as h:
        await spend(h, "@bob:test", 5000)
        go = h.flag("go")
        await h.say(f"long job [[waitfirst {go}]]", who="alice")
        await h.adapter.changes.until(lambda: h.adapter.replies)
        late = await h.say("and do this too", who="bob")
        go.touch()
        await finished(h, 1)
        [reply] = h.adapter.finished()
        assert reply.outcome is not None and reply.outcome.error is None
        assert "and do this too" not in reply.outcome.final_text  # never reached agy
        assert notices(h, "Bob: your message was not sent to the agent. Budget `daily`")
        assert (await states(h))[late] == "refused"
        records = await AuditLog(h.bridge.store.database).records()
        [refusal] = [r for r in records if r.kind == "budget_refused"]
        assert refusal.person == "@bob:test" and refusal.detail["into_running_turn"] is True
        # Alice's turn ran whole and was attributed to her alone.
        rows = await h.bridge.store.database.fetch(
            "SELECT person FROM usage_shares WHERE turn_id > 0"
        )
        assert [r["person"] for r in rows] == ["@alice:test"]


async def test_a_running_turn_is_never_cut(tmp_path: Path) -> None:
    async with running(tmp_path, extra=settings(PER_PERSON)) as h:
        go = h.flag("go")
        await h.say(f"long job [[waitfirst {go}]]", who="alice")
        await h.adapter.changes.until(lambda: h.adapter.replies)
        await spend(h, "@alice:test", 5000)  # over the limit while her turn runs
        go.touch()
        await finished(h, 1)
        [reply] = h.adapter.finished()
        assert reply.outcome is not None and reply.outcome.error is None
        await h.say("next", who="alice")
        await h.adapter.wait_notice("your message was not sent")


async def test_an_approver_extends_a_budget_for_this_period(tmp_path: Path) -> None:
    async with running(tmp_path, extra=settings(PER_PERSON)) as h:
        await spend(h, "@alice:test", 1200)
        await h.say("blocked", who="alice")
        await h.adapter.wait_notice("your message was not sent")

        await h.say("!budget extend daily 100k", who="alice")
        await h.adapter.wait_notice("Alice: only an approver can extend a budget.")
        await h.say("!budget extend weekly 100k", who="carol")
        await h.adapter.wait_notice("There is no budget `weekly` (budgets: `daily`)")
        await h.say("!budget extend daily $5", who="carol")
        await h.adapter.wait_notice("Budget `daily` has no cost limit to raise.")
        await h.say("!budget extend daily 100k @alice:test", who="carol")
        raised = await h.adapter.wait_notice("raised by")
        assert raised.startswith("Budget `daily` raised by 100k tokens for `@alice:test` until ")

        await h.say("now it goes", who="alice")
        await finished(h, 1)
        await h.say("!budget", who="alice")
        shown = await h.adapter.wait_notice("Budgets that apply to you here")
        assert "• `daily` for `@alice:test`: " in shown and "of 101k tokens today" in shown

        records = await AuditLog(h.bridge.store.database).records()
        [extended] = [r for r in records if r.kind == "budget_extended"]
        assert extended.person == "@carol:test"
        assert extended.detail == {
            "name": "Carol",
            "budget": "daily",
            "subject": "@alice:test",
            "period": period_of("day", time.time(), "UTC").key,
            "tokens": 100_000,
            "cost": 0.0,
        }


async def test_a_channel_budget_with_a_cost_limit(tmp_path: Path) -> None:
    channel = {"scope": "channel", "period": "month", "limit_cost": 2.0, "warn_at": 0.9}
    extra = {
        **settings(channel),
        "pricing": {"currency": "EUR", "models": {"default": {"input": 100_000.0}}},
    }
    async with running(tmp_path, extra=extra) as h:
        await h.say("!budget", who="alice")
        shown = await h.adapter.wait_notice("Budgets that apply")
        assert "`channel-month` for `room`: 0.00 EUR of 2.00 EUR this month (0%, fine)" in shown
        await h.say("an expensive question", who="alice")  # 0.10 EUR a token: > 2 EUR
        await finished(h, 1)
        await h.say("another", who="bob")
        text = await h.adapter.wait_notice("your message was not sent")
        assert "Budget `channel-month` (this channel's monthly budget) has used" in text
        await h.say("!usage", who="alice")
        usage = await h.adapter.wait_notice("**This month")
        assert "• You: " in usage and " EUR" in usage and "**Last month" in usage
        assert thread().channel == "room"


async def test_a_store_that_cannot_be_read_lets_the_turn_go(tmp_path: Path) -> None:
    async with running(tmp_path, extra=settings(PER_PERSON)) as h:
        team = h.bridge.core.team
        assert team is not None

        async def broken(*args: Any) -> Any:
            raise StoreError("disk I/O error")

        team.budgets.check = broken  # type: ignore[method-assign]
        await spend(h, "@alice:test", 5000)
        await h.say("still answered", who="alice")
        await finished(h, 1)
        assert not notices(h, "was not sent")

"""The app's rate budget: a bucket per method, optional calls defer, urgent ones wait."""

from __future__ import annotations

import anyio
import pytest

from bridge.chat.slack.budget import Deferred, RateBudget, Tier

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def budget(clock: Clock, **tiers: Tier) -> RateBudget:
    return RateBudget(tiers={k.replace("_", "."): v for k, v in tiers.items()}, clock=clock)


def test_a_tier_never_allows_more_than_its_limit_in_a_window() -> None:
    clock = Clock()
    spent = budget(clock, chat_update=Tier(50))
    taken = 0
    # A minute of asking ten times a second: optional calls, as a live reply makes them.
    for _ in range(600):
        if spent.try_take("chat.update") == 0:
            taken += 1
        clock.now += 0.1
    assert 40 <= taken <= 50


def test_optional_calls_leave_a_reserve_for_urgent_ones() -> None:
    clock = Clock()
    spent = budget(clock, chat_update=Tier(20, burst=5))
    while spent.try_take("chat.update") == 0:
        pass
    # Optional calls stopped with tokens left: an urgent call gets one at once.
    assert spent.level("chat.update") > 0
    wait = spent.try_take("chat.update")
    assert wait > 0


async def test_urgent_calls_wait_for_a_token() -> None:
    spent = RateBudget(tiers={"chat.postMessage": Tier(600, window=60.0, burst=1)})
    await spent.take("chat.postMessage")
    with anyio.fail_after(5):
        await spent.take("chat.postMessage")  # waits about a tenth of a second
    assert spent.stats["chat.postMessage"].calls == 2


async def test_spend_defers_optional_calls_and_counts_them() -> None:
    clock = Clock()
    spent = budget(clock, chat_startStream=Tier(4, burst=2))
    with RateBudget.optional():
        await spent.spend("chat.startStream")
        with pytest.raises(Deferred) as deferred:
            await spent.spend("chat.startStream")
    assert deferred.value.wait > 0
    assert spent.stats["chat.startStream"].deferred == 1


def test_a_429_blocks_the_method_for_retry_after() -> None:
    clock = Clock()
    spent = budget(clock, chat_appendStream=Tier(100))
    spent.limited("chat.appendStream", None, 30.0)
    assert spent.level("chat.appendStream") == 0
    assert spent.try_take("chat.appendStream") >= 30.0
    clock.now += 60
    assert spent.try_take("chat.appendStream") == 0


def test_per_channel_tiers_count_each_channel() -> None:
    clock = Clock()
    spent = budget(clock, chat_postMessage=Tier(5, window=5.0, burst=2, scope="channel"))
    assert spent.try_take("chat.postMessage", "C1") == 0
    assert spent.try_take("chat.postMessage", "C1") > 0
    assert spent.try_take("chat.postMessage", "C2") == 0


def test_flushes_slow_down_as_a_bucket_runs_low() -> None:
    clock = Clock()
    spent = budget(clock, chat_update=Tier(50))
    methods: list[tuple[str, str | None]] = [("chat.update", None)]
    assert spent.interval(1.0, methods) == 1.0
    while spent.try_take("chat.update") == 0:
        pass
    slowed = spent.interval(1.0, methods)
    assert 1.0 < slowed <= 10.0
    assert spent.interval(1.0, [("users.info", None)]) == 1.0  # no tier: no pacing


def test_the_budget_and_the_fake_read_one_rate_table() -> None:
    """Slack's method pages: reactions.remove is Tier 2; setStatus counts per thread."""
    from tests.chat.slack.fake_slack import FakeSlack

    tiers = RateBudget().tiers
    assert dict(FakeSlack().tiers) == dict(tiers)
    assert tiers["reactions.remove"].limit == 20
    assert tiers["assistant.threads.setStatus"].scope == "thread"
    assert tiers["agents.sessions.setStatus"].limit == 50


def test_a_thread_scoped_tier_counts_each_thread() -> None:
    clock = Clock()
    spent = budget(clock, assistant_threads_setStatus=Tier(4, burst=1, scope="thread"))
    assert spent.try_take("assistant.threads.setStatus", "C1/1.1") == 0
    assert spent.try_take("assistant.threads.setStatus", "C1/1.1") > 0
    assert spent.try_take("assistant.threads.setStatus", "C1/2.2") == 0

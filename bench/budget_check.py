"""The budget check on every turn's path (issue 43): what the turn reads from the store before
the turn policy judges it, and the judgement, with 10,000 turns of usage history.

Two stores (SQLite, the bridge's default, as the bridge opens it) side by side, one empty, one
with ``history`` turns spread over the last 60 days among 40 people in 8 channels; three
budgets (per person per day in tokens, per channel per month in cost, everyone per week); one
check per variant per round, in a rotating order. A check is
:meth:`bridge.core.team.controls.TeamControls.prepare` (each budget of each author: one
``SUM`` over the usage rows of the period, one over its extensions) and the policy's
``judge``. Run by ``python -m bench.overhead --budget-check N``.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from bench.common import percentile, ratio, table
from bridge.config import build_config
from bridge.core.events import Author, ThreadRef
from bridge.core.store import Store
from bridge.core.store.opening import open_store
from bridge.core.team.audit import AuditLog
from bridge.core.team.controls import TeamControls
from bridge.core.thread.turn_policy import Ask, Go
from bridge.metrics import Metrics

PEOPLE = 40
CHANNELS = 8
DAYS = 60
BUDGETS = [
    {"name": "person-day", "scope": "user", "period": "day", "limit_tokens": 10_000_000},
    {"name": "channel-month", "scope": "channel", "period": "month", "limit_cost": 10_000.0},
    {"name": "team-week", "scope": "all", "period": "week", "limit_tokens": 1_000_000_000},
]
PRICING = {"currency": "USD", "models": {"default": {"input": 1.25, "output": 10.0}}}


async def fill(store: Store, turns: int, seed: int = 7) -> None:
    """``turns`` turns of usage, one or two people each, over the last :data:`DAYS` days."""
    rng = random.Random(seed)
    now = time.time()
    async with store.database.transaction() as tx:
        for turn in range(1, turns + 1):
            channel = f"C{rng.randrange(CHANNELS)}"
            people = rng.sample(range(PEOPLE), rng.choice((1, 1, 1, 2)))
            at = now - rng.random() * DAYS * 86400
            for person in people:
                tokens = rng.randrange(2_000, 60_000)
                await tx.execute(
                    "INSERT INTO usage_shares (turn_id, person, person_name, thread_key,"
                    " platform, channel, model, at, input_tokens, output_tokens,"
                    " thinking_tokens, cache_read_tokens, total_tokens, cost) VALUES"
                    " (?, ?, ?, ?, 'slack', ?, 'default', ?, ?, ?, 0, 0, ?, ?)",
                    (
                        turn,
                        f"U{person}",
                        f"person {person}",
                        f"slack|{channel}|{turn}",
                        channel,
                        at,
                        tokens * 3 // 4,
                        tokens // 4,
                        tokens,
                        tokens / 1_000_000 * 4,
                    ),
                )


@asynccontextmanager
async def controls(folder: Path, history: int) -> AsyncIterator[TeamControls]:
    config = build_config(
        {"bridge": {"data_dir": str(folder)}, "budgets": BUDGETS, "pricing": PRICING},
        environ={},
    )
    async with open_store(f"sqlite:///{folder / 'bridge.sqlite3'}") as store:
        await fill(store, history)
        yield TeamControls(store.database, config, AuditLog(store.database), Metrics())


async def check(team: TeamControls, ask: Ask) -> float:
    started = time.perf_counter()
    await team.prepare(ask, _quiet)
    verdict = team.policy.judge(ask)
    elapsed = time.perf_counter() - started
    assert isinstance(verdict, Go), verdict
    return elapsed


async def _quiet(thread: ThreadRef, text: str) -> None:
    pass


async def run(rounds: int, history: int = 10_000, warmup: int = 20) -> str:
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="budget-bench-") as tmp:
        async with AsyncExitStack() as stack:
            variants = {
                "no history": await stack.enter_async_context(controls(Path(tmp) / "empty", 0)),
                f"{history:,} turns": await stack.enter_async_context(
                    controls(Path(tmp) / "full", history)
                ),
            }
            samples: dict[str, list[float]] = {name: [] for name in variants}
            names = list(variants)
            for n in range(rounds + warmup):
                author = Author(id=f"U{rng.randrange(PEOPLE)}", display_name="someone")
                channel = f"C{rng.randrange(CHANNELS)}"
                where = ThreadRef(platform="slack", channel=channel, thread="1")
                order = names[n % 2 :] + names[: n % 2]
                for name in order:
                    ask = Ask("turn", (author,), where, None, author)
                    elapsed = await check(variants[name], ask)
                    if n >= warmup:
                        samples[name].append(elapsed)
    base = percentile(samples[names[0]], 0.5)
    rows = [
        [
            name,
            f"{percentile(values, 0.5) * 1000:.3f} ms",
            f"{percentile(values, 0.99) * 1000:.3f} ms",
            ratio(percentile(values, 0.5), base),
        ]
        for name, values in samples.items()
    ]
    return (
        f"budget check before a turn: 3 budgets, one author, {rounds} checks per store\n"
        + table(["store", "p50", "p99", "vs empty"], rows)
        + "\ngoal: under 1 ms at p50 with 10,000 turns of history"
    )

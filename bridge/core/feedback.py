"""Feedback on the agent's answers (👍/👎 buttons under a final answer): one row per person and
answer, tied to the turn that wrote it, in the store's database.

Its table is the store's (migration 7, :mod:`bridge.core.store.schema`); these queries are
written for SQLite and PostgreSQL alike. A person's later click on the same answer replaces
their earlier one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bridge.core.events import Author, ThreadRef
from bridge.core.store import Store
from bridge.core.store.ports import FeedbackStore
from bridge.metrics import Metrics


@dataclass(frozen=True)
class FeedbackCounts:
    positive: int = 0
    negative: int = 0


async def record_feedback(
    store: Store,
    thread_key: str,
    message_id: str,
    user_id: str,
    positive: bool,
    *,
    sent_at: float | None = None,
) -> int | None:
    """Record one person's rating of one answer; returns the turn it belongs to (the thread's
    last turn started before the answer was sent, ``sent_at``; else its last turn), if any."""
    db = store.database
    rows = await db.fetch(
        "SELECT MAX(id) AS id FROM turns WHERE thread_key = ? AND started_at <= ?",
        (thread_key, sent_at if sent_at is not None else time.time()),
    )
    turn_id = rows[0]["id"] if rows and rows[0]["id"] is not None else None
    await db.execute(
        "INSERT INTO answer_feedback (thread_key, message_id, user_id, turn_id, positive, at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (thread_key, message_id, user_id) DO UPDATE "
        "SET positive = excluded.positive, at = excluded.at",
        (thread_key, message_id, user_id, turn_id, 1 if positive else 0, time.time()),
    )
    return int(turn_id) if turn_id is not None else None


async def feedback_counts(store: FeedbackStore, thread_key: str | None = None) -> FeedbackCounts:
    """How many answers got 👍 and 👎 (in one thread, or everywhere)."""
    where, params = ("WHERE thread_key = ?", (thread_key,)) if thread_key else ("", ())
    rows = await store.database.fetch(
        f"SELECT positive, COUNT(*) AS n FROM answer_feedback {where} GROUP BY positive",
        params,
    )
    counts = {int(row["positive"]): int(row["n"]) for row in rows}
    return FeedbackCounts(positive=counts.get(1, 0), negative=counts.get(0, 0))


async def answer_feedback(
    store: Store,
    metrics: Metrics,
    thread: ThreadRef,
    message_id: str,
    by: Author,
    positive: bool,
    sent_at: float | None,
) -> None:
    """What the app hands an adapter's feedback buttons: the row in the store, the counter."""
    await record_feedback(store, thread.key, message_id, by.id, positive, sent_at=sent_at)
    metrics.feedback(thread.platform, positive)

"""What the threads pages show, read from the store and from this instance's running turns."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.core.events import ThreadRef
from bridge.core.live import LiveTurn
from bridge.core.store.rows import ApprovalRow, MessageState, Row
from bridge.core.team.periods import period_of
from bridge.web.core import ConsoleCore

# Threads the list reads at most (newest activity first): a bound, not a filter.
MAX_THREADS = 500
# Threads on one page of the list.
PAGE_SIZE = 50
MESSAGES_SHOWN = 40
TURNS_SHOWN = 10
TITLE_LIMIT = 80
RESPONSE_SHOWN = 4000

_THREADS_SQL = """
SELECT t.key, t.platform, t.channel, t.thread, t.model, t.updated_at,
 (SELECT tt.title FROM thread_titles tt WHERE tt.thread_key = t.key) AS title,
 (SELECT i.text FROM inbox i WHERE i.thread_key = t.key ORDER BY i.id LIMIT 1) AS first_text,
 (SELECT COUNT(*) FROM inbox i WHERE i.thread_key = t.key AND i.state = 'pending') AS queued,
 (SELECT MAX(i.received_at) FROM inbox i WHERE i.thread_key = t.key) AS last_message,
 (SELECT COUNT(*) FROM turns u WHERE u.thread_key = t.key AND u.state = 'running') AS running,
 (SELECT COUNT(*) FROM approvals a WHERE a.thread_key = t.key AND a.state = 'waiting')
   AS waiting,
 (SELECT COALESCE(SUM(s.total_tokens), 0) FROM usage_shares s
   WHERE s.thread_key = t.key AND s.at >= ?) AS tokens,
 (SELECT SUM(s.cost) FROM usage_shares s WHERE s.thread_key = t.key AND s.at >= ?) AS cost,
 (SELECT l.owner FROM leases l WHERE l.thread_key = t.key AND l.expires_at > ?) AS owner
FROM threads t WHERE t.key IN ({keys}) ORDER BY t.updated_at DESC, t.key
"""
_ORDER_SQL = "SELECT key FROM threads ORDER BY updated_at DESC, key LIMIT ?"


@dataclass(frozen=True)
class ThreadLine:
    thread: ThreadRef
    title: str  # as a person named it, else the first line of its first message
    state: str  # running, approval, queued, idle
    model: str
    queued: int
    last_at: float
    tokens: int
    cost: float | None
    instance: str

    @property
    def key(self) -> str:
        return self.thread.key


@dataclass(frozen=True)
class MessageLine:
    at: float
    who: str
    text: str
    state: str  # as the thread sees it: queued, injected, in a turn, command, failed …


@dataclass(frozen=True)
class TurnLine:
    id: int
    state: str
    started_at: float
    ended_at: float | None
    error: str
    response: str  # the agent's answer (its end, when long)


@dataclass(frozen=True)
class ThreadDetail:
    line: ThreadLine
    conversation: str
    messages: list[MessageLine]
    turns: list[TurnLine]
    waiting: list[ApprovalRow]
    live: LiveTurn | None


def _state(row: Row, live: bool) -> str:
    if int(row["waiting"]):
        return "approval"
    if int(row["running"]) or live:
        return "running"
    if int(row["queued"]):
        return "queued"
    return "idle"


def _title(named: object, first: object) -> str:
    if named:
        return str(named)
    line = next((part.strip() for part in str(first or "").splitlines() if part.strip()), "")
    return line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1].rstrip() + "…"


def _instance(core: ConsoleCore, key: str, owner: object) -> str:
    if owner:
        return str(owner).split("#")[0]
    return core.leases.name if key in core.threads else ""


def month_start(core: ConsoleCore) -> float:
    return period_of("month", time.time(), core.config.bridge.timezone).start


async def thread_order(core: ConsoleCore) -> list[str]:
    """The keys of every thread (at most ``MAX_THREADS``), newest activity first: which of them
    a person sees is the chat's to say, so the list is filtered, then paged, before lines are
    read."""
    rows = await core.store.database.fetch(_ORDER_SQL, (MAX_THREADS,))
    return [str(row["key"]) for row in rows]


async def thread_lines(core: ConsoleCore, keys: Sequence[str]) -> list[ThreadLine]:
    """The lines of the threads keyed ``keys`` (those that exist), newest activity first."""
    if not keys:
        return []
    since, now = month_start(core), time.time()
    sql = _THREADS_SQL.format(keys=", ".join("?" * len(keys)))
    running = core.live.running()
    lines = []
    for row in await core.store.database.fetch(sql, [since, since, now, *keys]):
        key = str(row["key"])
        lines.append(
            ThreadLine(
                thread=ThreadRef(
                    platform=row["platform"], channel=row["channel"], thread=row["thread"]
                ),
                title=_title(row["title"], row["first_text"]),
                state=_state(row, key in running),
                model=row["model"] or core.config.agy.model or "default",
                queued=int(row["queued"]),
                last_at=float(row["last_message"] or row["updated_at"]),
                tokens=int(row["tokens"]),
                cost=float(row["cost"]) if row["cost"] is not None else None,
                instance=_instance(core, key, row["owner"]),
            )
        )
    return lines


_SHOWN_STATE: dict[str, str] = {
    MessageState.PENDING: "queued",
    MessageState.IN_TURN: "in a turn",
    MessageState.INJECTED: "injected mid-turn",
    MessageState.COMMAND: "command",
    MessageState.FAILED: "failed",
    MessageState.WITHDRAWN: "withdrawn",
    MessageState.REFUSED: "refused",
}


def _who(author_json: str) -> str:
    try:
        author = json.loads(author_json)
    except ValueError:
        return "?"
    if not isinstance(author, dict):
        return "?"
    name, ident = author.get("display_name") or "", author.get("id") or ""
    return f"{name} ({ident})" if name and name != ident else str(ident)


async def thread_detail(core: ConsoleCore, line: ThreadLine) -> ThreadDetail:
    store, key = core.store, line.key
    rows = await store.database.fetch(
        "SELECT author_json, text, state, received_at FROM inbox WHERE thread_key = ?"
        " ORDER BY id DESC LIMIT ?",
        (key, MESSAGES_SHOWN),
    )
    messages = [
        MessageLine(
            at=float(r["received_at"]),
            who=_who(str(r["author_json"])),
            text=str(r["text"]),
            state=_SHOWN_STATE.get(str(r["state"]), str(r["state"])),
        )
        for r in reversed(rows)
    ]
    row = await store.thread(key)
    return ThreadDetail(
        line=line,
        conversation=row.conversation_id or "",
        messages=messages,
        turns=await _turns(core, key),
        waiting=await store.waiting_approvals(key),
        live=core.live.current(key),
    )


async def _turns(core: ConsoleCore, key: str) -> list[TurnLine]:
    rows = await core.store.database.fetch(
        "SELECT id, state, started_at, ended_at, error, response FROM turns"
        " WHERE thread_key = ? ORDER BY id DESC LIMIT ?",
        (key, TURNS_SHOWN),
    )
    return [
        TurnLine(
            id=int(r["id"]),
            state=str(r["state"]),
            started_at=float(r["started_at"]),
            ended_at=float(r["ended_at"]) if r["ended_at"] is not None else None,
            error=str(r["error"] or ""),
            response=_tail(str(r["response"] or "")),
        )
        for r in rows
    ]


def _tail(text: str, limit: int = RESPONSE_SHOWN) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]

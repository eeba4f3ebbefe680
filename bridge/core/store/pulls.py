"""A worktree thread's pull request (docs/pull-requests.md): one row per thread.

The row links the thread to its PR (forge, repository, number, head branch, link), keeps the
commit the bridge last pushed to the head branch (a later push that would overwrite commits the
bridge did not make is refused) and the check states last told in the thread, for the commit
they were told of: a change is told once, whichever instance follows the PR, across restarts.
Webhooks find the thread by (forge, repository, number).

Plain SQL, for SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import json
import time

from pydantic import BaseModel, ConfigDict

from bridge.core.events import Author
from bridge.core.store.rows import Row, StoreBase


class PullRow(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    thread_key: str
    forge: str
    repo: str
    number: int
    head: str
    base: str
    url: str
    state: str
    pushed_sha: str
    # The commit the told states are of, and check name -> state as last told.
    checks_sha: str
    checks: dict[str, str]


_COLUMNS = (
    "thread_key, forge, repo, number, head, base, url, state, pushed_sha, checks_sha, checks_json"
)


def _row(row: Row) -> PullRow:
    return PullRow(
        thread_key=row["thread_key"],
        forge=row["forge"],
        repo=row["repo"],
        number=row["number"],
        head=row["head"],
        base=row["base"],
        url=row["url"],
        state=row["state"],
        pushed_sha=row["pushed_sha"],
        checks_sha=row["checks_sha"],
        checks=json.loads(row["checks_json"] or "{}"),
    )


class PullQueries(StoreBase):
    """The store's thread ↔ pull request links."""

    async def save_pull(self, pull: PullRow) -> None:
        """Write the thread's link (a new PR replaces an earlier one of the thread)."""
        await self._write(
            f"INSERT INTO pull_requests ({_COLUMNS}, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (thread_key) DO UPDATE SET forge = excluded.forge,"
            " repo = excluded.repo, number = excluded.number, head = excluded.head,"
            " base = excluded.base, url = excluded.url, state = excluded.state,"
            " pushed_sha = excluded.pushed_sha, checks_sha = excluded.checks_sha,"
            " checks_json = excluded.checks_json, updated_at = excluded.updated_at",
            (
                pull.thread_key,
                pull.forge,
                pull.repo,
                pull.number,
                pull.head,
                pull.base,
                pull.url,
                pull.state,
                pull.pushed_sha,
                pull.checks_sha,
                json.dumps(pull.checks, sort_keys=True),
                time.time(),
            ),
        )

    async def pull(self, thread_key: str) -> PullRow | None:
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM pull_requests WHERE thread_key = ?", (thread_key,)
        )
        return _row(rows[0]) if rows else None

    async def pull_by_number(self, forge: str, repo: str, number: int) -> PullRow | None:
        """The thread a forge's event is about (webhooks)."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM pull_requests WHERE forge = ? AND repo = ? AND number = ?",
            (forge, repo, number),
        )
        return _row(rows[0]) if rows else None

    async def open_pulls(self) -> list[PullRow]:
        """Every PR still open, for CI following after a start or a takeover."""
        rows = await self._db.fetch(
            f"SELECT {_COLUMNS} FROM pull_requests WHERE state = 'open' ORDER BY thread_key"
        )
        return [_row(row) for row in rows]

    async def set_pull_pushed(self, thread_key: str, sha: str) -> None:
        await self._write(
            "UPDATE pull_requests SET pushed_sha = ?, updated_at = ? WHERE thread_key = ?",
            (sha, time.time(), thread_key),
        )

    async def close_pull(self, thread_key: str, state: str) -> bool:
        """Move an open PR's row to ``state``: whether this call moved it. The only way a
        row leaves open: ``!merge`` and the CI follower (on any instance) may both read the
        forge's merge before either records it, and the one this returns True to alone tells
        the thread and cleans its repository (a conditional UPDATE: on PostgreSQL the second
        waits for the first to commit, then finds the row no longer open)."""
        changed = await self._write(
            "UPDATE pull_requests SET state = ?, updated_at = ? WHERE thread_key = ?"
            " AND state = 'open'",
            (state, time.time(), thread_key),
        )
        return changed > 0

    async def claim_checks(self, seen: PullRow, sha: str, now: dict[str, str]) -> bool:
        """Record ``now`` as the states told for ``sha`` if the row still holds what ``seen``
        read: whether this caller is the one to tell the change (compare and set, so two
        instances, or a webhook and a poll, never both tell it)."""
        changed = await self._write(
            "UPDATE pull_requests SET checks_sha = ?, checks_json = ?, updated_at = ?"
            " WHERE thread_key = ? AND checks_sha = ? AND checks_json = ?",
            (
                sha,
                json.dumps(now, sort_keys=True),
                time.time(),
                seen.thread_key,
                seen.checks_sha,
                json.dumps(seen.checks, sort_keys=True),
            ),
        )
        return changed > 0

    async def turn_answer(self, message_id: int) -> tuple[str, str] | None:
        """The state and answer of the turn that took inbox row ``message_id``, once ended
        (None: not taken yet, or still running)."""
        rows = await self._db.fetch(
            "SELECT turns.state AS state, turns.response AS response FROM inbox"
            " JOIN turns ON turns.id = inbox.turn_id WHERE inbox.id = ?",
            (message_id,),
        )
        if not rows or rows[0]["state"] == "running":
            return None
        return str(rows[0]["state"]), str(rows[0]["response"] or "")

    async def thread_authors(self, thread_key: str) -> list[Author]:
        """Everyone who wrote in the thread (messages and commands), first message first."""
        rows = await self._db.fetch(
            "SELECT author_json, MIN(id) AS first FROM inbox WHERE thread_key = ?"
            " GROUP BY author_json ORDER BY first",
            (thread_key,),
        )
        people: dict[str, Author] = {}
        for row in rows:
            try:
                author = Author.model_validate_json(row["author_json"])
            except ValueError:
                continue
            people.setdefault(author.id, author)
        return list(people.values())

"""The audit trail: who did what, one hash chain over the whole store (docs/team-controls.md).

Every record carries the hash of the record before it, and its own hash covers its sequence
number, time, instance, kind, thread, channel, person, details and that previous hash. The
sequence numbers are contiguous (each append takes the next one inside a transaction that
holds the table: PostgreSQL's table lock serialises instances, SQLite's write transaction
already does), and the store's ``meta`` row ``audit_head`` names the newest record. So a changed
record no longer matches its hash, a removed one leaves a gap the next record's previous hash
cannot bridge, a swapped pair matches neither its number nor its neighbours, and a removed
newest record disagrees with the head. Pruning removes the oldest records and appends a
``checkpoint`` naming the last one removed and its hash, so the remaining chain still starts
from something the chain itself vouches for.

What it proves and what not: someone who can write the store can rewrite the whole chain from
the point they change and the head with it; ``agy-bridge audit verify`` prints the head's hash
so that it can be kept elsewhere (a log, a ticket), and a later head that does not descend
from it shows the rewrite.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from bridge.core.events import Author, ThreadRef
from bridge.core.scrub import Scrubber
from bridge.core.store.rows import Database, StoreError, Tx, storable_text

log = logging.getLogger(__name__)

GENESIS = ""
HEAD_KEY = "audit_head"
CHECKPOINT = "checkpoint"


def record_hash(
    seq: int,
    at: float,
    instance: str,
    kind: str,
    thread_key: str,
    channel: str,
    person: str,
    detail_json: str,
    prev_hash: str,
) -> str:
    payload = json.dumps(
        [seq, f"{at:.6f}", instance, kind, thread_key, channel, person, detail_json, prev_hash],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class AuditRecord:
    seq: int
    at: float
    instance: str
    kind: str
    thread_key: str
    channel: str
    person: str
    detail: dict[str, Any]
    detail_json: str
    prev_hash: str
    hash: str

    def expected_hash(self) -> str:
        return record_hash(
            self.seq,
            self.at,
            self.instance,
            self.kind,
            self.thread_key,
            self.channel,
            self.person,
            self.detail_json,
            self.prev_hash,
        )

    def exported(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.at))
            + f".{round(self.at % 1 * 1_000_000) % 1_000_000:06d}Z",
            "instance": self.instance,
            "kind": self.kind,
            "thread": self.thread_key,
            "channel": self.channel,
            "person": self.person,
            "detail": self.detail,
            "hash": self.hash,
        }


def _record(row: Mapping[str, Any]) -> AuditRecord:
    detail_json = str(row["detail_json"])
    try:
        detail = json.loads(detail_json)
    except ValueError:
        detail = {"unreadable": detail_json}
    return AuditRecord(
        seq=int(row["seq"]),
        at=float(row["at"]),
        instance=str(row["instance"]),
        kind=str(row["kind"]),
        thread_key=str(row["thread_key"]),
        channel=str(row["channel"]),
        person=str(row["person"]),
        detail=detail if isinstance(detail, dict) else {"value": detail},
        detail_json=detail_json,
        prev_hash=str(row["prev_hash"]),
        hash=str(row["hash"]),
    )


@dataclass(frozen=True, slots=True)
class Selection:
    """Which records an export holds; every field that is set narrows it."""

    since: float | None = None
    until: float | None = None
    person: str | None = None
    channel: str | None = None
    thread: str | None = None

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if self.since is not None:
            clauses.append("at >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append("at < ?")
            params.append(self.until)
        if self.person is not None:
            clauses.append("person = ?")
            params.append(self.person)
        if self.channel is not None:
            clauses.append("channel = ?")
            params.append(self.channel)
        if self.thread is not None:
            # The whole key ("slack|C1|1712.5") or the platform's thread id alone.
            clauses.append("(thread_key = ? OR thread_key LIKE ?)")
            params += [self.thread, "%|" + self.thread]
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


@dataclass(frozen=True, slots=True)
class Entry:
    """One record to append."""

    kind: str
    thread: ThreadRef | None = None
    person: Author | str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Verdict:
    intact: bool
    checked: int
    head: str = ""
    problems: list[str] = field(default_factory=list)
    first_bad: int | None = None


class AuditLog:
    """Appends to, reads, verifies and prunes the trail."""

    def __init__(self, db: Database, instance: str = "", scrub: Scrubber | None = None):
        self._db = db
        self.instance = instance or "local"
        self._scrub = scrub or Scrubber(())

    # --- writing ---------------------------------------------------------------------------

    async def append(
        self,
        kind: str,
        *,
        thread: ThreadRef | None = None,
        person: Author | str | None = None,
        **detail: Any,
    ) -> bool:
        """Add one record; False (logged) when the store could not take it: the trail never
        stops the work it records."""
        return await self.append_all([Entry(kind, thread, person, detail)])

    async def append_all(self, entries: list[Entry]) -> bool:
        """Add records in order, in one transaction (one commit for a hook call's messages)."""
        try:
            async with self._db.transaction() as tx:
                for entry in entries:
                    detail = dict(entry.detail)
                    if isinstance(entry.person, Author):
                        detail.setdefault("name", entry.person.display_name or entry.person.id)
                        who = entry.person.id
                    else:
                        who = entry.person or ""
                    await self._append(tx, entry.kind, entry.thread, who, detail)
            return True
        except StoreError as exc:
            log.error("could not write the audit trail: %s", exc)
            return False

    async def _append(
        self, tx: Tx, kind: str, thread: ThreadRef | None, person: str, detail: dict[str, Any]
    ) -> AuditRecord:
        if self._db.shared:
            # One chain for every instance: appends wait for each other; readers do not.
            await tx.execute("LOCK TABLE audit IN EXCLUSIVE MODE")
        head = await tx.fetch("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
        seq = int(head[0]["seq"]) + 1 if head else await self._first_seq(tx)
        prev = str(head[0]["hash"]) if head else await self._head_hash(tx)
        at = round(time.time(), 6)
        detail_json = storable_text(
            json.dumps(self._scrubbed(detail), ensure_ascii=False, sort_keys=True)
        )
        thread_key = thread.key if thread is not None else ""
        channel = thread.channel if thread is not None else ""
        digest = record_hash(
            seq, at, self.instance, kind, thread_key, channel, person, detail_json, prev
        )
        await tx.execute(
            "INSERT INTO audit (seq, at, instance, kind, thread_key, channel, person,"
            " detail_json, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, at, self.instance, kind, thread_key, channel, person, detail_json, prev, digest),
        )
        await tx.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (HEAD_KEY, f"{seq}:{digest}"),
        )
        return AuditRecord(
            seq,
            at,
            self.instance,
            kind,
            thread_key,
            channel,
            person,
            detail,
            detail_json,
            prev,
            digest,
        )

    @staticmethod
    async def _head(tx: Tx | Database) -> tuple[int, str] | None:
        rows = await tx.fetch("SELECT value FROM meta WHERE key = ?", (HEAD_KEY,))
        if not rows:
            return None
        seq, _, digest = str(rows[0]["value"]).partition(":")
        return int(seq), digest

    async def _first_seq(self, tx: Tx) -> int:
        """An empty table: 1, or the number after the head (everything was pruned)."""
        head = await self._head(tx)
        return head[0] + 1 if head else 1

    async def _head_hash(self, tx: Tx) -> str:
        head = await self._head(tx)
        return head[1] if head else GENESIS

    def _scrubbed(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._scrub(value)
        if isinstance(value, Mapping):
            return {str(k): self._scrubbed(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._scrubbed(v) for v in value]
        if value is None or isinstance(value, bool | int | float):
            return value
        return self._scrub(str(value))

    # --- reading ---------------------------------------------------------------------------

    async def records(self, selection: Selection | None = None) -> list[AuditRecord]:
        where, params = (selection or Selection()).where()
        rows = await self._db.fetch("SELECT * FROM audit" + where + " ORDER BY seq", params)
        return [_record(r) for r in rows]

    async def verify(self) -> Verdict:
        """Walk the chain from its first record to the head."""
        records = await self.records()
        head = await self._head(self._db)
        problems: list[str] = []
        bad: list[int] = []
        if records:
            first = records[0]
            if first.seq != 1 or first.prev_hash != GENESIS:
                if not _covered_by_checkpoint(first, records):
                    problems.append(
                        f"records before {first.seq} are missing and no checkpoint covers them"
                    )
                    bad.append(first.seq)
        previous: AuditRecord | None = None
        for record in records:
            if record.expected_hash() != record.hash:
                problems.append(f"record {record.seq} ({record.kind}) was changed")
                bad.append(record.seq)
            if previous is not None and record.prev_hash != previous.hash:
                if record.seq != previous.seq + 1:
                    missing = f"{previous.seq + 1}" + (
                        f"..{record.seq - 1}" if record.seq - 1 > previous.seq + 1 else ""
                    )
                    problems.append(f"record(s) {missing} were removed")
                else:
                    problems.append(f"record {record.seq} does not follow record {previous.seq}")
                bad.append(record.seq)
            previous = record
        last = records[-1] if records else None
        if head is not None and (last is None or (last.seq, last.hash) != head):
            shown = f"{last.seq}" if last else "none"
            problems.append(
                f"the newest record should be {head[0]} (the head) but is {shown}: "
                "records at the end were removed or changed"
            )
            bad.append(last.seq + 1 if last else head[0])
        return Verdict(
            intact=not problems,
            checked=len(records),
            head=f"{head[0]}:{head[1]}" if head else "",
            problems=problems,
            first_bad=min(bad) if bad else None,
        )

    # --- retention -------------------------------------------------------------------------

    async def prune(self, before: float) -> int:
        """Remove the records older than ``before`` (the oldest ones, in chain order) and
        append a checkpoint naming the last one removed. The number removed."""
        async with self._db.transaction() as tx:
            if self._db.shared:
                await tx.execute("LOCK TABLE audit IN EXCLUSIVE MODE")
            rows = await tx.fetch(
                "SELECT seq, hash FROM audit WHERE seq = (SELECT MAX(seq) FROM audit WHERE at < ?)",
                (before,),
            )
            if not rows:
                return 0
            through, digest = int(rows[0]["seq"]), str(rows[0]["hash"])
            removed = await tx.execute("DELETE FROM audit WHERE seq <= ?", (through,))
            await self._append(
                tx,
                CHECKPOINT,
                None,
                "",
                {"through": through, "hash": digest, "removed": removed, "before": before},
            )
        log.info("audit trail: %d record(s) pruned, checkpoint after %d", removed, through)
        return removed


def _covered_by_checkpoint(first: AuditRecord, records: list[AuditRecord]) -> bool:
    """The chain starts after a prune: a checkpoint in it names the record before the first."""
    return any(
        r.kind == CHECKPOINT
        and r.detail.get("through") == first.seq - 1
        and r.detail.get("hash") == first.prev_hash
        for r in records
    )


# How often the trail is pruned (and once at start).
PRUNE_EVERY = 24 * 3600.0


async def prune_daily(audit: AuditLog, days: int, every: float = PRUNE_EVERY) -> None:
    """Keep ``days`` of the trail: prune at start, then once a day (every instance may: a
    prune with nothing older to remove writes nothing)."""
    while True:
        try:
            await audit.prune(time.time() - days * 86400.0)
        except StoreError as exc:
            log.error("could not prune the audit trail: %s", exc)
        await anyio.sleep(every)

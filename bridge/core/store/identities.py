"""Pinned chat identities (issue 31): trust on first use of a Matrix user's master key.

The first master key seen for a user is pinned. A different key seen later is kept beside the
pin as ``changed_key`` and is not trusted: only :meth:`IdentityQueries.acknowledge_identity`
(``agy-bridge matrix trust @user:server``) makes it the pin. Every instance of a bridge reads
the same rows, so an acknowledgement made with the bridge running counts at once.

Plain SQL, for SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bridge.core.store.rows import Row, StoreBase


@dataclass(frozen=True)
class IdentityPin:
    user_id: str
    master_key: str
    pinned_at: float
    # A master key seen since the pin and not acknowledged (None: none).
    changed_key: str | None
    changed_at: float | None


def _pin(row: Row) -> IdentityPin:
    return IdentityPin(
        user_id=row["user_id"],
        master_key=row["master_key"],
        pinned_at=row["pinned_at"],
        changed_key=row["changed_key"],
        changed_at=row["changed_at"],
    )


class IdentityQueries(StoreBase):
    """The store's pinned identities."""

    async def check_identity(self, user_id: str, master_key: str) -> IdentityPin:
        """Pin ``master_key`` for ``user_id`` if nothing is pinned yet; note it as a change
        when another key is pinned. The pin as it stands afterwards (trusted when its
        ``master_key`` is ``master_key``)."""
        now = time.time()
        async with self._db.transaction() as tx:
            await tx.execute(
                "INSERT INTO identity_pins (user_id, master_key, pinned_at) VALUES (?, ?, ?)"
                " ON CONFLICT (user_id) DO NOTHING",
                (user_id, master_key, now),
            )
            # The pinned key again: a change noted before (and since undone) is forgotten.
            await tx.execute(
                "UPDATE identity_pins SET changed_key = NULL, changed_at = NULL"
                " WHERE user_id = ? AND master_key = ? AND changed_key IS NOT NULL",
                (user_id, master_key),
            )
            await tx.execute(
                "UPDATE identity_pins SET changed_key = ?, changed_at = ?"
                " WHERE user_id = ? AND master_key <> ?"
                " AND (changed_key IS NULL OR changed_key <> ?)",
                (master_key, now, user_id, master_key, master_key),
            )
            rows = await tx.fetch("SELECT * FROM identity_pins WHERE user_id = ?", (user_id,))
        return _pin(rows[0])

    async def acknowledge_identity(self, user_id: str) -> IdentityPin | None:
        """Make the changed key seen for ``user_id`` the pin; None when no change waits."""
        rows = await self._db.execute_returning(
            "UPDATE identity_pins SET master_key = changed_key, pinned_at = ?,"
            " changed_key = NULL, changed_at = NULL"
            " WHERE user_id = ? AND changed_key IS NOT NULL RETURNING *",
            (time.time(), user_id),
        )
        return _pin(rows[0]) if rows else None

    async def identity_pins(self) -> list[IdentityPin]:
        rows = await self._db.fetch("SELECT * FROM identity_pins ORDER BY user_id")
        return [_pin(row) for row in rows]


# -- verifications waiting for the operator ----------------------------------------------------

VERIFICATION_WAITING = "waiting"
VERIFICATION_CONFIRMED = "confirmed"
VERIFICATION_REJECTED = "rejected"
VERIFICATION_ENDED = "ended"


@dataclass(frozen=True)
class VerificationRow:
    id: str
    user_id: str
    device_id: str
    # The seven emoji, space-separated, as the bot computed them.
    emoji: str
    state: str
    created_at: float


def _verification(row: Row) -> VerificationRow:
    return VerificationRow(
        id=row["id"],
        user_id=row["user_id"],
        device_id=row["device_id"],
        emoji=row["emoji"],
        state=row["state"],
        created_at=row["created_at"],
    )


class VerificationQueries(StoreBase):
    """A person's verification of the bot, waiting for the operator to compare the emoji."""

    async def add_verification(
        self, verification_id: str, user_id: str, device_id: str, emoji: str
    ) -> None:
        await self._write(
            "INSERT INTO verifications (id, user_id, device_id, emoji, state, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            (verification_id, user_id, device_id, emoji, VERIFICATION_WAITING, time.time()),
        )

    async def verifications(self, state: str = VERIFICATION_WAITING) -> list[VerificationRow]:
        rows = await self._db.fetch(
            "SELECT * FROM verifications WHERE state = ? ORDER BY created_at", (state,)
        )
        return [_verification(row) for row in rows]

    async def answer_verification(self, verification_id: str, state: str) -> bool:
        """The operator's answer (or the bot's end of it); False when it no longer waits."""
        return (
            await self._write(
                "UPDATE verifications SET state = ?, answered_at = ? WHERE id = ? AND state = ?",
                (state, time.time(), verification_id, VERIFICATION_WAITING),
            )
            == 1
        )

    async def end_waiting_verifications(self) -> int:
        """At the Matrix adapter's start: the verifications of an earlier run cannot finish
        (their keys lived in its memory); none of them is offered to the operator any more."""
        return await self._write(
            "UPDATE verifications SET state = ?, answered_at = ? WHERE state = ?",
            (VERIFICATION_ENDED, time.time(), VERIFICATION_WAITING),
        )

    async def verification(self, verification_id: str) -> VerificationRow | None:
        rows = await self._db.fetch("SELECT * FROM verifications WHERE id = ?", (verification_id,))
        return _verification(rows[0]) if rows else None

"""The web console's sign-in links and sessions, kept in the bridge's store (bridge/web uses them;
`!web` makes the links).

A link is ``<token>.<signature>``: the token is 256 random bits, the signature an HMAC of it
under a key made once and kept in the store (every instance signs and checks with the same
key), so a made-up link is refused before any lookup. The store keeps only the token's hash,
its person, its deadline and when it was used: using it is one conditional UPDATE, so a link
is honoured once across every instance sharing the store. A session is a random id (its hash
stored) with its person, its CSRF token and its deadline.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from bridge.core.events import Author
from bridge.core.store.rows import Database

_KEY_NAME = "link-signing"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    author: Author
    platform: str
    csrf: str
    expires_at: float


class WebSessions:
    """Links and sessions in the store (``db``)."""

    def __init__(self, db: Database, link_seconds: float, session_seconds: float) -> None:
        self._db = db
        self._link_seconds = link_seconds
        self._session_seconds = session_seconds
        self._key: bytes | None = None

    async def _signing_key(self) -> bytes:
        if self._key is None:
            await self._db.execute(
                "INSERT INTO web_keys (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                (_KEY_NAME, secrets.token_hex(32)),
            )
            rows = await self._db.fetch("SELECT value FROM web_keys WHERE name = ?", (_KEY_NAME,))
            self._key = bytes.fromhex(str(rows[0]["value"]))
        return self._key

    async def _sign(self, token: str) -> str:
        return hmac.new(await self._signing_key(), token.encode(), hashlib.sha256).hexdigest()

    async def _checked(self, link: str) -> str | None:
        """The token of a link whose signature holds, else None."""
        token, _, signature = link.partition(".")
        if not token or len(link) > 200:
            return None
        if not hmac.compare_digest(await self._sign(token), signature):
            return None
        return token

    # --- links ----------------------------------------------------------------------------

    async def new_link(self, author: Author, platform: str) -> str:
        token = secrets.token_urlsafe(32)
        await self._db.execute(
            "INSERT INTO web_links (token_hash, author_json, platform, expires_at)"
            " VALUES (?, ?, ?, ?)",
            (_hash(token), author.model_dump_json(), platform, time.time() + self._link_seconds),
        )
        return f"{token}.{await self._sign(token)}"

    async def link_usable(self, link: str) -> bool:
        """Signed, unused and in time (a GET shows the button; nothing is used)."""
        token = await self._checked(link)
        if token is None:
            return False
        rows = await self._db.fetch(
            "SELECT 1 FROM web_links WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?",
            (_hash(token), time.time()),
        )
        return bool(rows)

    async def use_link(self, link: str) -> tuple[Author, str] | None:
        """The link's person and platform, once: the first use wins, on every instance."""
        token = await self._checked(link)
        if token is None:
            return None
        now = time.time()
        rows = await self._db.execute_returning(
            "UPDATE web_links SET used_at = ? WHERE token_hash = ? AND used_at IS NULL"
            " AND expires_at > ? RETURNING author_json, platform",
            (now, _hash(token), now),
        )
        if not rows:
            return None
        return Author.model_validate_json(rows[0]["author_json"]), str(rows[0]["platform"])

    # --- sessions -------------------------------------------------------------------------

    async def open(self, author: Author, platform: str) -> str:
        session_id = secrets.token_urlsafe(32)
        now = time.time()
        await self._db.execute(
            "INSERT INTO web_sessions (id_hash, author_json, platform, csrf, created_at,"
            " expires_at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                _hash(session_id),
                author.model_dump_json(),
                platform,
                secrets.token_urlsafe(32),
                now,
                now + self._session_seconds,
            ),
        )
        # Old links and sessions go as new ones come (a day after their end).
        await self._db.execute("DELETE FROM web_links WHERE expires_at < ?", (now - 86400,))
        await self._db.execute("DELETE FROM web_sessions WHERE expires_at < ?", (now - 86400,))
        return session_id

    async def session(self, session_id: str) -> Session | None:
        if not session_id or len(session_id) > 100:
            return None
        rows = await self._db.fetch(
            "SELECT author_json, platform, csrf, expires_at FROM web_sessions"
            " WHERE id_hash = ? AND expires_at > ?",
            (_hash(session_id), time.time()),
        )
        if not rows:
            return None
        row = rows[0]
        return Session(
            author=Author.model_validate_json(row["author_json"]),
            platform=str(row["platform"]),
            csrf=str(row["csrf"]),
            expires_at=float(row["expires_at"]),
        )

    async def close(self, session_id: str) -> None:
        await self._db.execute("DELETE FROM web_sessions WHERE id_hash = ?", (_hash(session_id),))

"""The durable state of the bridge: one store over SQLite (the default) or PostgreSQL.

The inbox is the heart of exactly-once delivery: a message is written here (its platform event
id is unique, so retries and redeliveries stop here) before the platform is acknowledged, and it
leaves the ``pending`` state in exactly one transaction, either injected into a running turn or
taken as (part of) a turn.

The SQL is written once for both databases (``?`` placeholders, ``ON CONFLICT``,
``RETURNING``); what differs (column types, row locks, wake-ups) is the :class:`Database`'s, in
:mod:`bridge.core.store.sqlite` and :mod:`bridge.core.store.postgres`.

:class:`Store` is composed of one class per concern, each in its own module:
:mod:`bridge.core.store.inbox` (the inbox and messages), :mod:`bridge.core.store.threads`
(threads, turns and processes), :mod:`bridge.core.store.approvals` (approvals and the allow
list), :mod:`bridge.core.store.moves` (a thread's rows moved to another key) and
:mod:`bridge.core.store.identities` (pinned Matrix identities, verifications); the rows, enums
and protocols are in :mod:`bridge.core.store.rows` and the schema in
:mod:`bridge.core.store.schema`. They are re-exported here, so ``from bridge.core.store import
X`` keeps working.
"""

from __future__ import annotations

from bridge.config import Config
from bridge.core.store.approvals import ApprovalQueries
from bridge.core.store.changes import ChangeQueries
from bridge.core.store.identities import IdentityPin, IdentityQueries, VerificationQueries
from bridge.core.store.inbox import InboxQueries
from bridge.core.store.moves import MoveQueries
from bridge.core.store.pulls import PullQueries, PullRow
from bridge.core.store.rows import (
    ApprovalRow,
    ApprovalState,
    Database,
    MessageState,
    ProcessRow,
    Row,
    StoredMessage,
    StoreError,
    ThreadRow,
    TurnRow,
    TurnState,
    Tx,
    Usage,
)
from bridge.core.store.schema import SCHEMA_VERSION, migrate, migration_statements
from bridge.core.store.threads import ThreadQueries
from bridge.core.store.titles import ThreadTitle, TitleQueries

__all__ = [
    "SCHEMA_VERSION",
    "ApprovalRow",
    "ApprovalState",
    "Database",
    "IdentityPin",
    "MessageState",
    "ProcessRow",
    "PullRow",
    "Row",
    "Store",
    "StoreError",
    "StoredMessage",
    "ThreadRow",
    "ThreadTitle",
    "TurnRow",
    "TurnState",
    "Tx",
    "Usage",
    "is_shared",
    "migrate",
    "migration_statements",
    "store_url",
]


# One class made of mixins, not a facade over three objects: callers keep one object (every
# ``store.add_message``, ``store.thread``, ``store.approval``... works as before), and the parts
# share one database, one transaction helper (``StoreBase._write``) and one memory of recorded
# threads (a message can record its thread in its own transaction) through methods on their
# common base, never by reaching into each other.
class Store(
    InboxQueries,
    ChangeQueries,
    ThreadQueries,
    ApprovalQueries,
    MoveQueries,
    IdentityQueries,
    VerificationQueries,
    TitleQueries,
    PullQueries,
):
    # The PostgreSQL channel that carries the thread key of a message stored for a thread the
    # storing instance does not run.
    INBOX_CHANNEL = "agy_bridge_inbox"

    def __init__(self, db: Database):
        self._db = db
        self._recorded: set[str] = set()

    @property
    def database(self) -> Database:
        return self._db


def store_url(config: Config) -> str:
    """``[store] url``, or the default SQLite file under the data directory."""
    if config.store.url is not None and config.store.url.get_secret_value():
        return config.store.url.get_secret_value()
    return f"sqlite:///{(config.bridge.data_dir / 'bridge.sqlite3').resolve()}"


def is_shared(url: str) -> bool:
    """Several instances can share this store (PostgreSQL)."""
    return url.startswith(("postgresql://", "postgres://"))

"""The store's schema: the migrations for both databases, and running them.

Apart from :mod:`bridge.core.store` so that the two backends (:mod:`bridge.core.store.sqlite`,
:mod:`bridge.core.store.postgres`), which migrate the database they open, need only this module and
:mod:`bridge.core.store.rows`.
"""

from __future__ import annotations

from collections.abc import Mapping

from bridge.core.store.rows import Database, StoreError

SCHEMA_VERSION = 15

# Written for both databases. ``{id}`` is an auto-numbered primary key and ``{real}`` a float
# column wide enough for a Unix time (PostgreSQL's REAL is 4 bytes); each database fills them in.
# A migration is a list of statements separated by ``;`` and runs in one transaction with the
# version bump. Never edit a released migration; add the next number.
_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE threads (
        key TEXT PRIMARY KEY,
        platform TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread TEXT NOT NULL,
        conversation_id TEXT,
        model TEXT,
        workdir TEXT,
        usage_json TEXT,
        num_turns INTEGER NOT NULL DEFAULT 0,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL
    );
    CREATE TABLE inbox (
        id {id},
        thread_key TEXT NOT NULL,
        event_key TEXT NOT NULL UNIQUE,
        message_id TEXT NOT NULL,
        author_json TEXT NOT NULL,
        text TEXT NOT NULL,
        attachments_json TEXT NOT NULL DEFAULT '[]',
        saved_json TEXT,
        state TEXT NOT NULL,
        turn_id INTEGER,
        received_at {real} NOT NULL,
        delivered_at {real}
    );
    CREATE INDEX inbox_pending ON inbox (thread_key, state, id);
    CREATE TABLE turns (
        id {id},
        thread_key TEXT NOT NULL,
        state TEXT NOT NULL,
        conversation_id TEXT,
        started_at {real} NOT NULL,
        ended_at {real},
        error TEXT,
        response TEXT,
        usage_json TEXT
    );
    CREATE INDEX turns_state ON turns (state);
    CREATE TABLE processes (
        pgid INTEGER PRIMARY KEY,
        thread_key TEXT NOT NULL,
        run_marker TEXT NOT NULL,
        started_at {real} NOT NULL
    )
    """,
    # Columns nothing read or wrote.
    2: """
    ALTER TABLE threads DROP COLUMN workdir;
    ALTER TABLE threads DROP COLUMN num_turns
    """,
    # Several instances on one PostgreSQL: a thread runs where its lease is; a turn and an agy
    # process belong to the run of the instance that started them, a conversation to the instance
    # whose agy holds it (unused, and harmless, on SQLite).
    3: """
    CREATE TABLE leases (
        thread_key TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at {real} NOT NULL
    );
    CREATE INDEX leases_owner ON leases (owner);
    ALTER TABLE threads ADD COLUMN conversation_instance TEXT;
    ALTER TABLE turns ADD COLUMN owner TEXT;
    ALTER TABLE processes ADD COLUMN owner TEXT
    """,
    # Approvals (issue 11): every request and decision, and each thread's "always" list. The
    # ids are made by the bridge (uuid hex), so no auto-numbering is needed.
    4: """
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        thread_key TEXT NOT NULL,
        tool TEXT NOT NULL,
        args_json TEXT NOT NULL,
        summary TEXT NOT NULL,
        requested_by_json TEXT,
        state TEXT NOT NULL,
        handle TEXT,
        decided_by_json TEXT,
        reason TEXT,
        requested_at {real} NOT NULL,
        decided_at {real}
    );
    CREATE INDEX approvals_thread ON approvals (thread_key, state);
    CREATE TABLE approval_allow (
        thread_key TEXT NOT NULL,
        pattern TEXT NOT NULL,
        added_by_json TEXT,
        added_at {real} NOT NULL,
        PRIMARY KEY (thread_key, pattern)
    )
    """,
    # A thread's usage is read from its latest turn (agy reports the conversation's totals at
    # every turn's end) instead of being written to the thread's row at every turn as well.
    5: """
    CREATE INDEX turns_thread ON turns (thread_key, id)
    """,
    # A message is found by its platform id when its author edits or deletes it, and a chat's
    # catch-up reads where each thread was last seen.
    6: """
    CREATE INDEX inbox_message ON inbox (thread_key, message_id, id)
    """,
    # People's ratings of the agent's answers (Slack's feedback buttons): one row per person
    # and answer, tied to the turn that wrote it.
    7: """
    CREATE TABLE answer_feedback (
        thread_key TEXT NOT NULL,
        message_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        turn_id INTEGER,
        positive INTEGER NOT NULL,
        at {real} NOT NULL,
        PRIMARY KEY (thread_key, message_id, user_id)
    )
    """,
    # Matrix device trust (issue 31): each allowed user's cross-signing master key, pinned the
    # first time it is seen (trust on first use), and a different key seen since, which stays
    # untrusted until the operator acknowledges it (`agy-bridge matrix trust @user:server`).
    8: """
    CREATE TABLE identity_pins (
        user_id TEXT PRIMARY KEY,
        master_key TEXT NOT NULL,
        pinned_at {real} NOT NULL,
        changed_key TEXT,
        changed_at {real}
    )
    """,
    # Matrix verification (issue 31): a person's request to verify the bot waits here, with
    # the bot's seven emoji, for the operator's answer (`agy-bridge matrix verify`), which the
    # instance running the Matrix adapter reads back.
    9: """
    CREATE TABLE verifications (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        device_id TEXT NOT NULL,
        emoji TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at {real} NOT NULL,
        answered_at {real}
    );
    CREATE INDEX verifications_state ON verifications (state)
    """,
    # Team controls (issue 43, docs/team-controls.md). usage_shares: each turn's usage (the
    # difference of agy's cumulative counts), one row per person it is attributed to; the
    # primary key makes recording a turn twice (a retry, a second instance) count it once.
    # The budget check is on every turn's path: its sums read covering indexes only.
    # budget_notices: the warning told once per budget, subject, period and thread.
    # budget_extensions: an approver's `!budget extend` for one period. audit: the trail, one
    # hash chain over the whole store (seq is contiguous; each row carries its predecessor's
    # hash).
    10: """
    CREATE TABLE usage_shares (
        turn_id INTEGER NOT NULL,
        person TEXT NOT NULL,
        person_name TEXT NOT NULL,
        thread_key TEXT NOT NULL,
        platform TEXT NOT NULL,
        channel TEXT NOT NULL,
        model TEXT NOT NULL,
        at {real} NOT NULL,
        input_tokens INTEGER NOT NULL,
        output_tokens INTEGER NOT NULL,
        thinking_tokens INTEGER NOT NULL,
        cache_read_tokens INTEGER NOT NULL,
        total_tokens INTEGER NOT NULL,
        cost {real},
        PRIMARY KEY (turn_id, person)
    );
    CREATE INDEX usage_person ON usage_shares (person, at, total_tokens, cost);
    CREATE INDEX usage_channel ON usage_shares (channel, at, total_tokens, cost);
    CREATE INDEX usage_thread ON usage_shares (thread_key, at);
    CREATE INDEX usage_at ON usage_shares (at, total_tokens, cost);
    CREATE TABLE budget_notices (
        budget TEXT NOT NULL,
        subject TEXT NOT NULL,
        period TEXT NOT NULL,
        thread_key TEXT NOT NULL,
        at {real} NOT NULL,
        PRIMARY KEY (budget, subject, period, thread_key)
    );
    CREATE TABLE budget_extensions (
        id {id},
        budget TEXT NOT NULL,
        subject TEXT NOT NULL,
        period TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        cost {real} NOT NULL,
        by_json TEXT NOT NULL,
        at {real} NOT NULL
    );
    CREATE INDEX budget_extensions_period ON budget_extensions (budget, period);
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY,
        at {real} NOT NULL,
        instance TEXT NOT NULL,
        kind TEXT NOT NULL,
        thread_key TEXT NOT NULL,
        channel TEXT NOT NULL,
        person TEXT NOT NULL,
        detail_json TEXT NOT NULL,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE INDEX audit_at ON audit (at)
    """,
    # A thread's title as a person named it in the chat (Slack's agent_session_title_changed,
    # issue 47): shown by !status; the bridge's own titles are never written here.
    11: """
    CREATE TABLE thread_titles (
        thread_key TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        set_by TEXT NOT NULL,
        at {real} NOT NULL
    )
    """,
    # Scheduled prompts (issue 44, docs/schedules.md). schedules: those added in the chat (their
    # definition and author) and a row for each config schedule, whose created_at is when the
    # bridge first saw it (no run is owed before). schedule_runs: one row per schedule and
    # scheduled time, written before the run starts: its primary key is what makes a run
    # happen once across instances, restarts and clock jumps. threads.workspace: the
    # [[workspaces]] path a scheduled run's thread works in, instead of its channel's.
    12: """
    CREATE TABLE schedules (
        key TEXT PRIMARY KEY,
        platform TEXT NOT NULL,
        channel TEXT NOT NULL,
        thread TEXT NOT NULL,
        cron TEXT NOT NULL,
        timezone TEXT NOT NULL,
        prompt TEXT NOT NULL,
        author_json TEXT,
        created_at {real} NOT NULL
    );
    CREATE INDEX schedules_channel ON schedules (platform, channel);
    CREATE TABLE schedule_runs (
        schedule_key TEXT NOT NULL,
        due BIGINT NOT NULL,
        state TEXT NOT NULL,
        instance TEXT NOT NULL,
        claimed_at {real} NOT NULL,
        thread_key TEXT,
        event_key TEXT,
        note TEXT,
        PRIMARY KEY (schedule_key, due)
    );
    ALTER TABLE threads ADD COLUMN workspace TEXT
    """,
    # Issue 39: each approval request's short number in its thread, which typed answers name
    # (`approve 7`): an answer decides only the request its author saw.
    13: """
    ALTER TABLE approvals ADD COLUMN number INTEGER
    """,
    # Issue 46: the console's sign-in links (single use across instances), its sessions, and
    # the key that signs links (made once, shared by every instance).
    14: """
    CREATE TABLE web_links (
        token_hash TEXT PRIMARY KEY,
        author_json TEXT NOT NULL,
        platform TEXT NOT NULL,
        expires_at {real} NOT NULL,
        used_at {real}
    );
    CREATE TABLE web_sessions (
        id_hash TEXT PRIMARY KEY,
        author_json TEXT NOT NULL,
        platform TEXT NOT NULL,
        csrf TEXT NOT NULL,
        created_at {real} NOT NULL,
        expires_at {real} NOT NULL
    );
    CREATE TABLE web_keys (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )
    """,
    # Issue 45: a worktree thread's pull request (one per thread), the commit the bridge last
    # pushed (a push never overwrites commits the bridge did not make) and the check states
    # last told in the thread (each change told once, across restarts and instances).
    15: """
    CREATE TABLE pull_requests (
        thread_key TEXT PRIMARY KEY,
        forge TEXT NOT NULL,
        repo TEXT NOT NULL,
        number INTEGER NOT NULL,
        head TEXT NOT NULL,
        base TEXT NOT NULL,
        url TEXT NOT NULL,
        state TEXT NOT NULL,
        pushed_sha TEXT NOT NULL,
        checks_sha TEXT NOT NULL,
        checks_json TEXT NOT NULL,
        updated_at {real} NOT NULL
    );
    CREATE UNIQUE INDEX pull_requests_number ON pull_requests (forge, repo, number)
    """,
}


def migration_statements(version: int, types: Mapping[str, str]) -> list[str]:
    """One migration's statements with the database's column types filled in."""
    sql = _MIGRATIONS[version]
    for name, value in types.items():
        sql = sql.replace("{" + name + "}", value)
    return [s.strip() for s in sql.split(";") if s.strip()]


async def migrate(db: Database, lock: str = "") -> None:
    """Bring the schema to :data:`SCHEMA_VERSION`, each version in one transaction.

    ``lock`` is a statement run first in that transaction so that instances starting together
    migrate one after the other (PostgreSQL); SQLite's write transaction already is one.
    """
    async with db.transaction() as tx:
        if lock:
            await tx.execute(lock)
        await tx.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        rows = await tx.fetch("SELECT value FROM meta WHERE key = 'schema_version'")
        current = int(rows[0]["value"]) if rows else 0
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"the store was written by a newer agy-bridge (schema {current}, this one knows "
                f"{SCHEMA_VERSION}); upgrade agy-bridge"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            for statement in migration_statements(version, db.types):
                await tx.execute(statement)
            await tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(version),),
            )

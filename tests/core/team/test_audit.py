"""The audit trail: a hash chain that finds an edited, removed or reordered record, pruning
that keeps it verifiable, and an export of a scripted session that matches what happened."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from bridge import audit_cli, cli
from bridge.config import load_config
from bridge.core.events import Author, ThreadRef
from bridge.core.scrub import Scrubber
from bridge.core.store import Store
from bridge.core.store.opening import open_store
from bridge.core.team.audit import CHECKPOINT, AuditLog, Selection, record_hash
from tests.core.harness import Harness, running, thread
from tests.pg import Postgres

pytestmark = pytest.mark.anyio

REF = ThreadRef(platform="slack", channel="C1", thread="1700.1")
ALICE = Author(id="U1", display_name="Alice")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(f"sqlite:///{tmp_path / 'store.sqlite3'}") as opened:
        yield opened


async def filled(store: Store, count: int = 6) -> AuditLog:
    log = AuditLog(store.database, "i1")
    for n in range(count):
        assert await log.append("command", thread=REF, person=ALICE, command=f"c{n}")
    return log


async def test_an_untouched_chain_is_intact(store: Store) -> None:
    log = await filled(store)
    verdict = await log.verify()
    assert verdict.intact and verdict.checked == 6 and verdict.problems == []
    assert verdict.head.startswith("6:")


async def test_an_edited_record_is_found(store: Store) -> None:
    log = await filled(store)
    await store.database.execute(
        "UPDATE audit SET detail_json = ? WHERE seq = 3", ('{"command": "innocent"}',)
    )
    verdict = await log.verify()
    assert not verdict.intact and verdict.first_bad == 3
    assert verdict.problems == ["record 3 (command) was changed"]


async def test_an_edit_that_fixes_its_own_hash_breaks_the_next_link(store: Store) -> None:
    log = await filled(store)
    [row] = await store.database.fetch("SELECT * FROM audit WHERE seq = 3")

    forged = '{"command": "innocent"}'
    digest = record_hash(
        3, row["at"], row["instance"], row["kind"], row["thread_key"], row["channel"],
        row["person"], forged, row["prev_hash"],
    )  # fmt: skip
    await store.database.execute(
        "UPDATE audit SET detail_json = ?, hash = ? WHERE seq = 3", (forged, digest)
    )
    verdict = await log.verify()
    assert not verdict.intact and verdict.first_bad == 4
    assert "record 4 does not follow record 3" in verdict.problems


async def test_a_removed_record_is_found(store: Store) -> None:
    log = await filled(store)
    await store.database.execute("DELETE FROM audit WHERE seq = 4")
    verdict = await log.verify()
    assert not verdict.intact and verdict.first_bad == 5
    assert verdict.problems == ["record(s) 4 were removed"]


async def test_a_removed_newest_record_is_found_by_the_head(store: Store) -> None:
    log = await filled(store)
    await store.database.execute("DELETE FROM audit WHERE seq = 6")
    verdict = await log.verify()
    assert not verdict.intact
    assert "the newest record should be 6 (the head)" in verdict.problems[0]


async def test_a_reordered_pair_is_found(store: Store) -> None:
    log = await filled(store)
    # Swap records 2 and 3 (their numbers exchanged, as a reordering in the table).
    await store.database.execute("UPDATE audit SET seq = -1 WHERE seq = 2")
    await store.database.execute("UPDATE audit SET seq = 2 WHERE seq = 3")
    await store.database.execute("UPDATE audit SET seq = 3 WHERE seq = -1")
    verdict = await log.verify()
    assert not verdict.intact and verdict.first_bad == 2
    assert "record 2 (command) was changed" in verdict.problems
    assert "record 3 (command) was changed" in verdict.problems


async def test_removing_the_oldest_records_without_a_checkpoint_is_found(store: Store) -> None:
    log = await filled(store)
    await store.database.execute("DELETE FROM audit WHERE seq <= 2")
    verdict = await log.verify()
    assert not verdict.intact
    assert verdict.problems == ["records before 3 are missing and no checkpoint covers them"]


async def test_pruning_leaves_a_checkpoint_and_an_intact_chain(store: Store) -> None:
    log = await filled(store)
    [row] = await store.database.fetch("SELECT at FROM audit WHERE seq = 4")
    assert await log.prune(before=row["at"]) == 3  # records 1 to 3
    records = await log.records()
    assert [r.seq for r in records] == [4, 5, 6, 7]
    assert records[-1].kind == CHECKPOINT and records[-1].detail["through"] == 3
    assert (await log.verify()).intact
    await log.append("command", thread=REF, person=ALICE, command="after")
    assert (await log.verify()).intact
    assert await log.prune(before=row["at"]) == 0  # nothing older: no second checkpoint
    # Everything pruned: the checkpoint alone carries the chain on.
    assert await log.prune(before=records[-1].at + 3600) == 5
    assert [r.kind for r in await log.records()] == [CHECKPOINT]
    assert (await log.verify()).intact
    await log.append("command", thread=REF, person=ALICE, command="later")
    assert (await log.verify()).intact
    # A record removed after a prune is still found.
    await store.database.execute("DELETE FROM audit WHERE seq = (SELECT MIN(seq) FROM audit)")
    assert not (await log.verify()).intact


async def test_secrets_are_scrubbed_and_selection_narrows(store: Store) -> None:
    log = AuditLog(store.database, "i1", Scrubber(["xoxb-very-secret-token"]))
    await log.append("turn_started", thread=REF, person=ALICE, text="use xoxb-very-secret-token")
    other = ThreadRef(platform="slack", channel="C2", thread="1700.9")
    await log.append("command", thread=other, person="U2", command="new")
    [first] = await log.records(Selection(person="U1"))
    assert "xoxb-very-secret-token" not in first.detail_json
    assert (await log.verify()).intact
    assert [r.person for r in await log.records(Selection(channel="C2"))] == ["U2"]
    assert [r.person for r in await log.records(Selection(thread="1700.9"))] == ["U2"]
    assert [r.person for r in await log.records(Selection(thread=other.key))] == ["U2"]


async def _export(h: Harness, *args: str) -> tuple[int, str, str]:
    """``agy-bridge audit ARGS`` on the harness's store: exit status, stdout, stderr."""
    config = h.tmp / "audit.toml"
    config.write_text(f'[bridge]\ndata_dir = "{h.tmp / "data"}"\n', encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    parsed = cli._parser().parse_args(["audit", *args, "--config", str(config)])
    status = await audit_cli.run(load_config(config), parsed, out, err)
    return status, out.getvalue(), err.getvalue()


async def test_the_export_of_a_scripted_session_matches_what_happened(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        go = h.flag("go")
        await h.say(f"build it [[tool run_command echo built]] [[waitfirst {go}]]", who="alice")
        await h.adapter.changes.until(lambda: h.adapter.replies)
        await h.say("and run the tests", who="bob")
        go.touch()
        done = await h.adapter.wait_finished(1)
        await h.adapter.changes.until(lambda: done[0].closed)
        await h.say("!model sim-fast", who="carol")
        await h.say("!new", who="alice")
        await h.say("!stop", who="bob")
        await h.adapter.wait_notice("Nothing is running")

    status, out, err = await _export(h)
    assert status == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    seen = [(r["kind"], r["person"]) for r in records]
    assert seen == [
        ("turn_started", "@alice:test"),
        ("message_injected", "@bob:test"),
        ("tool_call", ""),
        ("turn_ended", ""),
        ("command", "@carol:test"),
        ("command", "@alice:test"),
        ("command", "@bob:test"),
    ]
    started, injected, tool, ended = records[:4]
    assert started["detail"]["messages"][0]["text"].startswith("build it")
    assert started["detail"]["messages"][0]["how"] == "new"
    assert injected["detail"]["text"] == "and run the tests"
    assert tool["detail"]["tool"] == "run_command" and "echo built" in tool["detail"]["target"]
    assert tool["detail"]["outcome"] == "done"
    assert ended["detail"]["state"] == "done"
    assert ended["detail"]["attributed"].keys() == {"@alice:test", "@bob:test"}
    assert [r["detail"]["command"] for r in records[4:]] == ["model", "new", "stop"]
    assert records[4]["detail"]["arg"] == "sim-fast"
    assert {r["thread"] for r in records} == {thread().key}

    status, out, _ = await _export(h, "--user", "@bob:test", "--format", "csv")
    lines = out.splitlines()
    assert lines[0] == "seq,time,instance,kind,thread,channel,person,detail,hash"
    assert [line.split(",")[3] for line in lines[1:]] == ["message_injected", "command"]

    status, out, _ = await _export(h, "verify")
    assert status == 0 and out.startswith("audit trail intact: 7 record(s)")
    async with open_store(f"sqlite:///{tmp_path / 'data' / 'bridge.sqlite3'}") as store:
        await store.database.execute("UPDATE audit SET person = 'someone' WHERE seq = 2")
    status, _, err = await _export(h, "verify")
    assert status == 1 and "record 2 (message_injected) was changed" in err


async def test_two_instances_appending_at_once_keep_one_chain(postgres: Postgres) -> None:
    url = postgres.new_database()
    async with open_store(url) as one, open_store(url) as two:
        logs = [AuditLog(one.database, "a"), AuditLog(two.database, "b")]

        async def append(log: AuditLog, n: int) -> None:
            assert await log.append("command", thread=REF, person=ALICE, command=f"c{n}")

        async with anyio.create_task_group() as tg:
            for n in range(40):
                tg.start_soon(append, logs[n % 2], n)
        verdict = await logs[0].verify()
        assert verdict.intact and verdict.checked == 40, verdict.problems
        records = await logs[1].records()
        assert [r.seq for r in records] == list(range(1, 41))
        assert {r.instance for r in records} == {"a", "b"}
        await two.database.execute("DELETE FROM audit WHERE seq = 20")
        assert (await logs[0].verify()).problems == ["record(s) 20 were removed"]


async def test_a_message_queued_behind_a_turn_is_recorded_as_queued(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        started, go = h.flag("started"), h.flag("go")
        await h.say(f"one call [[touch {started}]] [[hold {go}]]", who="alice")
        with anyio.fail_after(20):
            while not started.exists():
                await anyio.sleep(0.02)
        await h.say("after the last hook call", who="bob")  # too late to be injected
        go.touch()  # the turn ran until then, however slow the machine
        done = await h.adapter.wait_finished(2)
        await h.adapter.changes.until(lambda: all(r.closed for r in done[:2]))
        records = await AuditLog(h.bridge.store.database).records()
    turns = [r for r in records if r.kind == "turn_started"]
    assert [r.person for r in turns] == ["@alice:test", "@bob:test"]
    assert [m["how"] for r in turns for m in r.detail["messages"]] == ["new", "queued"]
    assert not [r for r in records if r.kind == "message_injected"]

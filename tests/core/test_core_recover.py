"""The core's start after a crash (``Core.recover``) on a store left as a killed bridge leaves it:
process rows, a turn still ``running``, waiting approvals, pending messages. Scripted agy
(``test_worker``; ``world`` does not recover by itself, so each test fills the store first).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.recovery import RESTART_NOTICE, cut_off_notice
from bridge.core.store.rows import ApprovalState, TurnState
from bridge.metrics import PREFIX
from tests.core.scripted import World, ref, world

pytestmark = pytest.mark.anyio


def message(text: str, where: ThreadRef, n: int) -> IncomingMessage:
    return IncomingMessage(
        thread=where,
        event_id=f"e{n}",
        message_id=f"m{n}",
        author=Author(id="@alice:test", display_name="Alice"),
        text=text,
    )


async def running_turn(w: World, where: ThreadRef, n: int) -> int:
    """A turn a killed bridge left ``running``."""
    store = w.bridge.store
    await store.add_message(message(f"lost {n}", where, n))
    await store.ensure_thread(where)
    taken = await store.take_turn(where.key, "conv-old")
    assert taken is not None
    return taken[0]


async def turn_state(w: World, turn_id: int) -> tuple[str, str | None]:
    [row] = await w.bridge.store._db.fetch(
        "SELECT state, error FROM turns WHERE id = ?", (turn_id,)
    )
    return row["state"], row["error"]


async def test_a_turn_left_running_is_reported_once_and_what_waited_runs(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        turn = await running_turn(w, ref(), 1)
        await w.bridge.store.add_message(message("written meanwhile", ref(), 2))
        await w.bridge.core.recover()
        assert w.adapter.notices == [(ref().key, cut_off_notice(RESTART_NOTICE, None))]
        assert await turn_state(w, turn) == (
            TurnState.INTERRUPTED,
            "the bridge restarted during this turn",
        )
        agy = await w.agys.nth(1)
        blocks = "\n".join(await agy.wait_turns(1))
        assert "written meanwhile" in blocks and "lost 1" not in blocks
        assert len(w.adapter.notices) == 1, "reported once"


async def test_a_turn_of_a_chat_not_configured_now_is_left_for_later(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        elsewhere = ThreadRef(platform="matrix", channel="!room", thread="$t")
        turn = await running_turn(w, elsewhere, 1)
        await w.bridge.store.add_message(message("waiting there", elsewhere, 2))
        await w.bridge.core.recover()
        assert w.adapter.notices == []
        assert (await turn_state(w, turn))[0] == TurnState.RUNNING
        assert not w.bridge.core.threads and not w.agys.started


async def test_a_report_that_cannot_be_posted_is_tried_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path) as w:
        turn = await running_turn(w, ref(), 1)

        async def down(*args: Any) -> None:
            raise ConnectionError("chat down")

        monkeypatch.setattr(w.adapter, "post_message", down)
        await w.bridge.core.recover()
        assert (await turn_state(w, turn))[0] == TurnState.RUNNING
        assert any(
            r.levelno == logging.WARNING and "could not report an interrupted turn" in r.message
            for r in caplog.records
        )
        monkeypatch.undo()
        await w.bridge.core.recover()
        assert w.adapter.notices == [(ref().key, cut_off_notice(RESTART_NOTICE, None))]
        assert (await turn_state(w, turn))[0] == TurnState.INTERRUPTED


async def test_leftover_process_rows_are_cleared(tmp_path: Path, caplog: Any) -> None:
    async with world(tmp_path) as w:
        store = w.bridge.store
        # A group that no longer exists (pgid far above pid_max): nothing to end, the row goes.
        await store.add_process(2**30, ref().key, "marker-of-an-old-run")
        await w.bridge.core.recover()
        assert await store.processes() == []


async def test_waiting_approvals_expire_and_are_marked_so(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        store = w.bridge.store
        bob = Author(id="@bob:test", display_name="Bob")
        await store.add_approval(
            "a1", ref().key, "run_command", {"CommandLine": "rm a"}, "rm a", bob
        )
        await store.set_approval_handle("a1", "req-old")
        # Killed between posting the request and noting its message: said anew in the thread.
        await store.add_approval(
            "a2", ref().key, "run_command", {"CommandLine": "rm b"}, "rm b", bob
        )
        elsewhere = ThreadRef(platform="matrix", channel="!room", thread="$t")
        await store.add_approval("a3", elsewhere.key, "run_command", {}, "rm c", bob)
        await w.bridge.core.recover()
        reason = "the bridge restarted while it waited, so it was not run"
        for approval_id in ("a1", "a2"):
            row = await store.approval(approval_id)
            assert row is not None and row.state is ApprovalState.EXPIRED
            assert row.reason == reason
        third = await store.approval("a3")
        assert third is not None and third.state is ApprovalState.WAITING
        settled = w.adapter.settled["req-old"]
        assert settled.state == "expired" and settled.reason == reason
        assert "rm a" in settled.text
        [(key, said)] = w.adapter.notices
        assert key == ref().key and "rm b" in said and "bridge restarted" in said
        value = w.bridge.metrics.registry.get_sample_value(
            PREFIX + "approval_requests_total", {"decision": "expired"}
        )
        assert value == 2

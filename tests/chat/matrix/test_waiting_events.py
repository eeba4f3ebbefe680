"""The events waiting for their keys survive a restart (late_keys.WaitingEvents), no server."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from nio import MegolmEvent

from bridge.chat.matrix.late_keys import Undecrypted, Verdict, WaitingEvents, verdict

from .test_sync_worker import FakeOlm, encrypted, event, parsed, room_of, world

ROOM = "!room:example.org"


def megolm(event_id: str) -> MegolmEvent:
    event = MegolmEvent.from_dict(
        {
            "type": "m.room.encrypted",
            "event_id": event_id,
            "sender": "@alice:example.org",
            "origin_server_ts": 1,
            "content": {
                "algorithm": "m.megolm.v1.aes-sha2",
                "ciphertext": "AwgA",
                "sender_key": "curve",
                "session_id": "sess",
                "device_id": "ALICEDEV",
            },
        }
    )
    assert isinstance(event, MegolmEvent)
    return event


def test_waiting_events_are_read_back_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "undecrypted.json"
    waiting = WaitingEvents(path)
    waiting["$e1"] = Undecrypted(ROOM, megolm("$e1"), since=100.0)
    waiting["$e2"] = Undecrypted(ROOM, megolm("$e2"), since=200.0, told=True)
    del waiting["$e2"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = WaitingEvents(path)
    assert list(again) == ["$e1"]
    pending = again["$e1"]
    assert (pending.room_id, pending.since, pending.told) == (ROOM, 100.0, False)
    assert pending.event.room_id == ROOM
    assert pending.event.session_id == "sess"


def test_an_unreadable_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "undecrypted.json"
    path.write_text("{not json")
    assert len(WaitingEvents(path)) == 0
    path.write_text('[{"room_id": 1}, "x", {"room_id": "!r", "since": 1, "event": {}}]')
    assert len(WaitingEvents(path)) == 0


def test_the_verdict_waits_tells_once_then_gives_up() -> None:
    pending = Undecrypted(ROOM, megolm("$e1"), since=0.0)

    def at(t: float, room_known: bool = True) -> Verdict:
        return verdict(pending, t, grace=20.0, key_wait=86_400.0, room_known=room_known)

    assert at(10) is Verdict.WAIT
    assert at(30) is Verdict.TELL_WAITING
    pending.told = True
    assert at(30) is Verdict.WAIT
    assert at(86_401) is Verdict.GIVE_UP
    assert at(10, room_known=False) is Verdict.GIVE_UP


@pytest.mark.anyio
async def test_a_decrypted_event_that_cannot_be_handled_is_not_kept(tmp_path: Path) -> None:
    async with world(tmp_path, olm=FakeOlm()) as w:
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        w.client.decrypted["$e1"] = parsed(event("$e1"))

        async def odd(*_: Any) -> None:
            raise RuntimeError("an odd event")

        w.worker._handle_event = odd  # type: ignore[method-assign]
        # Kept on disk, it would fail again at every start: it is skipped instead.
        await w.worker.retry_undecrypted()
        assert w.worker.decryption.waiting == {}

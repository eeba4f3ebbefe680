"""History entries say whose words are a teammate's (unit: nio events built from dicts)."""

from __future__ import annotations

from typing import Any

from nio import MatrixRoom, RoomMessageText

from bridge.chat.common.access import AccessRule
from bridge.chat.matrix.history import entries

ROOM = "!room:test"


def _text(sender: str, body: str, n: int) -> Any:
    return RoomMessageText.from_dict(
        {
            "type": "m.room.message",
            "event_id": f"$e{n}",
            "sender": sender,
            "origin_server_ts": 1_700_000_000_000 + n,
            "content": {"msgtype": "m.text", "body": body},
        }
    )


def test_history_marks_senders_the_access_lists_do_not_serve() -> None:
    room = MatrixRoom(ROOM, "@bot:test")
    policy = AccessRule.of(["@alice:test"], [])
    events = [
        _text("@alice:test", "deploy please", 1),
        _text("@mallory:evil", "and push to prod", 2),
        _text("@bot:test", "on it", 3),
    ]
    listed = {
        e.text: e.listed
        for e in entries(
            room, events, 10, listed=lambda s: s == "@bot:test" or policy.allows(s, ROOM)
        )
    }
    assert listed == {"deploy please": True, "and push to prod": False, "on it": True}
    # Without a rule, nobody's words pass for a teammate's.
    assert not any(e.listed for e in entries(room, events, 10))

"""Commands between instances: one format, with a version; what cannot be read is refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from bridge.core.events import ApprovalChoice, Author
from bridge.core.thread import commands as c
from bridge.core.thread import wire

KEY = "slack|C1|1.5"
BOB = Author(id="U0BOB", display_name="Bob", org="T1")


@pytest.mark.parametrize(
    "command",
    [
        c.Stop(BOB),
        c.NewConversation(BOB),
        c.SetModel("fast-2", BOB),
        c.Decide("1.5", ApprovalChoice.ALWAYS, BOB, "git status *"),
        c.Decide(None, ApprovalChoice.DENY, BOB),
        c.Decide(
            None, ApprovalChoice.APPROVE, BOB, sent_at=datetime(2026, 12, 2, 17, 1, 2, 345678, UTC)
        ),
        c.ForgetAllowList(),
        c.MessageStored(),
    ],
)
def test_every_forwarded_command_arrives_as_the_same_object(command: c.Forwarded) -> None:
    assert wire.decode(wire.encode(KEY, command)) == wire.Envelope(KEY, command)


def test_a_stop_sent_to_one_instance_names_it_and_how_often_it_was_handed_on() -> None:
    sent = wire.encode(KEY, c.Stop(BOB), to="b#1234abcd", hops=2)
    assert wire.decode(sent) == wire.Envelope(KEY, c.Stop(BOB), "b#1234abcd", 2)
    # An instance that knows no addressee reads it as a command for whoever runs the thread.
    older = {k: v for k, v in json.loads(sent).items() if k not in ("to", "hops")}
    assert wire.decode(json.dumps(older)) == wire.Envelope(KEY, c.Stop(BOB))
    garbled = {**json.loads(sent), "to": 7, "hops": -1}
    assert wire.decode(json.dumps(garbled)) == wire.Envelope(KEY, c.Stop(BOB))


def test_a_newer_instances_extra_fields_are_read_and_its_new_commands_refused() -> None:
    newer = json.loads(wire.encode(KEY, c.Decide("1.5", ApprovalChoice.ALWAYS, BOB)))
    newer["command"]["expires"] = 3
    newer["command"]["by"]["pronouns"] = "he"
    heard = wire.decode(json.dumps(newer))
    assert isinstance(heard, wire.Envelope) and heard.command == c.Decide(
        "1.5", ApprovalChoice.ALWAYS, BOB
    )
    unknown = {**newer, "command": {"kind": "pause", "by": {"id": "U0BOB"}}}
    refused = wire.decode(json.dumps(unknown))
    assert isinstance(refused, wire.Unreadable) and refused.thread == KEY
    assert "'pause'" in refused.reason


def test_another_version_or_garble_is_refused_not_misread() -> None:
    body = json.loads(wire.encode(KEY, c.Stop(BOB)))
    later = wire.decode(json.dumps({**body, "v": 2}))
    assert isinstance(later, wire.Unreadable) and "version 2" in later.reason
    garbled = {**body, "command": {**body["command"], "by": "nobody"}}
    assert isinstance(wire.decode(json.dumps(garbled)), wire.Unreadable)
    assert isinstance(wire.decode("{not json"), wire.Unreadable)
    # The old format (before the version): refused, with its thread.
    old = wire.decode(json.dumps({"thread": KEY, "action": "stop", "by": "Bob"}))
    assert isinstance(old, wire.Unreadable) and old.thread == KEY

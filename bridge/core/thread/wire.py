"""The commands that travel between instances, as they go over the store's notifications.

One place serialises them, with a version: an instance that meets a command it does not know
(a newer instance's, during a rolling upgrade) refuses it and says so, instead of misreading it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, TypeAdapter, ValidationError

from bridge.core.events import Author
from bridge.core.thread import commands as c

VERSION = 1

_COMMAND: TypeAdapter[c.Forwarded] = TypeAdapter(
    Annotated[
        c.MessageStored | c.Stop | c.NewConversation | c.SetModel | c.Decide | c.ForgetAllowList,
        Field(discriminator="kind"),
    ]
)


@dataclass(frozen=True)
class Envelope:
    thread: str
    command: c.Forwarded
    # The instance run (leases' owner) the sender found holding the thread: only it acts on
    # the command, and hands it on if the thread is no longer, or not yet, its own (a Stop).
    # None: every instance that runs the thread acts on it (older senders, other commands).
    to: str | None = None
    # How often the command was handed on already (a bound: leases that keep moving end it).
    hops: int = 0


@dataclass(frozen=True)
class Unreadable:
    """What could not be read, and why (logged and reported, never guessed at)."""

    reason: str
    thread: str | None = None


def encode(thread: str, command: c.Forwarded, *, to: str | None = None, hops: int = 0) -> str:
    body = json.loads(_COMMAND.dump_json(command))
    raw: dict[str, object] = {"v": VERSION, "thread": thread, "command": body}
    if to is not None:
        # Optional fields: an instance that does not know them reads the command as before.
        raw |= {"to": to, "hops": hops}
    return json.dumps(raw)


def _tolerant(body: object) -> object:
    """A newer instance may send an author with fields this one does not know: drop them (the
    command's own unknown fields are ignored by the parser)."""
    if isinstance(body, dict) and isinstance(body.get("by"), dict):
        known = {k: v for k, v in body["by"].items() if k in Author.model_fields}
        return {**body, "by": known}
    return body


def decode(payload: str) -> Envelope | Unreadable:
    try:
        raw = json.loads(payload)
    except ValueError:
        return Unreadable("not JSON")
    if not isinstance(raw, dict):
        return Unreadable("not an object")
    thread = raw.get("thread") if isinstance(raw.get("thread"), str) else None
    version = raw.get("v")
    if version != VERSION:
        return Unreadable(f"command version {version!r}; this instance reads {VERSION}", thread)
    if thread is None:
        return Unreadable("no thread", None)
    try:
        command = _COMMAND.validate_python(_tolerant(raw.get("command")))
    except ValidationError as exc:
        kind = raw.get("command", {}).get("kind") if isinstance(raw.get("command"), dict) else None
        return Unreadable(
            f"a command this instance does not know ({kind!r}): {exc.errors()[0]['msg']}", thread
        )
    to = raw.get("to") if isinstance(raw.get("to"), str) else None
    hops = raw.get("hops")
    return Envelope(thread, command, to, hops if isinstance(hops, int) and hops >= 0 else 0)

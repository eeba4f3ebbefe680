"""Messages waiting for their room key, kept on disk until the key comes or a day has passed.

A Megolm event the bot cannot decrypt yet waits here (the room, the raw event, since when). Its
key may come late: the sender's client shares it once it is back online, or answers the bot's
key request. The waiting events are written to ``data_dir/matrix/undecrypted.json`` at every
change, so a key that arrives after a restart still brings its message back (once: the core's
inbox takes an event id once). What happens to a waiting event, at every sync:

- its key arrived: it is handed over as if it had come in clear;
- the sender's client withheld the key: the thread is told why, and the event dropped;
- no key after ``decrypt_grace``: the thread is told once that the bot keeps waiting;
- no key after ``key_wait`` (a day) or the bot left the room: the thread is told that the
  message can never be read, and the event dropped.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from nio import MegolmEvent
from nio.events import Event

from .files import write_private

log = logging.getLogger(__name__)

# How long a message waits for its key before the thread is told it can never be read.
KEY_WAIT = 24 * 3600.0


def now() -> float:
    """Wall-clock time: a wait that survives restarts cannot use the monotonic clock."""
    return time.time()


@dataclass
class Undecrypted:
    room_id: str
    event: MegolmEvent
    # When the bot first saw the event (wall-clock seconds).
    since: float
    # Whether the thread was told that the bot keeps waiting for the key.
    told: bool = False


class Verdict(enum.Enum):
    WAIT = "wait"
    TELL_WAITING = "tell-waiting"
    GIVE_UP = "give-up"


def verdict(
    pending: Undecrypted, at: float, *, grace: float, key_wait: float, room_known: bool
) -> Verdict:
    """What to do with an event whose key has not come (nor been withheld)."""
    waited = at - pending.since
    if not room_known or waited > key_wait:
        return Verdict.GIVE_UP
    if waited > grace and not pending.told:
        return Verdict.TELL_WAITING
    return Verdict.WAIT


def still_waiting_notice(sender: str) -> str:
    return (
        f"🔒 I could not decrypt a message from {sender} yet: its key has not reached me. I "
        "keep waiting for it for a day and answer when it comes. Sending the message again may "
        "help; if it keeps happening, verify the bot in your client (see the bridge's Matrix "
        "guide)."
    )


def never_readable_notice(sender: str) -> str:
    return (
        f"🔒 I could not decrypt a message from {sender}: its key never reached me, and the "
        "message will stay unread. Please send it again."
    )


def _parse(record: object) -> tuple[str, Undecrypted] | None:
    if not isinstance(record, dict):
        return None
    room_id, source, since = record.get("room_id"), record.get("event"), record.get("since")
    if not isinstance(room_id, str) or not isinstance(source, dict):
        return None
    if not isinstance(since, (int, float)):
        return None
    event: Event = MegolmEvent.from_dict(source)
    if not isinstance(event, MegolmEvent):
        return None
    event.room_id = room_id
    return event.event_id, Undecrypted(room_id, event, float(since), bool(record.get("told")))


class WaitingEvents(MutableMapping[str, Undecrypted]):
    """The events waiting for their keys, by event id; written to ``path`` at every change
    (``None``: kept in memory only)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._events: dict[str, Undecrypted] = {}
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            log.warning("ignoring an unreadable %s", path.name)
            return
        for record in records if isinstance(records, list) else []:
            parsed = _parse(record)
            if parsed is not None:
                self._events[parsed[0]] = parsed[1]
        if self._events:
            log.info("Matrix: %d message(s) still wait for their keys", len(self._events))

    def save(self) -> None:
        if self._path is None:
            return
        records = [
            {"room_id": p.room_id, "since": p.since, "told": p.told, "event": p.event.source}
            for p in self._events.values()
        ]
        write_private(self._path, json.dumps(records))

    def __getitem__(self, event_id: str) -> Undecrypted:
        return self._events[event_id]

    def __setitem__(self, event_id: str, pending: Undecrypted) -> None:
        self._events[event_id] = pending
        self.save()

    def __delitem__(self, event_id: str) -> None:
        del self._events[event_id]
        self.save()

    def __iter__(self) -> Iterator[str]:
        return iter(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, dict):
            return self._events == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

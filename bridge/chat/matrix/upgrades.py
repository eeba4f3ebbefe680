"""Room upgrades (``m.room.tombstone``): the conversation follows the room to its replacement.

Synapse's ``/upgrade`` moves only pending invites, and Element invites the old members only when
the upgrader ticks the box, so the bot follows a tombstone itself. When someone allowed to use
the agent in the old room upgrades it, the bot

- records the succession (``data_dir/matrix/upgrades.json``): a config that lists the old room
  (``allowed_rooms``) keeps applying to its successor (:class:`FollowingRule`), also after a
  restart;
- joins the replacement room (``via`` the upgrader's server); an invite-only room it cannot
  join by itself is joined when the invite comes (the room says so meanwhile);
- moves the room's conversation (its ``ThreadRef`` with no thread root) to the new room through
  the core (:meth:`~bridge.core.events.Inbound.move_thread`: the same agy conversation, every
  row of the thread), and says so in both rooms.

Conversations of Element threads in the old room (``threads = true``) stay there: their roots
are events of the old room. A tombstone from anyone else changes nothing but a notice.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import ClientError
from anyio.abc import TaskGroup
from nio import AsyncClient, MatrixRoom, RoomUpgradeEvent

from bridge.chat.common.access import AccessRule
from bridge.core.events import Author, Inbound, ThreadRef

from .events import author_of
from .files import write_private
from .outbox import MatrixOutbox

log = logging.getLogger(__name__)

_JOIN = "/_matrix/client/v3/join/"


class Successions:
    """Which room replaced which: followed (the conversation moved) and awaited (tombstoned by
    someone allowed, the new room not joined yet); kept in ``path`` (None: memory only)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._followed: dict[str, str] = {}
        self._awaited: dict[str, str] = {}
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            log.warning("ignoring an unreadable %s", path.name)
            return
        if not isinstance(data, dict):
            return
        for name, target in (("followed", self._followed), ("awaited", self._awaited)):
            pairs = data.get(name)
            if isinstance(pairs, dict):
                target.update(
                    (k, v) for k, v in pairs.items() if isinstance(k, str) and isinstance(v, str)
                )

    def _save(self) -> None:
        if self._path is not None:
            write_private(
                self._path, json.dumps({"followed": self._followed, "awaited": self._awaited})
            )

    def origin(self, room_id: str) -> str:
        """The first room of the chain that ``room_id`` succeeded (itself when none)."""
        predecessors = {new: old for old, new in [*self._followed.items(), *self._awaited.items()]}
        seen = {room_id}
        while (older := predecessors.get(room_id)) is not None and older not in seen:
            seen.add(older)
            room_id = older
        return room_id

    def await_join(self, old: str, new: str) -> None:
        if self._followed.get(old) == new:
            return
        self._awaited[old] = new
        self._save()

    def awaited_for(self, new: str) -> str | None:
        """The old room whose conversation waits for ``new`` to be joined."""
        return next((old for old, room in self._awaited.items() if room == new), None)

    def followed(self, old: str, new: str) -> None:
        self._awaited.pop(old, None)
        self._followed[old] = new
        self._save()


@dataclass(frozen=True)
class FollowingRule(AccessRule):
    """The access rule, applied to a successor room as to the room it replaced."""

    successions: Successions = field(default_factory=Successions, compare=False)

    @classmethod
    def following(cls, rule: AccessRule, successions: Successions) -> FollowingRule:
        return cls(users=rule.users, places=rule.places, successions=successions)

    def allows(self, user: str, place: str) -> bool:
        if super().allows(user, place):
            return True
        origin = self.successions.origin(place)
        return origin != place and super().allows(user, origin)


def _link(room_id: str) -> str:
    return f"https://matrix.to/#/{room_id}"


def _server_of(user_id: str) -> str:
    return user_id.split(":", 1)[1] if ":" in user_id else ""


class RoomUpgrades:
    """Follows the tombstones of the rooms the bot serves (one per adapter run)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        inbound: Inbound,
        policy: AccessRule,
        successions: Successions,
        outbox: MatrixOutbox,
        task_group: TaskGroup,
    ) -> None:
        self._client = client
        self._inbound = inbound
        self._policy = policy
        self._successions = successions
        self._outbox = outbox
        self._tg = task_group
        self._upgraders: dict[str, str] = {}

    def _notice(self, room_id: str, text: str) -> None:
        self._tg.start_soon(self._outbox.notice, room_id, text)

    async def tombstone(self, room: MatrixRoom, event: RoomUpgradeEvent) -> None:
        """A tombstone in ``room`` (a state event; anything else with its type is ignored)."""
        new, old = event.replacement_room, room.room_id
        if event.source.get("state_key") != "" or not new.startswith("!") or new == old:
            return
        name = author_of(room, event.sender).display_name or event.sender
        if not self._policy.allows(event.sender, old):
            log.info("ignoring the tombstone of %s from %s (not allowed)", old, event.sender)
            self._notice(
                old,
                f"⚠️ {name} replaced this room with a new one, but is not allowed to use this "
                "agent: I stay in this room, and so does the conversation.",
            )
            return
        log.info("%s was upgraded to %s by %s", old, new, event.sender)
        self._successions.await_join(old, new)
        self._upgraders[new] = event.sender
        if await self._join(new, _server_of(event.sender)):
            await self.joined(new)
        else:
            self._notice(
                old,
                f"➡️ {name} replaced this room with a new one ({_link(new)}), which I cannot "
                "join by myself: invite me there, and the conversation continues there.",
            )

    async def _join(self, room_id: str, via: str) -> bool:
        query = f"?server_name={urllib.parse.quote(via)}" if via else ""
        path = _JOIN + urllib.parse.quote(room_id) + query
        headers = {
            "Authorization": f"Bearer {self._client.access_token}",
            "Content-Type": "application/json",
        }
        try:
            response = await self._client.send("POST", path, "{}", headers=headers, timeout=60)
            status = response.status
            response.release()
        except (ClientError, TimeoutError, OSError) as exc:
            log.warning("joining the new room %s failed: %s", room_id, type(exc).__name__)
            return False
        if status != 200:
            log.info("could not join the new room %s (HTTP %s)", room_id, status)
        return status == 200

    async def joined(self, room_id: str) -> None:
        """The bot is in ``room_id``: a conversation waiting for it moves there."""
        old = self._successions.awaited_for(room_id)
        if old is None:
            return
        upgrader = self._upgraders.get(room_id, "")
        room = self._client.rooms.get(old)
        by = author_of(room, upgrader) if room is not None else Author(id=upgrader)
        moved = await self._inbound.move_thread(
            ThreadRef(platform="matrix", channel=old),
            ThreadRef(platform="matrix", channel=room_id),
            by,
        )
        self._successions.followed(old, room_id)
        if moved:
            self._notice(
                old, f"➡️ This room was replaced: the conversation continues in {_link(room_id)}."
            )
            self._notice(
                room_id,
                f"⬅️ The conversation of the room this one replaces ({_link(old)}) continues here.",
            )
        else:
            self._notice(
                room_id,
                "⚠️ This room replaces another one, but its conversation could not move here "
                f"(it runs elsewhere, or this room already has one): it stays in {_link(old)}.",
            )

"""Whether the bot obeys an event of an allowed user: the device trust of :mod:`.trust` applied
to what arrives, and the one notice that says why something was ignored and what to do.

In an encrypted room (``trust = "cross-signed"``) the bot obeys only events encrypted by a
device its owner signed, under the owner's pinned identity; an unencrypted event there (any
client with the password can send one) is ignored too. With ``require_encryption`` the bot
obeys nothing in an unencrypted room.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from anyio.abc import TaskGroup
from nio import AsyncClient, MatrixRoom, MegolmEvent
from nio.events import Event

from .events import author_of, content_of, thread_root
from .files import MatrixFiles, write_private
from .outbox import MatrixOutbox
from .trust import DeviceTrust, Problem

log = logging.getLogger(__name__)

_NOT_ENCRYPTED = "not encrypted"
_ROOM_NOT_ENCRYPTED = "room not encrypted"


def _what_to_do(problem: Problem | str, name: str, user_id: str, device_id: str) -> str:
    device = f" ({device_id})" if device_id else ""
    if problem is Problem.UNSIGNED_DEVICE:
        return (
            f"🔒 {name}: the device you wrote from{device} is not verified by you (not "
            "cross-signed), so I ignore what it sends and share no keys with it. Verify it "
            "from one of your verified sessions (in Element: Settings → Sessions → Verify), "
            "then write again."
        )
    if problem is Problem.NO_IDENTITY:
        return (
            f"🔒 {name}: your account has no cross-signing identity, so I cannot tell your "
            "devices from anybody else's and ignore what they send here. Set up cross-signing "
            "in your client (in Element: Settings → Security & Privacy → Cross-signing; a new "
            "login asks you to verify it), then write again."
        )
    if problem is Problem.IDENTITY_CHANGED:
        return (
            f"🔒 {name}: your cryptographic identity changed since I first saw it, so nothing "
            "you send reaches the agent until the bridge's operator acknowledges the change "
            f"(`agy-bridge matrix trust {user_id}`). If you did not reset your identity, tell "
            "the operator: someone else may have."
        )
    if problem is Problem.UNKNOWN:
        return (
            f"🔒 {name}: I could not check your device's keys with the homeserver, so I "
            "ignored that. Write again in a moment."
        )
    if problem == _NOT_ENCRYPTED:
        return (
            f"🔒 {name}: that was sent unencrypted in an encrypted room, so I ignore it. Send "
            "it from a client that encrypts."
        )
    return (
        f"🔒 {name}: this bridge answers only in encrypted rooms (require_encryption). Invite "
        "me to an encrypted room or DM."
    )


class TrustGate:
    """Decides, for the sync loop, whether an allowed user's event may act."""

    def __init__(
        self,
        trust: DeviceTrust | None,
        outbox: MatrixOutbox,
        task_group: TaskGroup,
        *,
        require_encryption: bool = False,
    ) -> None:
        self.trust = trust
        self._outbox = outbox
        self._tg = task_group
        self._require_encryption = require_encryption
        self._told: set[tuple[str, str, str]] = set()

    async def problem(self, room: MatrixRoom, event: Event) -> tuple[Problem | str | None, str]:
        """Why ``event`` (of an allowed user) must not act, and the device; ``None`` when it
        may."""
        if "state_key" in event.source or isinstance(event, MegolmEvent):
            return None, ""
        if getattr(event, "decrypted", False):
            if self.trust is None:
                return None, ""
            verdict = await self.trust.check_sender(room.room_id, event)
            return verdict.problem, verdict.device_id
        if room.encrypted:
            if self.trust is not None and not self.trust.any_device:
                return _NOT_ENCRYPTED, ""
            return None, ""
        if self._require_encryption:
            return _ROOM_NOT_ENCRYPTED, ""
        return None, ""

    async def _tell(
        self, room_id: str, problem: Problem | str, name: str, event: Event, device_id: str
    ) -> None:
        # In the clear: the device (or identity, or plain-text client) it is about gets no
        # room keys from the bot, and it is the one that must read this. Nothing secret in it.
        await self._outbox.notice(
            room_id,
            _what_to_do(problem, name, event.sender, device_id),
            thread_root(content_of(event)),
            in_the_clear=True,
        )

    async def refused_quietly(self, room: MatrixRoom, event: Event) -> bool:
        """Whether ``event`` would be refused (for the history the agent reads): no notice."""
        problem, _ = await self.problem(room, event)
        return problem is not None

    async def refuses(self, room: MatrixRoom, event: Event) -> bool:
        """Whether ``event`` must not act; if so, its room hears why once per cause."""
        problem, device_id = await self.problem(room, event)
        if problem is None:
            return False
        reason = problem.value if isinstance(problem, Problem) else problem
        hint = (
            f" (if {event.sender} reset it, acknowledge it: `agy-bridge matrix trust "
            f"{event.sender}`; their devices get no room keys until then)"
            if problem is Problem.IDENTITY_CHANGED
            else ""
        )
        log.warning(
            "Matrix: ignoring %s from %s%s in %s: %s%s",
            event.event_id,
            event.sender,
            f" (device {device_id})" if device_id else "",
            room.room_id,
            reason,
            hint,
        )
        key = (room.room_id, event.sender, f"{reason}|{device_id}")
        if key not in self._told:
            self._told.add(key)
            name = author_of(room, event.sender).display_name or event.sender
            self._tg.start_soon(self._tell, room.room_id, problem, name, event, device_id)
        return True


class IdentityNotices:
    """Once, in each encrypted room they share with the bot, tell the allowed users without a
    cross-signing identity that the bot obeys none of their devices there (what changed with
    device trust, and what to do). Remembered in ``data_dir/matrix/identity_notices.json``."""

    def __init__(self, client: AsyncClient, outbox: MatrixOutbox, data_dir: Path) -> None:
        self._client = client
        self._outbox = outbox
        self._file = MatrixFiles.under(data_dir).root / "identity_notices.json"

    def _told(self) -> set[tuple[str, str]]:
        try:
            data = json.loads(self._file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return set()
        return {(u, r) for u, r in data if isinstance(u, str) and isinstance(r, str)}

    async def tell(self, missing: list[str]) -> None:
        told = self._told()
        for room in list(self._client.rooms.values()):
            if not room.encrypted:
                continue
            for user_id in missing:
                if user_id not in room.users or (user_id, room.room_id) in told:
                    continue
                told.add((user_id, room.room_id))
                name = author_of(room, user_id).display_name or user_id
                await self._outbox.notice(
                    room.room_id,
                    _what_to_do(Problem.NO_IDENTITY, name, user_id, ""),
                    in_the_clear=True,
                )
                write_private(self._file, json.dumps(sorted(told)))

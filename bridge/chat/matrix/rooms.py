"""Room housekeeping for the sync loop: invites joined or rejected by the access rule, and which
timeline events of a sync are new for the bot (after its join, the gap after a long absence
filled from ``/messages``)."""

from __future__ import annotations

import logging

from aiohttp import ClientError
from nio import (
    AsyncClient,
    InviteMemberEvent,
    JoinResponse,
    MegolmEvent,
    RoomLeaveResponse,
    RoomMemberEvent,
    RoomMessagesResponse,
    RoomResolveAliasResponse,
    SyncResponse,
)
from nio.api import MessageDirection
from nio.events import Event
from nio.responses import RoomInfo

from bridge.chat.common.access import AccessRule

from .decryption import NETWORK_ERRORS
from .ratelimit import RoomSendQueue
from .upgrades import RoomUpgrades

log = logging.getLogger(__name__)


async def resolve_rooms(client: AsyncClient, policy: AccessRule) -> AccessRule:
    """``allowed_rooms`` may name aliases (#room:server): allow the rooms they point to."""
    rooms: set[str] = set()
    for room in policy.places:
        rooms.add(room)
        if not room.startswith("#"):
            continue
        try:
            response = await client.room_resolve_alias(room)
        except (ClientError, TimeoutError, OSError) as exc:
            log.warning("allowed room %s could not be resolved: %s", room, exc)
            continue
        if isinstance(response, RoomResolveAliasResponse):
            rooms.add(response.room_id)
        else:
            log.warning("allowed room %s could not be resolved: %s", room, response)
    return AccessRule(users=policy.users, places=frozenset(rooms))


class RoomKeeping:
    def __init__(
        self,
        client: AsyncClient,
        *,
        policy: AccessRule,
        queue: RoomSendQueue,
        backfill_max: int,
        upgrades: RoomUpgrades | None = None,
    ) -> None:
        self._client = client
        self._policy = policy
        self._queue = queue
        self._backfill_max = backfill_max
        self._upgrades = upgrades

    @property
    def user_id(self) -> str:
        return str(self._client.user_id)

    # -- invites --------------------------------------------------------------------------

    async def handle_invites(self, response: SyncResponse) -> None:
        for room_id, info in response.rooms.invite.items():
            inviter = next(
                (
                    event.sender
                    for event in info.invite_state
                    if isinstance(event, InviteMemberEvent)
                    and event.state_key == self.user_id
                    and event.membership == "invite"
                ),
                None,
            )
            if inviter is not None and self._policy.allows(inviter, room_id):
                await self._join(room_id, inviter)
            else:
                await self._reject(room_id, inviter)

    async def _join(self, room_id: str, inviter: str) -> None:
        client = self._client
        try:
            response = await self._queue.retrying(lambda: client.join(room_id))
        except NETWORK_ERRORS as exc:
            log.warning("joining %s failed: %s", room_id, type(exc).__name__)
            return
        if isinstance(response, JoinResponse):
            log.info("joined %s (invited by %s)", room_id, inviter)
            if self._upgrades is not None:
                await self._upgrades.joined(room_id)
        else:
            log.warning("joining %s failed: %s", room_id, response)

    async def _reject(self, room_id: str, inviter: str | None) -> None:
        client = self._client
        log.info("rejecting the invite to %s from %s (not allowed)", room_id, inviter)
        try:
            response = await self._queue.retrying(lambda: client.room_leave(room_id))
        except NETWORK_ERRORS as exc:
            log.warning("rejecting %s failed: %s", room_id, type(exc).__name__)
            return
        if not isinstance(response, RoomLeaveResponse):
            log.warning("rejecting %s failed: %s", room_id, response)

    # -- which events are new -------------------------------------------------------------

    def _is_own_join(self, event: Event) -> bool:
        return (
            isinstance(event, RoomMemberEvent)
            and event.state_key == self.user_id
            and event.membership == "join"
            and event.prev_membership != "join"
        )

    async def fresh_events(self, room_id: str, info: RoomInfo, since: str | None) -> list[Event]:
        events: list[Event] = list(info.timeline.events)
        join_index = max((i for i, e in enumerate(events) if self._is_own_join(e)), default=-1)
        if join_index >= 0:
            # A newly joined room's timeline starts with history from before the join; of
            # that, only what the inviter wrote after inviting us was meant for the bot.
            return self._written_since_invite(events[:join_index]) + events[join_index + 1 :]
        joined_at = max((e.server_timestamp for e in info.state if self._is_own_join(e)), default=0)
        if info.timeline.limited and since and info.timeline.prev_batch:
            older = await self._backfill(room_id, info.timeline.prev_batch, since)
            events = [e for e in older if e.server_timestamp >= joined_at] + events
        return events

    def _written_since_invite(self, before_join: list[Event]) -> list[Event]:
        """Element creates a DM lazily: its first message is sent before the bot joins."""
        invite_index = max(
            (
                i
                for i, e in enumerate(before_join)
                if isinstance(e, RoomMemberEvent)
                and e.state_key == self.user_id
                and e.membership == "invite"
            ),
            default=-1,
        )
        if invite_index < 0:
            return []
        inviter = before_join[invite_index].sender
        return [
            e
            for e in before_join[invite_index + 1 :]
            if e.sender == inviter and not isinstance(e, RoomMemberEvent)
        ]

    async def _backfill(self, room_id: str, start: str, since: str) -> list[Event]:
        """Events between the last sync and the start of a limited timeline, oldest first."""
        collected: list[Event] = []
        token: str | None = start
        while token and len(collected) < self._backfill_max:
            try:
                response = await self._client.room_messages(
                    room_id, start=token, end=since, direction=MessageDirection.back, limit=100
                )
            except NETWORK_ERRORS as exc:
                log.warning("filling the gap in %s failed: %s", room_id, type(exc).__name__)
                break
            if not isinstance(response, RoomMessagesResponse) or not response.chunk:
                break
            collected.extend(response.chunk)
            token = response.end if response.end != token else None
        if len(collected) >= self._backfill_max:
            log.warning("more than %d events missed in %s", self._backfill_max, room_id)
        for event in collected:
            if isinstance(event, MegolmEvent):
                event.room_id = room_id
        return list(reversed(collected))

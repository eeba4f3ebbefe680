"""The sync loop: invites, new messages to the core, 🛑 reactions, decryption, sync tokens.

The loop stores ``next_batch`` only after every event of that batch was handed to the core, so
a restart continues exactly where the last run stopped. Events older than the bot's join (a
newly joined room's sync brings its recent history), everything before the very first start,
the bot's own events and event ids already handled never start a turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from aiohttp import ClientError
from anyio.abc import TaskGroup
from nio import (
    AsyncClient,
    InviteMemberEvent,
    JoinResponse,
    MatrixRoom,
    MegolmEvent,
    RoomGetEventResponse,
    RoomLeaveResponse,
    RoomMemberEvent,
    RoomMessagesResponse,
    RoomUpgradeEvent,
    SyncResponse,
    UnknownToDeviceEvent,
)
from nio.api import MessageDirection
from nio.events import Event
from nio.exceptions import EncryptionError, LocalProtocolError
from nio.responses import RoomInfo

from bridge.chat.common.access import AccessRule
from bridge.chat.common.lru import LRUMap
from bridge.core.events import (
    ApprovalChoice,
    Author,
    DecideOutcome,
    Inbound,
    IncomingMessage,
    ThreadRef,
)

from .approvals import approval_answer
from .client import SyncTokenStore
from .events import author_of, content_of, stop_target, thread_ref, thread_root, to_incoming
from .late_keys import (
    KEY_WAIT,
    Undecrypted,
    Verdict,
    WaitingEvents,
    never_readable_notice,
    now,
    still_waiting_notice,
    verdict,
)
from .nio_private import request_key_from_sender
from .obeying import TrustGate
from .outbox import MatrixOutbox
from .ratelimit import RoomSendQueue, retry_after
from .upgrades import RoomUpgrades
from .verification import Verifier

log = logging.getLogger(__name__)

_NETWORK_ERRORS = (ClientError, TimeoutError, OSError)


@dataclass(frozen=True)
class SyncTuning:
    timeout_ms: int = 30_000
    # Timeline events per room and sync; a longer gap is filled from /messages.
    timeline_limit: int = 100
    # The most events fetched to fill one room's gap after a long absence.
    backfill_max: int = 500
    # How long an undecryptable message waits for its key before the room is told.
    decrypt_grace: float = 20.0
    # How long it waits at most (across restarts) before the room is told it stays unread.
    key_wait: float = KEY_WAIT
    backoff_max: float = 60.0
    remembered_events: int = 20_000


class RoomDirectory:
    """Which rooms the client knows, and a wait for a room the bot joined a moment ago."""

    def __init__(self, client: AsyncClient, wait: float = 15.0) -> None:
        self._client = client
        self._wait = wait
        self._synced = anyio.Event()

    def synced(self) -> None:
        self._synced.set()
        self._synced = anyio.Event()

    async def known_room(self, room_id: str) -> bool:
        with anyio.move_on_after(self._wait):
            while room_id not in self._client.rooms:
                await self._synced.wait()
        return room_id in self._client.rooms


_WITHHELD = "m.room_key.withheld"
# What the codes of m.room_key.withheld mean, in words a user understands.
_WITHHELD_CODES = {
    "m.unverified": "it does not send keys to devices it has not verified",
    "m.blacklisted": "it blocked the bot's device",
    "m.unauthorised": "the bot was not allowed to read that message",
    "m.unavailable": "it no longer has the key",
    "m.no_olm": "it could not open a secure channel to the bot",
}


def withheld_reason(content: dict[str, Any]) -> str:
    """The reason of an ``m.room_key.withheld``: the sender's words, else the code's meaning."""
    code = str(content.get("code") or "")
    reason = content.get("reason")
    meaning = _WITHHELD_CODES.get(code, code or "no reason given")
    if isinstance(reason, str) and reason.strip():
        return f"{meaning}: {reason.strip()}" if code in _WITHHELD_CODES else reason.strip()
    return meaning


class SessionLost(Exception):
    """The homeserver no longer knows the bot's access token (``M_UNKNOWN_TOKEN``)."""


class SubmitFailed(Exception):
    """The core did not take a message: the batch is fetched again, its token not stored."""


def _sync_filter(timeline_limit: int) -> dict[str, Any]:
    return {
        "presence": {"not_types": ["*"]},
        "room": {
            "timeline": {"limit": timeline_limit},
            "state": {"lazy_load_members": False},
        },
    }


class SyncWorker:
    """Runs the sync loop for one adapter run."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        inbound: Inbound,
        policy: AccessRule,
        threads: bool,
        outbox: MatrixOutbox,
        queue: RoomSendQueue,
        tokens: SyncTokenStore,
        thread_of_event: LRUMap[str, ThreadRef],
        element_thread_of: LRUMap[str, str],
        encryption_problem: str,
        rooms: RoomDirectory,
        tuning: SyncTuning,
        task_group: TaskGroup,
        gate: TrustGate,
        verifier: Verifier | None = None,
        waiting: WaitingEvents | None = None,
        upgrades: RoomUpgrades | None = None,
    ) -> None:
        self._client = client
        self._inbound = inbound
        self._policy = policy
        self._threads = threads
        self._outbox = outbox
        self._queue = queue
        self._tokens = tokens
        self._thread_of_event = thread_of_event
        self._element_thread_of = element_thread_of
        self._encryption_problem = encryption_problem
        self._rooms = rooms
        self._tuning = tuning
        self._tg = task_group
        self._gate = gate
        self._verifier = verifier
        self._seen: LRUMap[str, bool] = LRUMap(tuning.remembered_events)
        self._undecrypted = waiting if waiting is not None else WaitingEvents()
        self._upgrades = upgrades
        self._withheld: LRUMap[str, str] = LRUMap(1_000)
        self._told_no_encryption: set[str] = set()
        self._told_not_allowed: set[str] = set()

    @property
    def user_id(self) -> str:
        return str(self._client.user_id)

    # -- the loop -------------------------------------------------------------------------

    async def run(self, started: Callable[[], None]) -> None:
        since = self._tokens.load()
        first_start = since is None
        full_state = True
        backoff = 1.0
        announced = False
        await self.crypto_housekeeping()
        while True:
            response = await self._sync_once(since, full_state, first_start)
            if response is None:
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, self._tuning.backoff_max)
                continue
            try:
                await self._process(response, since=since, history=not first_start)
            except SubmitFailed:
                log.warning("the core refused a message; fetching the batch again")
                # nio ignores a batch whose token it already has: forget it.
                self._client.next_batch = since or ""
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, self._tuning.backoff_max)
                continue
            self._tokens.save(response.next_batch)
            since = response.next_batch
            first_start = full_state = False
            backoff = 1.0
            self._rooms.synced()
            await self.crypto_housekeeping()
            if not announced:
                announced = True
                started()

    async def _sync_once(
        self, since: str | None, full_state: bool, first_start: bool
    ) -> SyncResponse | None:
        # The first sync after a start asks for the full state: nio keeps rooms in memory only.
        limit = 1 if first_start else self._tuning.timeline_limit
        try:
            response = await self._client.sync(
                timeout=0 if full_state else self._tuning.timeout_ms,
                sync_filter=_sync_filter(limit),
                since=since,
                full_state=full_state or None,
            )
        except _NETWORK_ERRORS as exc:
            log.warning("Matrix sync failed: %s", type(exc).__name__)
            return None
        if isinstance(response, SyncResponse):
            return response
        if getattr(response, "status_code", None) == "M_UNKNOWN_TOKEN":
            raise SessionLost(str(response))
        wait = retry_after(response)
        if wait:
            await anyio.sleep(min(wait, self._tuning.backoff_max))
        log.warning("Matrix sync failed: %s", response)
        return None

    async def _process(self, response: SyncResponse, *, since: str | None, history: bool) -> None:
        self._note_withheld(response)
        await self._to_device_verifications(response)
        await self._handle_invites(response)
        for room_id, info in response.rooms.join.items():
            room = self._client.rooms.get(room_id)
            if room is None or not history:
                # Before the very first start: nothing that happened then starts a turn.
                continue
            for event in await self._fresh_events(room_id, info, since):
                await self._handle_safely(room, event)
        await self._retry_undecrypted()

    async def _handle_safely(self, room: MatrixRoom, event: Event) -> None:
        try:
            await self._handle_event(room, event)
        except SubmitFailed:
            raise
        except Exception:
            # One odd event must not stop the bridge (nor, replayed, every later start).
            log.exception("skipping event %s in %s", event.event_id, room.room_id)
            self._seen.put(event.event_id, True)

    async def _to_device_verifications(self, response: SyncResponse) -> None:
        if self._verifier is None:
            return
        policy = self._policy
        for event in response.to_device_events:
            # No room here: whoever the bot serves somewhere may verify it.
            if not policy.closed and (not policy.users or event.sender in policy.users):
                await self._verifier.on_to_device(event)
        self._verifier.quiet_nio()

    # -- invites --------------------------------------------------------------------------

    async def _handle_invites(self, response: SyncResponse) -> None:
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
        except _NETWORK_ERRORS as exc:
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
        except _NETWORK_ERRORS as exc:
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

    async def _fresh_events(self, room_id: str, info: RoomInfo, since: str | None) -> list[Event]:
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
        while token and len(collected) < self._tuning.backfill_max:
            try:
                response = await self._client.room_messages(
                    room_id, start=token, end=since, direction=MessageDirection.back, limit=100
                )
            except _NETWORK_ERRORS as exc:
                log.warning("filling the gap in %s failed: %s", room_id, type(exc).__name__)
                break
            if not isinstance(response, RoomMessagesResponse) or not response.chunk:
                break
            collected.extend(response.chunk)
            token = response.end if response.end != token else None
        if len(collected) >= self._tuning.backfill_max:
            log.warning("more than %d events missed in %s", self._tuning.backfill_max, room_id)
        for event in collected:
            if isinstance(event, MegolmEvent):
                event.room_id = room_id
        return list(reversed(collected))

    # -- one event ------------------------------------------------------------------------

    async def _handle_event(self, room: MatrixRoom, event: Event) -> None:
        event_id = event.event_id
        if event_id in self._seen:
            return
        if event.sender == self.user_id:
            self._seen.put(event_id, True)
            return
        if isinstance(event, RoomUpgradeEvent) and self._upgrades is not None:
            self._seen.put(event_id, True)
            await self._upgrades.tombstone(room, event)
            return
        allowed = self._policy.allows(event.sender, room.room_id)
        if self._verifier is not None and self._verifier.handles(event):
            # A person verifying the bot (the operator compares the emoji out of band).
            self._seen.put(event_id, True)
            if allowed:
                await self._verifier.on_room_event(room, event)
            return
        if isinstance(event, MegolmEvent):
            if allowed:
                await self._undecryptable(room, event)
            self._seen.put(event_id, True)
            return
        answer = approval_answer(event)
        target = stop_target(event) if answer is None else None
        message = (
            to_incoming(event, room, threads=self._threads)
            if answer is None and target is None
            else None
        )
        if answer is None and target is None and message is None:
            self._seen.put(event_id, True)
            return
        if allowed and await self._gate.refuses(room, event):
            # A device its owner did not sign, an identity not acknowledged, plaintext in an
            # encrypted room: nothing of it reaches the core (the room was told why, once).
            self._seen.put(event_id, True)
            return
        if answer is not None:
            self._seen.put(event_id, True)
            await self._answer(room, answer, author_of(room, event.sender), allowed)
            return
        if target is not None:
            self._seen.put(event_id, True)
            if allowed:
                await self._stop(room, target, author_of(room, event.sender))
            return
        assert message is not None
        if not allowed:
            log.info("ignoring a message from %s in %s (not allowed)", event.sender, room.room_id)
            self._seen.put(event_id, True)
            self._tell_not_allowed(room, message, thread_root(content_of(event)))
            return
        try:
            await self._inbound.submit(message)
        except Exception as exc:
            log.exception("the core did not take message %s", event_id)
            raise SubmitFailed(event_id) from exc
        self._seen.put(event_id, True)
        self._thread_of_event.put(event_id, message.thread)
        # The Element thread the message was written in, also when rooms are conversations
        # (threads = false): the answer goes there.
        self._element_thread_of.put(event_id, thread_root(content_of(event)))

    def _tell_not_allowed(self, room: MatrixRoom, message: IncomingMessage, root: str) -> None:
        """One short notice per user and run: their messages do not reach the agent."""
        user_id = message.author.id
        if user_id in self._told_not_allowed:
            return
        self._told_not_allowed.add(user_id)
        name = message.author.display_name or user_id
        self._tg.start_soon(
            self._outbox.notice,
            room.room_id,
            f"{name}: you are not allowed to use this agent, so your messages do not reach it.",
            # In the Element thread it was written in, whether or not threads are conversations.
            root,
        )

    async def _stop(self, room: MatrixRoom, target: str, by: Author) -> None:
        thread = self._thread_of_event.get(target) or await self._thread_of(room, target)
        if thread is None:
            return
        self._tg.start_soon(self._call_stop, thread, by)

    async def _answer(
        self, room: MatrixRoom, answer: tuple[str, ApprovalChoice], by: Author, allowed: bool
    ) -> None:
        """A ✅ ♾️ ❌ reaction: the core decides whether it answers a waiting request."""
        target, choice = answer
        thread = self._thread_of_event.get(target) or await self._thread_of(room, target)
        if thread is None:
            return
        self._tg.start_soon(self._call_decide, thread, target, choice, by, allowed)

    async def _call_decide(
        self, thread: ThreadRef, target: str, choice: ApprovalChoice, by: Author, allowed: bool
    ) -> None:
        try:
            outcome = (
                await self._inbound.decide(thread, target, choice, by)
                if allowed
                else DecideOutcome.NOT_APPROVER
            )
        except Exception:
            log.exception("deciding a request in %s failed", thread.key)
            return
        if outcome is DecideOutcome.NOT_APPROVER:
            name = by.display_name or by.id
            await self._outbox.notice(
                thread.channel,
                f"{name}: you may not answer the agent's requests here, so your reaction "
                "changed nothing.",
                thread.thread,
            )

    async def _call_stop(self, thread: ThreadRef, by: Author) -> None:
        try:
            await self._inbound.stop(thread, by)
        except Exception:
            log.exception("stopping the turn of %s failed", thread.key)

    async def _thread_of(self, room: MatrixRoom, event_id: str) -> ThreadRef | None:
        """The thread of an event we did not see in this run (asks the homeserver)."""
        try:
            response = await self._client.room_get_event(room.room_id, event_id)
        except _NETWORK_ERRORS:
            return None
        if not isinstance(response, RoomGetEventResponse):
            return None
        event = response.event
        if isinstance(event, MegolmEvent):
            event.room_id = room.room_id
            event = self._try_decrypt(event) or event
        return thread_ref(room.room_id, content_of(event), self._threads)

    # -- encryption -----------------------------------------------------------------------

    def _try_decrypt(self, event: MegolmEvent) -> Event | None:
        if self._client.olm is None:
            return None
        try:
            decrypted: Event = self._client.decrypt_event(event)
        except (EncryptionError, LocalProtocolError):
            return None
        return decrypted

    async def _undecryptable(self, room: MatrixRoom, event: MegolmEvent) -> None:
        if self._client.olm is None:
            if room.room_id not in self._told_no_encryption:
                self._told_no_encryption.add(room.room_id)
                problem = self._encryption_problem or "encryption is not available"
                self._tg.start_soon(
                    self._outbox.notice,
                    room.room_id,
                    f"🔒 I cannot read encrypted messages in this room: {problem}.",
                )
            return
        event.room_id = room.room_id
        self._undecrypted[event.event_id] = Undecrypted(room.room_id, event, now())
        await self._request_key(event)

    async def _request_key(self, event: MegolmEvent) -> None:
        """Ask the device that encrypted ``event`` for its key (nio would ask our own devices,
        and the bot has no other device that could have it)."""
        client = self._client
        if event.session_id in client.outgoing_key_requests or not event.device_id:
            return
        try:
            # Sent the way nio sends its own request, so that nio records it and accepts the
            # forwarded key when it comes.
            await request_key_from_sender(client, event)
        except _NETWORK_ERRORS as exc:
            log.warning("asking for a room key failed: %s", type(exc).__name__)

    def _note_withheld(self, response: SyncResponse) -> None:
        """Remember why a sender's client refused us a key (``m.room_key.withheld``)."""
        for event in response.to_device_events:
            if not isinstance(event, UnknownToDeviceEvent) or event.type != _WITHHELD:
                continue
            content = event.source.get("content")
            if not isinstance(content, dict) or not isinstance(content.get("session_id"), str):
                continue
            self._withheld.put(str(content["session_id"]), withheld_reason(content))

    async def _retry_undecrypted(self) -> None:
        at = now()
        for event_id, pending in list(self._undecrypted.items()):
            decrypted = self._try_decrypt(pending.event)
            room = self._client.rooms.get(pending.room_id)
            if decrypted is not None and room is not None:
                self._seen.pop(event_id)
                # Its batch is stored already: kept (on disk too) until the core has it; an
                # event that cannot be handled is skipped, not kept to fail at every start.
                await self._handle_safely(room, decrypted)
                del self._undecrypted[event_id]
                continue
            withheld = self._withheld.peek(pending.event.session_id)
            sender, root = pending.event.sender, thread_root(content_of(pending.event))
            if withheld is not None:
                del self._undecrypted[event_id]
                self._tg.start_soon(
                    self._outbox.notice,
                    pending.room_id,
                    f"🔒 I could not decrypt a message from {sender}: their client "
                    f"withheld the key ({withheld}).",
                    root,
                )
                continue
            action = verdict(
                pending,
                at,
                grace=self._tuning.decrypt_grace,
                key_wait=self._tuning.key_wait,
                room_known=room is not None,
            )
            if action is Verdict.GIVE_UP:
                del self._undecrypted[event_id]
                text = never_readable_notice(sender)
            elif action is Verdict.TELL_WAITING:
                pending.told = True
                self._undecrypted.save()
                text = still_waiting_notice(sender)
            else:
                continue
            self._tg.start_soon(self._outbox.notice, pending.room_id, text, root)

    async def crypto_housekeeping(self) -> None:
        """What nio's sync_forever does between syncs: keys up, keys queried, sessions made."""
        client = self._client
        if client.olm is None:
            return
        try:
            if client.outgoing_to_device_messages:
                await client.send_to_device_messages()
            if client.should_upload_keys:
                await client.keys_upload()
            if client.should_query_keys:
                changed = set(client.users_for_key_query)
                await client.keys_query()
                # Their devices or identities changed: checked afresh at their next event.
                if self._gate.trust is not None:
                    self._gate.trust.forget(changed)
            if client.should_claim_keys:
                await client.keys_claim(client.get_users_for_key_claiming())
        except (LocalProtocolError, *_NETWORK_ERRORS) as exc:
            log.warning("Matrix key maintenance failed: %s", type(exc).__name__)

"""The sync loop: each batch's events classified (:mod:`.classify`) and dispatched (to the core,
the room upgrades, the verifier, the decryption's wait), invites and the timeline's new events
(:mod:`.rooms`), keys (:mod:`.decryption`), sync tokens.

The loop stores ``next_batch`` only after every event of that batch was handed to the core, so
a restart continues exactly where the last run stopped. Events older than the bot's join (a
newly joined room's sync brings its recent history), everything before the very first start,
the bot's own events and event ids already handled never start a turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, assert_never

import anyio
from anyio.abc import TaskGroup
from nio import AsyncClient, MatrixRoom, MegolmEvent, RoomGetEventResponse, SyncResponse
from nio.events import Event

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

from . import classify as k
from .client import SyncTokenStore
from .decryption import NETWORK_ERRORS, Decryption
from .events import author_of, content_of, thread_ref, thread_root
from .late_keys import KEY_WAIT, WaitingEvents
from .obeying import TrustGate
from .outbox import MatrixOutbox
from .ratelimit import RoomSendQueue, retry_after
from .rooms import RoomKeeping
from .upgrades import RoomUpgrades
from .verification import Verifier

log = logging.getLogger(__name__)


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
        self._tokens = tokens
        self._thread_of_event = thread_of_event
        self._element_thread_of = element_thread_of
        self._rooms = rooms
        self._tuning = tuning
        self._tg = task_group
        self._gate = gate
        self._verifier = verifier
        self._seen: LRUMap[str, bool] = LRUMap(tuning.remembered_events)
        self._upgrades = upgrades
        self._told_not_allowed: set[str] = set()
        self.decryption = Decryption(
            client,
            outbox=outbox,
            task_group=task_group,
            gate=gate,
            encryption_problem=encryption_problem,
            decrypt_grace=tuning.decrypt_grace,
            key_wait=tuning.key_wait,
            waiting=waiting,
        )
        self.keeping = RoomKeeping(
            client,
            policy=policy,
            queue=queue,
            backfill_max=tuning.backfill_max,
            upgrades=upgrades,
        )

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
        await self.decryption.housekeeping()
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
            await self.decryption.housekeeping()
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
        except NETWORK_ERRORS as exc:
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
        self.decryption.note_withheld(response)
        await self._to_device_verifications(response)
        await self.keeping.handle_invites(response)
        for room_id, info in response.rooms.join.items():
            room = self._client.rooms.get(room_id)
            if room is None or not history:
                # Before the very first start: nothing that happened then starts a turn.
                continue
            for event in await self.keeping.fresh_events(room_id, info, since):
                await self._handle_safely(room, event)
        await self.retry_undecrypted()

    async def retry_undecrypted(self) -> None:
        """Events whose key came since are handled now (see :meth:`Decryption.retry`)."""
        await self.decryption.retry(self._handle_safely, self._seen.pop)

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

    # -- one event: classified, then dispatched, then marked seen once --------------------

    async def _handle_event(self, room: MatrixRoom, event: Event) -> None:
        event_id = event.event_id
        if event_id in self._seen:
            return
        verifier = self._verifier
        action = k.classify(
            room,
            event,
            own_id=self.user_id,
            allowed=self._policy.allows(event.sender, room.room_id),
            threads=self._threads,
            upgrades=self._upgrades is not None,
            verification=verifier.handles if verifier is not None else lambda _: False,
        )
        if isinstance(action, k.Gated) and await self._refused(room, event, action):
            # A device its owner did not sign, an identity not acknowledged, plaintext in an
            # encrypted room: nothing of it reaches the core (the room was told why, once).
            action = k.Ignore()
        # A message the core did not take raises SubmitFailed: not seen, its batch comes again.
        await self._dispatch(room, event, action)
        self._seen.put(event_id, True)

    async def _refused(self, room: MatrixRoom, event: Event, action: k.Gated) -> bool:
        allowed = action.allowed if isinstance(action, k.Answer | k.Stop) else True
        return allowed and await self._gate.refuses(room, event)

    async def _dispatch(self, room: MatrixRoom, event: Event, action: k.Action) -> None:
        match action:
            case k.Ignore():
                pass
            case k.Upgrade():
                assert self._upgrades is not None
                await self._upgrades.tombstone(room, event)
            case k.Verify(allowed):
                # A person verifying the bot (the operator compares the emoji out of band).
                if allowed and self._verifier is not None:
                    await self._verifier.on_room_event(room, event)
            case k.Undecryptable(allowed):
                if allowed:
                    assert isinstance(event, MegolmEvent)
                    await self.decryption.undecryptable(room, event)
            case k.Answer(target, choice, allowed):
                await self._answer(room, (target, choice), author_of(room, event.sender), allowed)
            case k.Stop(target, allowed):
                if allowed:
                    await self._stop(room, target, author_of(room, event.sender))
            case k.Refuse(message):
                log.info(
                    "ignoring a message from %s in %s (not allowed)", event.sender, room.room_id
                )
                self._tell_not_allowed(room, message, thread_root(content_of(event)))
            case k.Submit(message):
                await self._submit(event, message)
            case _:
                assert_never(action)

    async def _submit(self, event: Event, message: IncomingMessage) -> None:
        try:
            await self._inbound.submit(message)
        except Exception as exc:
            log.exception("the core did not take message %s", event.event_id)
            raise SubmitFailed(event.event_id) from exc
        self._thread_of_event.put(event.event_id, message.thread)
        # The Element thread the message was written in, also when rooms are conversations
        # (threads = false): the answer goes there.
        self._element_thread_of.put(event.event_id, thread_root(content_of(event)))

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
        except NETWORK_ERRORS:
            return None
        if not isinstance(response, RoomGetEventResponse):
            return None
        event = response.event
        if isinstance(event, MegolmEvent):
            event.room_id = room.room_id
            event = self.decryption.try_decrypt(event) or event
        return thread_ref(room.room_id, content_of(event), self._threads)

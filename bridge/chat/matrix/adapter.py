"""The Matrix adapter: the core's :class:`ChatAdapter` on top of matrix-nio."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

import anyio
from anyio.abc import TaskGroup
from nio import AsyncClient

from bridge.chat.common.access import AccessRule
from bridge.chat.common.lru import LRUMap
from bridge.chat.matrix.members import RoomMembers
from bridge.config import MatrixSection
from bridge.core.capabilities import Opened
from bridge.core.events import (
    ApprovalRequest,
    ApprovalResult,
    AttachmentRef,
    Author,
    HistoryEntry,
    Inbound,
    LiveReply,
    OutgoingFile,
    Reaction,
    ThreadRef,
)

from . import history as history_module
from . import media
from .approvals import MatrixApprovals
from .client import MatrixFiles, Session, SyncTokenStore, open_session_retrying
from .format import Renderer, with_mentions, with_relation
from .late_keys import WaitingEvents
from .obeying import IdentityNotices, TrustGate
from .outbox import MatrixOutbox
from .pacing import AccountPacer, PacingTuning
from .posting import post_root, post_text
from .ratelimit import RetryPolicy, RoomSendQueue
from .reply import MatrixLiveReply, ReplyTuning, SendFailed
from .rooms import resolve_rooms
from .sync import RoomDirectory, SessionLost, SyncTuning, SyncWorker
from .trust import DeviceTrust, IdentityPins, MemoryPins, log_users_without_identity
from .upgrades import FollowingRule, RoomUpgrades, Successions
from .verification import VerificationStore, start_verifier

log = logging.getLogger(__name__)


def matrix_to(thread: ThreadRef) -> str:
    """A matrix.to link to the thread's root event (capabilities.Permalinks), with the room's
    server as ``via`` so that a client not in the room can find it."""
    event = f"/{thread.thread}" if thread.thread else ""
    server = thread.channel.partition(":")[2]
    via = f"?via={quote(server, safe='')}" if server else ""
    return f"https://matrix.to/#/{thread.channel}{event}{via}"


REACTION_KEYS: dict[Reaction, str] = {
    Reaction.QUEUED: "⏳",
    Reaction.FAILED: "⚠️",
}


@dataclass(frozen=True)
class MatrixTuning:
    """Timings and limits; the defaults suit a real homeserver, tests shrink them."""

    reply: ReplyTuning = field(default_factory=ReplyTuning)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sync: SyncTuning = field(default_factory=SyncTuning)
    pacing: PacingTuning = field(default_factory=PacingTuning)
    remembered_events: int = 20_000
    # How often the operator's answers to verifications are read from the store.
    verification_poll: float = 2.0


class NotConnected(RuntimeError):
    """An adapter method was called while :meth:`MatrixAdapter.run` was not running."""


@dataclass
class _Connection:
    client: AsyncClient
    outbox: MatrixOutbox
    task_group: TaskGroup
    gate: TrustGate
    # Asked of /versions at the first download.
    authenticated_media: bool | None = None


class MatrixAdapter(RoomMembers):
    """Implements :class:`bridge.core.events.ChatAdapter` for Matrix."""

    platform = "matrix"
    # One sync and one encryption store per device: one bridge instance runs it at a time.
    single_instance = True

    def __init__(
        self, config: MatrixSection, *, data_dir: Path, tuning: MatrixTuning | None = None
    ) -> None:
        self._config = config
        self._data_dir = data_dir
        self._tuning = tuning or MatrixTuning()
        self._renderer = Renderer()
        self._queue = RoomSendQueue(self._tuning.retry)
        self._policy = AccessRule.of(config.allowed_users, config.allowed_rooms)
        self._thread_of_event: LRUMap[str, ThreadRef] = LRUMap(self._tuning.remembered_events)
        self._element_thread_of: LRUMap[str, str] = LRUMap(self._tuning.remembered_events)
        # The Element thread of the turn running in each conversation (threads = false).
        self._turn_root: LRUMap[str, str] = LRUMap(self._tuning.remembered_events)
        self._reactions: LRUMap[str, str] = LRUMap(self._tuning.remembered_events)
        self._pacer = AccountPacer(self._tuning.pacing)
        self._queue.on_limited = self._pacer.limited
        self._connection: _Connection | None = None
        self.user_id = config.user_id
        self._approvals = MatrixApprovals(
            self._renderer, self._tuning.reply.limits, self._tuning.remembered_events
        )
        # Pinned identities: the bridge's store (use_trust_store), else this run's memory.
        self._pins: IdentityPins = MemoryPins()
        # Verifications of the bot wait for the operator here (none without the store).
        self._verifications: VerificationStore | None = None

    def use_trust_store(self, store: VerificationStore) -> None:
        """Pin the identities of allowed users, and keep the verifications waiting for the
        operator, in ``store`` (the bridge's store, shared by instances)."""
        self._pins = store
        self._verifications = store

    # -- running --------------------------------------------------------------------------

    def observe_retries(self, observe: Callable[[str], None]) -> None:
        """Report each send retried after a rate limit ("429"), for metrics."""
        self._queue.on_retry = observe

    async def run(self, inbound: Inbound, started: Callable[[], None]) -> None:
        announced = False

        def once() -> None:
            nonlocal announced
            if not announced:
                announced = True
                started()

        while True:
            session = await open_session_retrying(
                self._config, self._data_dir, self._tuning.sync.backoff_max
            )
            try:
                await self._run_session(session, inbound, once)
            except* SessionLost:
                # The device was deleted or logged out: its keys are gone with it, so the next
                # login makes a new device (new keys, signed again by the bot's identity).
                log.warning(
                    "Matrix: the homeserver no longer knows the bot's login; logging in again"
                )

    async def _run_session(
        self, session: Session, inbound: Inbound, started: Callable[[], None]
    ) -> None:
        client = session.client
        self.user_id = client.user_id
        if session.encryption_problem:
            log.warning("Matrix end-to-end encryption is off: %s", session.encryption_problem)
        if self._config.trust == "any":
            log.warning(
                '⚠️ Matrix: [matrix] trust = "any": every device of an allowed user commands '
                "the agent and gets room keys, also one its owner never verified (anyone with "
                "the password, or a server admin, can add one)"
            )
        try:
            async with anyio.create_task_group() as tg:
                successions = Successions(MatrixFiles.under(self._data_dir).upgrades)
                self._policy = FollowingRule.following(
                    await resolve_rooms(client, self._policy), successions
                )
                rooms = RoomDirectory(client)
                trust = self._device_trust(client)
                missing = (
                    await log_users_without_identity(client, self._policy.users)
                    if trust is not None and not trust.any_device
                    else []
                )
                outbox = MatrixOutbox(client, self._queue, rooms.known_room, trust=trust)
                gate = TrustGate(
                    trust, outbox, tg, require_encryption=self._config.require_encryption
                )
                upgrades = RoomUpgrades(
                    client,
                    inbound=inbound,
                    policy=self._policy,
                    successions=successions,
                    outbox=outbox,
                    task_group=tg,
                )
                worker = SyncWorker(
                    client,
                    inbound=inbound,
                    policy=self._policy,
                    threads=self._config.threads,
                    outbox=outbox,
                    queue=self._queue,
                    tokens=SyncTokenStore(MatrixFiles.under(self._data_dir).sync, client.user_id),
                    thread_of_event=self._thread_of_event,
                    element_thread_of=self._element_thread_of,
                    encryption_problem=session.encryption_problem,
                    rooms=rooms,
                    tuning=self._tuning.sync,
                    task_group=tg,
                    waiting=WaitingEvents(MatrixFiles.under(self._data_dir).undecrypted),
                    upgrades=upgrades,
                    gate=gate,
                    verifier=start_verifier(
                        client,
                        self._verifications,
                        MatrixFiles.under(self._data_dir).cross_signing,
                        outbox,
                        tg,
                        self._tuning.verification_poll,
                    ),
                )
                self._connection = _Connection(client, outbox, tg, gate)
                log.info("Matrix: connected as %s (device %s)", client.user_id, client.device_id)
                notices = IdentityNotices(client, outbox, self._data_dir)

                def synced() -> None:
                    # The rooms are known now: their members without an identity hear why.
                    if missing:
                        tg.start_soon(notices.tell, missing)
                    started()

                await worker.run(synced)
        finally:
            self._connection = None
            with anyio.CancelScope(shield=True):
                await client.close()

    def _device_trust(self, client: AsyncClient) -> DeviceTrust | None:
        if client.olm is None:
            return None
        policy = self._policy
        return DeviceTrust(
            client,
            self._pins,
            # Pinned: everyone the bot obeys (with no allowed_users, whoever is allowed).
            pinned=lambda user: not policy.users or user in policy.users,
            any_device=self._config.trust == "any",
        )

    def _members_client(self) -> AsyncClient | None:
        return self._connection.client if self._connection is not None else None

    def _connected(self) -> _Connection:
        if self._connection is None:
            raise NotConnected("the Matrix adapter is not running")
        return self._connection

    def _remember(self, thread: ThreadRef) -> Callable[[str], None]:
        def remember(event_id: str) -> None:
            self._thread_of_event.put(event_id, thread)

        return remember

    # -- ChatAdapter ----------------------------------------------------------------------

    @asynccontextmanager
    async def open_reply(
        self, thread: ThreadRef, reply_to: str | None, author: Author | None = None
    ) -> AsyncIterator[LiveReply]:
        connection = self._connected()
        root = thread.thread or (self._element_thread_of.peek(reply_to) or "" if reply_to else "")
        self._turn_root.put(thread.key, root)
        mention = [author.id] if author is not None and author.id != self.user_id else []
        reply = MatrixLiveReply(
            connection.outbox,
            self._renderer,
            thread,
            reply_to,
            thread_root=root,
            mention=mention,
            pacer=self._pacer,
            tuning=self._tuning.reply,
            on_sent=self._remember(thread),
        )
        await reply.start(connection.task_group)
        try:
            yield reply
        finally:
            with anyio.CancelScope(shield=True):
                await reply.close()

    def _root(self, thread: ThreadRef) -> str:
        """The Matrix thread posts of this conversation go to (see open_reply)."""
        return thread.thread or self._turn_root.peek(thread.key) or ""

    async def post_message(self, thread: ThreadRef, text: str) -> None:
        await self._post(thread, text)

    async def tell_once(self, thread: ThreadRef, key: str, text: str) -> bool:
        """Sent under transaction ids made from ``key`` (see :mod:`.posting`): the homeserver
        posts nothing when this device sent them before. True: asked to post."""
        await self._post(thread, text, key)
        return True

    async def _post(self, thread: ThreadRef, text: str, key: str | None = None) -> None:
        outbox, limits = self._connected().outbox, self._tuning.reply.limits
        root, remember = self._root(thread), self._remember(thread)
        await post_text(outbox, self._renderer, limits, thread.channel, root, text, remember, key)

    async def permalink(self, thread: ThreadRef) -> str | None:
        return matrix_to(thread)

    async def open_thread(self, channel: str, text: str) -> Opened:
        """A conversation the bridge opens in room ``channel``: ``text`` as a new root message,
        the Matrix thread under it the conversation (the room, with ``threads = false``)."""
        outbox, limits = self._connected().outbox, self._tuning.reply.limits
        root = await post_root(outbox, self._renderer, limits, channel, text)
        thread = ThreadRef(platform=self.platform, channel=channel, thread=root)
        if not self._config.threads:
            thread = ThreadRef(platform=self.platform, channel=channel)
            self._turn_root.put(thread.key, root)
        self._thread_of_event.put(root, thread)
        return Opened(thread, root)

    async def post_file(self, thread: ThreadRef, file: OutgoingFile, title: str | None) -> None:
        connection = self._connected()
        client = connection.client
        try:
            content = await media.upload(
                client, self._queue, file, title, encrypt=connection.outbox.encrypts(thread.channel)
            )
        except (RuntimeError, OSError) as exc:
            raise SendFailed(str(exc)) from None
        with_relation(with_mentions(content), thread_root=self._root(thread))
        self._remember(thread)(await connection.outbox.send(thread.channel, content))

    async def react(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        """One status per message, in as few events as possible: the account's message rate
        is shared by every room. "Seen mid-turn" is a read receipt (no event at all)."""
        outbox = self._connected().outbox
        previous = self._reactions.pop(message_id)
        if reaction is Reaction.INJECTED:
            await outbox.receipt(thread.channel, message_id)
        else:
            try:
                event_id = await outbox.react(thread.channel, message_id, REACTION_KEYS[reaction])
            except SendFailed as exc:
                log.warning("reaction in %s failed: %s", thread.channel, exc)
                if previous is not None:
                    self._reactions.put(message_id, previous)
                return
            self._reactions.put(message_id, event_id)
        if previous is not None:
            # The new status replaces ours from before.
            await outbox.redact(thread.channel, previous)

    async def ask_approval(self, request: ApprovalRequest) -> str:
        outbox = self._connected().outbox
        return await self._approvals.ask(outbox, request, self._remember(request.thread))

    async def settle_approval(
        self, request: ApprovalRequest, handle: str, result: ApprovalResult
    ) -> None:
        await self._approvals.settle(self._connected().outbox, request, handle, result)

    async def fetch_attachment(self, ref: AttachmentRef, out: BinaryIO, max_bytes: int) -> int:
        connection = self._connected()
        if connection.authenticated_media is None:
            connection.authenticated_media = await media.authenticated_media(connection.client)
        return await media.download(
            connection.client,
            ref,
            out,
            max_bytes,
            authenticated=connection.authenticated_media,
        )

    async def history(self, thread: ThreadRef, limit: int) -> list[HistoryEntry]:
        connection = self._connected()
        return await history_module.history(
            connection.client, thread, limit, self._policy, refused=connection.gate.refused_quietly
        )

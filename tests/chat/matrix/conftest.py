"""Fixtures for the Matrix tests: a real Synapse, users, human clients, a running adapter.

Importable by other test packages (the lead's end-to-end tests)::

    from tests.chat.matrix.conftest import synapse, synapse_default_limits  # noqa: F401
    from tests.chat.matrix.conftest import Human, RecordingInbound, matrix_world, running_adapter

``synapse`` is session-scoped (one server for the whole run, shared by the xdist workers);
``synapse_default_limits`` is the same server registering users who meet Synapse's default
per-user limits; ``matrix_world`` gives a room in
which an allowed human and the bot (a running :class:`MatrixAdapter`) are both joined.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from nio import (
    AsyncClient,
    AsyncClientConfig,
    JoinResponse,
    MatrixRoom,
    RoomCreateResponse,
    RoomMemberEvent,
    RoomSendResponse,
    SyncResponse,
)
from nio.api import RoomPreset
from nio.events import Event, ToDeviceEvent

from bridge.chat.matrix import MatrixAdapter, MatrixTuning
from bridge.chat.matrix.crosssign import CrossSigner, CrossSigningKeys
from bridge.chat.matrix.ratelimit import RetryPolicy
from bridge.chat.matrix.reply import ReplyTuning
from bridge.chat.matrix.sync import SyncTuning
from bridge.config import MatrixSection
from bridge.core.events import Author, IncomingMessage, SubmitOutcome, ThreadRef
from tests.shared_servers import run_of

from .synapse import (
    MatrixUser,
    Synapse,
    SynapseError,
    shared_synapse,
    start_shared,
    synapse_python,
)

WAIT = 30.0

SKIP_REASON = (
    "Synapse is not available: run `make test` (or `make synapse` and set "
    "AGY_BRIDGE_SYNAPSE_PYTHON=$PWD/.venv-synapse/bin/python)"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def synapse(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Synapse:
    """The run's one Synapse, shared by every worker (tests/shared_servers.py), with the
    per-user rate limits lifted for every user it registers."""
    python = synapse_python()
    if python is None:
        pytest.skip(SKIP_REASON)
    failure = ""
    try:
        record = run_of(request.config).shared(
            "synapse",
            lambda run: start_shared(python, tmp_path_factory.mktemp("synapse"), run),
        )
    except SynapseError as exc:
        failure = str(exc)
    if failure:
        pytest.fail(f"Synapse did not start ({python}):\n{failure}", pytrace=False)
    return shared_synapse(record)


@pytest.fixture(scope="session")
def synapse_default_limits(synapse: Synapse) -> Synapse:
    """The same server, whose users meet Synapse's default per-user limits (the 429 tests):
    messages, room creation, joins."""
    return synapse.with_default_limits()


# -- the core, as the adapter sees it --------------------------------------------------------


@dataclass
class RecordingInbound:
    """A test :class:`Inbound`: records what the adapter hands over."""

    messages: list[IncomingMessage] = field(default_factory=list)
    stops: list[tuple[ThreadRef, Author]] = field(default_factory=list)
    conversations: set[str] = field(default_factory=set)
    moves: list[tuple[ThreadRef, ThreadRef, Author]] = field(default_factory=list)
    fail_next: int = 0
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def submit(self, message: IncomingMessage) -> SubmitOutcome:
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("the store is unavailable")
        duplicate = any(m.event_id == message.event_id for m in self.messages)
        self.messages.append(message)
        self._notify()
        return SubmitOutcome.DUPLICATE if duplicate else SubmitOutcome.ACCEPTED

    async def stop(self, thread: ThreadRef, by: Author) -> None:
        self.stops.append((thread, by))
        self._notify()

    async def is_conversation(self, thread: ThreadRef) -> bool:
        return thread.key in self.conversations

    async def move_thread(self, old: ThreadRef, new: ThreadRef, by: Author) -> bool:
        self.moves.append((old, new, by))
        self._notify()
        return True

    async def wait_for(
        self, predicate: Callable[[RecordingInbound], bool], within: float = WAIT
    ) -> None:
        with anyio.fail_after(within):
            while not predicate(self):
                await self._changed.wait()

    def texts(self) -> list[str]:
        return [m.text for m in self.messages]


# -- a human on the other side ---------------------------------------------------------------


class Human:
    """A nio client acting as a person in Element (optionally with end-to-end encryption)."""

    def __init__(self, client: AsyncClient, user: MatrixUser) -> None:
        self.client = client
        self.user = user
        self.timeline: dict[str, list[Event]] = {}
        self.to_device: list[ToDeviceEvent] = []
        self.ephemeral: dict[str, list[Any]] = {}

    @property
    def user_id(self) -> str:
        return self.user.user_id

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, synapse: Synapse, user: MatrixUser, store: Path | None = None
    ) -> AsyncIterator[Human]:
        config = AsyncClientConfig(
            encryption_enabled=store is not None, store_sync_tokens=False, max_timeouts=5
        )
        if store is not None:
            await anyio.Path(store).mkdir(parents=True, exist_ok=True)
        client = AsyncClient(
            synapse.base_url,
            user.user_id,
            device_id=user.device_id,
            store_path=str(store) if store else "",
            config=config,
        )
        client.restore_login(user.user_id, user.device_id, user.access_token)
        human = cls(client, user)
        try:
            await human.sync(0)
            yield human
        finally:
            await client.close()

    async def sync(self, timeout_ms: int = 1000) -> None:
        client = self.client
        response = await client.sync(
            timeout=timeout_ms,
            full_state=not client.next_batch,
            # Synapse's default of 10 events per sync would hide part of a burst.
            sync_filter={"room": {"timeline": {"limit": 200}}},
        )
        assert isinstance(response, SyncResponse), response
        for room_id, info in response.rooms.join.items():
            self.timeline.setdefault(room_id, []).extend(info.timeline.events)
            self.ephemeral.setdefault(room_id, []).extend(info.ephemeral)
        self.to_device.extend(response.to_device_events)
        if client.olm is not None:
            if client.outgoing_to_device_messages:
                await client.send_to_device_messages()
            if client.should_upload_keys:
                await client.keys_upload()
            if client.should_query_keys:
                await client.keys_query()
            if client.should_claim_keys:
                await client.keys_claim(client.get_users_for_key_claiming())

    async def wait_event(
        self, room_id: str, predicate: Callable[[Event], bool], within: float = WAIT
    ) -> Event:
        """The first event of the room (seen so far or later) that matches."""
        with anyio.fail_after(within):
            while True:
                for event in self.timeline.get(room_id, []):
                    if predicate(event):
                        return event
                await self.sync()

    async def wait_read_by(self, room_id: str, event_id: str, user_id: str) -> None:
        """Until ``user_id``'s read receipt stands on ``event_id``."""
        with anyio.fail_after(WAIT):
            while True:
                for event in self.ephemeral.get(room_id, []):
                    for receipt in getattr(event, "receipts", []):
                        if receipt.event_id == event_id and receipt.user_id == user_id:
                            return
                await self.sync()

    async def wait_joined(self, room_id: str, user_id: str) -> None:
        await self.wait_event(
            room_id,
            lambda e: (
                isinstance(e, RoomMemberEvent) and e.state_key == user_id and e.membership == "join"
            ),
        )

    async def send(
        self, room_id: str, content: dict[str, Any], kind: str = "m.room.message"
    ) -> str:
        response = await self.client.room_send(
            room_id, kind, content, ignore_unverified_devices=True
        )
        assert isinstance(response, RoomSendResponse), response
        return str(response.event_id)

    async def say(self, room_id: str, text: str, **extra: Any) -> str:
        return await self.send(room_id, {"msgtype": "m.text", "body": text, **extra})

    async def create_room(self, invite: list[str], *, encrypted: bool = False) -> str:
        initial_state = []
        if encrypted:
            initial_state.append(
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            )
        response = await self.client.room_create(
            preset=RoomPreset.private_chat,
            invite=invite,
            initial_state=initial_state,
            is_direct=True,
        )
        assert isinstance(response, RoomCreateResponse), response
        await self.sync(0)
        return str(response.room_id)

    async def join(self, room_id: str) -> None:
        response = await self.client.join(room_id)
        assert isinstance(response, JoinResponse), response

    def room(self, room_id: str) -> MatrixRoom:
        return self.client.rooms[room_id]


async def cross_sign(human: Human, key_file: Path) -> CrossSigningKeys:
    """Give ``human`` a cross-signing identity (new keys unless ``key_file`` holds some) and
    sign their device with it, as Element does when a person sets up or verifies a session."""
    return await CrossSigner(human.client, key_file, human.user.password).ensure()


@asynccontextmanager
async def element_user(synapse: Synapse, user: MatrixUser, tmp_path: Path) -> AsyncIterator[Human]:
    """A person on an Element-grade client: an encrypting device of its own, signed by their
    cross-signing identity (the bot obeys no other)."""
    name = user.user_id[1:].split(":", 1)[0]
    async with Human.connect(synapse, user, tmp_path / f"{name}-store") as human:
        await cross_sign(human, tmp_path / f"{name}-cross-signing.json")
        yield human


# -- the bot ---------------------------------------------------------------------------------

FAST_TUNING = MatrixTuning(
    reply=ReplyTuning(edit_interval=0.2, typing_refresh=5.0),
    retry=RetryPolicy(attempts=30, max_wait=10.0),
    sync=SyncTuning(timeout_ms=5_000, decrypt_grace=5.0),
)


def bot_config(
    synapse: Synapse,
    bot: MatrixUser,
    *,
    allowed_users: list[str] | None = None,
    allowed_rooms: list[str] | None = None,
    threads: bool = False,
    encryption: bool = True,
) -> MatrixSection:
    return MatrixSection.model_validate(
        {
            "homeserver": synapse.base_url,
            "user_id": bot.user_id,
            "password": bot.password,
            "allowed_users": allowed_users or [],
            "allowed_rooms": allowed_rooms or [],
            "threads": threads,
            "encryption": encryption,
        }
    )


@asynccontextmanager
async def running_adapter(
    adapter: MatrixAdapter, inbound: RecordingInbound, within: float = WAIT
) -> AsyncIterator[MatrixAdapter]:
    """Run ``adapter`` until the block ends; wait until it has synced once."""
    ready = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(adapter.run, inbound, ready.set)
        with anyio.fail_after(within):
            await ready.wait()
        try:
            yield adapter
        finally:
            tg.cancel_scope.cancel()


@dataclass
class MatrixWorld:
    synapse: Synapse
    bot_user: MatrixUser
    human: Human
    adapter: MatrixAdapter
    inbound: RecordingInbound
    room_id: str
    data_dir: Path

    def thread(self, root: str = "") -> ThreadRef:
        return ThreadRef(platform="matrix", channel=self.room_id, thread=root)


@asynccontextmanager
async def matrix_world(
    synapse: Synapse,
    tmp_path: Path,
    *,
    threads: bool = False,
    encrypted: bool = False,
    bot_encryption: bool = True,
    tuning: MatrixTuning = FAST_TUNING,
) -> AsyncIterator[MatrixWorld]:
    """A room with an allowed human and the running bot in it."""
    alice = synapse.register("alice", displayname="Alice Liddell")
    bot_user = synapse.register("bot", displayname="Agy Bot")
    store = tmp_path / f"alice-store-{secrets.token_hex(3)}" if encrypted else None
    data_dir = tmp_path / "bridge"
    config = bot_config(
        synapse,
        bot_user,
        allowed_users=[alice.user_id],
        threads=threads,
        encryption=bot_encryption,
    )
    adapter = MatrixAdapter(config, data_dir=data_dir, tuning=tuning)
    inbound = RecordingInbound()
    async with Human.connect(synapse, alice, store) as human:
        if encrypted:
            # Element's users have a cross-signing identity and a signed device.
            await cross_sign(human, tmp_path / f"alice-cross-signing-{secrets.token_hex(3)}.json")
        room_id = await human.create_room([bot_user.user_id], encrypted=encrypted)
        async with running_adapter(adapter, inbound):
            await human.wait_joined(room_id, bot_user.user_id)
            yield MatrixWorld(synapse, bot_user, human, adapter, inbound, room_id, data_dir)

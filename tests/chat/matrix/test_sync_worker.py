"""The sync loop's own logic, without a homeserver: nio's response objects built in-process.

A scripted nio client answers ``sync`` (and the few other calls the loop makes) from a list;
the core, the outbox and the token file are small recorders. These tests pin what the Synapse
tests show end to end, one rule at a time: the sync token is saved only after its batch was
handed over, events are handed over once, a first start replays nothing, access refusals, 🛑
and ✅ reactions, invites, backfill bounds and the encryption notices.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import TaskGroup
from nio import (
    AsyncClient,
    JoinResponse,
    MatrixRoom,
    MegolmEvent,
    RoomGetEventError,
    RoomGetEventResponse,
    RoomLeaveError,
    RoomLeaveResponse,
    RoomMessagesResponse,
    SyncError,
    SyncResponse,
)
from nio.events import Event
from nio.exceptions import EncryptionError

from bridge.chat.common.access import AccessRule
from bridge.chat.common.lru import LRUMap
from bridge.chat.matrix.client import SyncTokenStore
from bridge.chat.matrix.decryption import withheld_reason
from bridge.chat.matrix.obeying import TrustGate
from bridge.chat.matrix.ratelimit import RoomSendQueue
from bridge.chat.matrix.sync import (
    RoomDirectory,
    SessionLost,
    SubmitFailed,
    SyncTuning,
    SyncWorker,
)
from bridge.core.events import (
    ApprovalChoice,
    Author,
    DecideOutcome,
    IncomingMessage,
    SubmitOutcome,
    ThreadRef,
)

pytestmark = pytest.mark.anyio

ROOM = "!room:example.org"
OTHER_ROOM = "!other:example.org"
BOT = "@bot:example.org"
ALICE = "@alice:example.org"
MALLORY = "@mallory:example.org"
TUNING = SyncTuning(timeout_ms=5_000, timeline_limit=7, backfill_max=3, decrypt_grace=60.0)


def event(
    event_id: str,
    content: dict[str, Any] | None = None,
    *,
    kind: str = "m.room.message",
    sender: str = ALICE,
    ts: int = 1_700_000_000_000,
    **extra: Any,
) -> dict[str, Any]:
    if content is None:
        content = {"msgtype": "m.text", "body": f"text of {event_id}"}
    return {
        "type": kind,
        "event_id": event_id,
        "sender": sender,
        "origin_server_ts": ts,
        "content": content,
        **extra,
    }


def member(
    event_id: str, user: str, membership: str, *, sender: str, ts: int = 1, **extra: Any
) -> dict[str, Any]:
    return event(
        event_id,
        {"membership": membership},
        kind="m.room.member",
        sender=sender,
        ts=ts,
        state_key=user,
        **extra,
    )


def reaction(event_id: str, target: str, key: str, sender: str = ALICE) -> dict[str, Any]:
    content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": key}}
    return event(event_id, content, kind="m.reaction", sender=sender)


def encrypted(event_id: str, session: str = "sess", sender: str = ALICE) -> dict[str, Any]:
    content = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "sender_key": "curve",
        "ciphertext": "secret",
        "session_id": session,
        "device_id": "ALICEDEV",
    }
    return event(event_id, content, kind="m.room.encrypted", sender=sender)


def batch(
    next_batch: str,
    events: list[dict[str, Any]] | None = None,
    *,
    room: str = ROOM,
    limited: bool = False,
    prev_batch: str = "prev",
    state: list[dict[str, Any]] | None = None,
    invites: dict[str, list[dict[str, Any]]] | None = None,
    to_device: list[dict[str, Any]] | None = None,
) -> SyncResponse:
    rooms: dict[str, Any] = {"join": {}, "invite": {}, "leave": {}}
    if events is not None or state is not None:
        rooms["join"][room] = {
            "timeline": {"events": events or [], "limited": limited, "prev_batch": prev_batch},
            "state": {"events": state or []},
        }
    for room_id, invite_state in (invites or {}).items():
        rooms["invite"][room_id] = {"invite_state": {"events": invite_state}}
    response = SyncResponse.from_dict(
        {"next_batch": next_batch, "rooms": rooms, "to_device": {"events": to_device or []}}
    )
    assert isinstance(response, SyncResponse), response
    return response


class ScriptedClient(AsyncClient):
    """nio's client with the homeserver replaced by a script (nothing leaves the process)."""

    def __init__(self) -> None:
        super().__init__("https://matrix.example.org", BOT, device_id="BOTDEV")
        self.user_id = BOT  # as restore_login sets it
        self.access_token = "syt_bot_token"
        self.script: list[Any] = []
        self.sync_calls: list[dict[str, Any]] = []
        self.exhausted = anyio.Event()
        self._more = anyio.Event()
        self.joined: list[str] = []
        self.left: list[str] = []
        self.leave_answer: Any = RoomLeaveResponse()
        self.messages_pages: list[Any] = []
        self.messages_calls: list[dict[str, Any]] = []
        self.events: dict[str, Any] = {}
        self.sent: list[tuple[Any, ...]] = []
        self.decrypted: dict[str, Event] = {}
        self.verified: list[Any] = []
        for room_id in (ROOM, OTHER_ROOM):
            room = MatrixRoom(room_id, BOT)
            room.add_member(ALICE, "Alice", None)
            room.add_member(MALLORY, "Mallory", None)
            self.rooms[room_id] = room

    async def sync(  # type: ignore[override]
        self,
        timeout: int | None = 0,
        sync_filter: Any = None,
        since: str | None = None,
        full_state: bool | None = None,
        **_: Any,
    ) -> Any:
        self.sync_calls.append(
            {"timeout": timeout, "filter": sync_filter, "since": since, "full_state": full_state}
        )
        while not self.script:
            self.exhausted.set()
            self._more = anyio.Event()
            await self._more.wait()
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def feed(self, *answers: Any) -> None:
        """More answers for a loop that used up its script; back once they are used up too."""
        self.exhausted = anyio.Event()
        self.script.extend(answers)
        self._more.set()
        with anyio.fail_after(30):
            await self.exhausted.wait()
        await anyio.wait_all_tasks_blocked()

    async def join(self, room_id: str) -> Any:  # type: ignore[override]
        self.joined.append(room_id)
        return JoinResponse(room_id)

    async def room_leave(self, room_id: str) -> Any:  # type: ignore[override]
        self.left.append(room_id)
        return self.leave_answer

    async def room_messages(self, room_id: str, **kwargs: Any) -> Any:  # type: ignore[override]
        self.messages_calls.append({"room_id": room_id, **kwargs})
        page = self.messages_pages.pop(0)
        if isinstance(page, BaseException):
            raise page
        return page

    async def room_get_event(self, room_id: str, event_id: str) -> Any:  # type: ignore[override]
        if room_id not in self.rooms:
            return RoomGetEventError.from_dict({"errcode": "M_FORBIDDEN", "error": "not a member"})
        answer = self.events.get(event_id)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def decrypt_event(self, event: MegolmEvent) -> Any:
        if not event.room_id:
            # nio finds the session by room: an event without one cannot be decrypted.
            raise EncryptionError("the event has no room id")
        found = self.decrypted.get(event.event_id)
        if found is None:
            raise EncryptionError("no key yet")
        return found

    async def _send(self, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(args)

    def verify_device(self, device: Any) -> bool:
        self.verified.append(device)
        return True


@dataclass
class FakeDevice:
    user_id: str
    device_id: str


@dataclass
class FakeDeviceStore:
    devices: dict[str, list[FakeDevice]] = field(default_factory=dict)

    def active_user_devices(self, user_id: str) -> list[FakeDevice]:
        return self.devices.get(user_id, [])


@dataclass
class FakeOlm:
    """What the sync loop reads of nio's Olm machine (the client forwards to it)."""

    outgoing_key_requests: dict[str, Any] = field(default_factory=dict)
    outgoing_to_device_messages: list[Any] = field(default_factory=list)
    should_upload_keys: bool = False
    should_query_keys: bool = False
    wedged_devices: list[Any] = field(default_factory=list)
    key_request_devices_no_session: list[Any] = field(default_factory=list)
    device_store: FakeDeviceStore = field(default_factory=FakeDeviceStore)
    trusted: set[str] = field(default_factory=set)
    users_for_key_query: set[str] = field(default_factory=set)

    def is_device_verified(self, device: FakeDevice) -> bool:
        return device.device_id in self.trusted


@dataclass
class Core:
    """The core as the adapter sees it: records what it is given, refuses while told to."""

    messages: list[IncomingMessage] = field(default_factory=list)
    stops: list[tuple[ThreadRef, Author]] = field(default_factory=list)
    decisions: list[tuple[ThreadRef, str, ApprovalChoice, Author]] = field(default_factory=list)
    refuse: int = 0
    refused: int = 0
    outcome: DecideOutcome = DecideOutcome.DECIDED
    fail_stop: bool = False

    async def submit(self, message: IncomingMessage) -> SubmitOutcome:
        if self.refuse:
            self.refuse -= 1
            self.refused += 1
            raise OSError("database or disk is full")
        self.messages.append(message)
        return SubmitOutcome.ACCEPTED

    async def stop(self, thread: ThreadRef, by: Author) -> None:
        if self.fail_stop:
            raise RuntimeError("the turn would not stop")
        self.stops.append((thread, by))

    async def is_conversation(self, thread: ThreadRef) -> bool:
        return False

    async def decide(
        self,
        thread: ThreadRef,
        handle: str,
        choice: ApprovalChoice,
        by: Author,
        reason: str = "",
    ) -> DecideOutcome:
        self.decisions.append((thread, handle, choice, by))
        return self.outcome

    def ids(self) -> list[str]:
        return [m.event_id for m in self.messages]


@dataclass
class Outbox:
    notices: list[tuple[str, str, str]] = field(default_factory=list)

    async def notice(self, room_id: str, text: str, thread_root: str = "") -> None:
        self.notices.append((room_id, text, thread_root))


@dataclass
class World:
    client: ScriptedClient
    core: Core
    outbox: Outbox
    tokens: SyncTokenStore
    token_file: Path
    worker: SyncWorker
    thread_of_event: LRUMap[str, ThreadRef]
    element_thread_of: LRUMap[str, str]
    tg: TaskGroup
    started: list[bool]

    def saved_token(self) -> str | None:
        if not self.token_file.exists():
            return None
        return str(json.loads(self.token_file.read_text())["next_batch"])

    async def run_script(self, *answers: Any) -> None:
        """Run the loop until the script is used up and everything it started has settled."""
        self.client.script.extend(answers)
        self.tg.start_soon(self.worker.run, lambda: self.started.append(True))
        with anyio.fail_after(30):
            await self.client.exhausted.wait()
        await anyio.wait_all_tasks_blocked()

    async def settle(self) -> None:
        await anyio.wait_all_tasks_blocked()


@asynccontextmanager
async def world(
    tmp_path: Path,
    *,
    users: tuple[str, ...] = (ALICE,),
    places: tuple[str, ...] = (),
    threads: bool = True,
    tuning: SyncTuning = TUNING,
    token: str | None = None,
    olm: FakeOlm | None = None,
    problem: str = "",
) -> AsyncIterator[World]:
    client = ScriptedClient()
    client.olm = cast(Any, olm)
    if olm is not None:
        client.store = cast(Any, object())  # nio reads the devices only with a store loaded
    token_file = tmp_path / "sync.json"
    tokens = SyncTokenStore(token_file, BOT)
    if token is not None:
        tokens.save(token)
    core, outbox = Core(), Outbox()
    thread_of_event: LRUMap[str, ThreadRef] = LRUMap(100)
    element_thread_of: LRUMap[str, str] = LRUMap(100)

    async def no_sleep(_: float) -> None:
        pass

    async with anyio.create_task_group() as tg:
        worker = SyncWorker(
            client,
            inbound=core,
            policy=AccessRule.of(users, places),
            threads=threads,
            outbox=cast(Any, outbox),
            queue=RoomSendQueue(sleep=no_sleep),
            tokens=tokens,
            thread_of_event=thread_of_event,
            element_thread_of=element_thread_of,
            encryption_problem=problem,
            rooms=RoomDirectory(client, wait=0),
            tuning=tuning,
            task_group=tg,
            # No device trust over the fake client (test_device_trust.py checks it against
            # a real Synapse).
            gate=TrustGate(None, cast(Any, outbox), tg),
        )
        yield World(
            client,
            core,
            outbox,
            tokens,
            token_file,
            worker,
            thread_of_event,
            element_thread_of,
            tg,
            [],
        )
        tg.cancel_scope.cancel()


def room_of(w: World, room_id: str = ROOM) -> MatrixRoom:
    return w.client.rooms[room_id]


def parsed(source: dict[str, Any]) -> Event:
    return Event.parse_event(source)


# -- the token and the loop -----------------------------------------------------------------


async def test_the_first_start_replays_nothing_and_saves_the_token_once_started(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        await w.run_script(batch("s1", [event("$old")]), batch("s2", [event("$new")]))
        # What happened before the very first start never starts a turn.
        assert w.core.ids() == ["$new"]
        assert w.saved_token() == "s2"
        assert w.started == [True]
        first, second, third = w.client.sync_calls
        # The first sync: no token, the full state, at once, and only the last event per room.
        assert first["since"] is None
        assert first["full_state"] is True
        assert first["timeout"] == 0
        assert first["filter"]["room"]["timeline"]["limit"] == 1
        assert first["filter"]["presence"] == {"not_types": ["*"]}
        assert first["filter"]["room"]["state"] == {"lazy_load_members": False}
        # Then long polls from the last token, with the tuned timeline.
        assert second["since"] == "s1"
        assert second["full_state"] is None
        assert second["timeout"] == TUNING.timeout_ms
        assert second["filter"]["room"]["timeline"]["limit"] == TUNING.timeline_limit
        assert third["since"] == "s2"


async def test_a_restart_goes_on_from_the_saved_token_with_the_full_state(tmp_path: Path) -> None:
    async with world(tmp_path, token="s5") as w:
        await w.run_script(batch("s6", [event("$a")]))
        assert w.core.ids() == ["$a"]
        first = w.client.sync_calls[0]
        assert first["since"] == "s5"
        # Rooms live in memory only: the first sync after a start asks for the full state...
        assert first["full_state"] is True
        assert first["timeout"] == 0
        # ... but a restart is no first start: a whole timeline is delivered.
        assert first["filter"]["room"]["timeline"]["limit"] == TUNING.timeline_limit
        assert w.saved_token() == "s6"


async def test_a_token_of_another_account_is_not_used(tmp_path: Path) -> None:
    token_file = tmp_path / "sync.json"
    SyncTokenStore(token_file, "@someone:example.org").save("theirs")
    assert SyncTokenStore(token_file, BOT).load() is None
    token_file.write_text("not json")
    assert SyncTokenStore(token_file, BOT).load() is None
    SyncTokenStore(token_file, BOT).save("")
    assert SyncTokenStore(token_file, BOT).load() is None


async def test_a_refused_batch_keeps_the_old_token_and_is_fetched_again(tmp_path: Path) -> None:
    async with world(tmp_path, token="s1") as w:
        w.core.refuse = 1
        w.client.next_batch = "s2"
        refused = batch("s2", [event("$m")])

        async def refusal_seen() -> None:
            while not w.core.refused:
                await anyio.lowlevel.checkpoint()
            # The token is still the old one while the core has not taken the batch.
            assert w.saved_token() == "s1"
            # nio drops a batch whose token it already has: the loop must forget it.
            assert w.client.next_batch == "s1"
            assert w.started == []

        w.tg.start_soon(refusal_seen)
        await w.run_script(refused, batch("s2", [event("$m")]))
        assert w.core.refused == 1
        assert w.core.ids() == ["$m"]
        assert [c["since"] for c in w.client.sync_calls] == ["s1", "s1", "s2"]
        # The retry after a refusal asks for the full state still (nothing was processed).
        assert w.client.sync_calls[1]["full_state"] is True
        assert w.saved_token() == "s2"
        assert w.started == [True]


async def test_a_refused_first_batch_forgets_the_token_it_never_had(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.client.next_batch = "s1"
        # Nothing is handed over on a first start: refuse the second batch instead.
        w.core.refuse = 1
        await w.run_script(batch("s1", []), batch("s2", [event("$m")]), batch("s2", [event("$m")]))
        assert w.core.ids() == ["$m"]
        assert [c["since"] for c in w.client.sync_calls] == [None, "s1", "s1", "s2"]


async def test_an_unknown_token_ends_the_session(tmp_path: Path) -> None:
    async with world(tmp_path, token="s1") as w:
        w.client.script.append(SyncError.from_dict({"errcode": "M_UNKNOWN_TOKEN", "error": "gone"}))
        with pytest.raises(SessionLost, match="gone"):
            await w.worker.run(lambda: None)
        assert w.saved_token() == "s1"


async def test_a_failed_sync_is_tried_again_without_saving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tuning = SyncTuning(timeout_ms=5_000, timeline_limit=7, backfill_max=3, backoff_max=0.01)
    async with world(tmp_path, token="s1", tuning=tuning) as w:
        limited = SyncError.from_dict(
            {"errcode": "M_LIMIT_EXCEEDED", "error": "slow down", "retry_after_ms": 1}
        )
        with caplog.at_level(logging.WARNING, "bridge.chat.matrix.sync"):
            await w.run_script(
                OSError("connection reset"),
                limited,
                batch("s2", [event("$m")]),
            )
        assert w.core.ids() == ["$m"]
        assert [c["since"] for c in w.client.sync_calls] == ["s1", "s1", "s1", "s2"]
        assert "Matrix sync failed: OSError" in caplog.messages
        assert "slow down" in caplog.text
        assert w.saved_token() == "s2"


# -- which events are handed over ------------------------------------------------------------


async def test_each_event_is_handed_over_once_and_the_bots_own_never(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path, token="s1") as w:
        await w.run_script(
            batch("s2", [event("$a"), event("$mine", sender=BOT)]),
            batch("s3", [event("$a"), event("$b"), event("$mine", sender=BOT)]),
        )
        assert w.core.ids() == ["$a", "$b"]
        assert "$mine" in w.worker._seen
        assert w.outbox.notices == []
        assert "skipping event" not in caplog.text, "no event was odd"
        message = w.core.messages[0]
        assert message.author == Author(id=ALICE, display_name="Alice")
        assert message.thread == ThreadRef(platform="matrix", channel=ROOM)
        assert w.thread_of_event.get("$a") == message.thread
        assert w.element_thread_of.get("$a") == ""


async def test_a_thread_message_is_remembered_with_its_element_thread(tmp_path: Path) -> None:
    content = {
        "msgtype": "m.text",
        "body": "in a thread",
        "m.relates_to": {"rel_type": "m.thread", "event_id": "$root"},
    }
    async with world(tmp_path, token="s1", threads=False) as w:
        await w.run_script(batch("s2", [event("$t", content)]))
        [message] = w.core.messages
        # Rooms are conversations here, but the answer goes to the Element thread.
        assert message.thread == ThreadRef(platform="matrix", channel=ROOM)
        assert w.element_thread_of.get("$t") == "$root"


async def test_an_event_that_breaks_handling_is_skipped_for_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path, token="s1") as w:
        room = room_of(w)
        broken = parsed(event("$odd"))
        broken.sender = cast(Any, None)  # an event nio could not make sense of

        calls = 0

        async def handle(room: MatrixRoom, event: Event) -> None:
            nonlocal calls
            calls += 1
            raise ValueError("odd event")

        w.worker._handle_event = handle  # type: ignore[method-assign]
        await w.worker._handle_safely(room, broken)
        assert calls == 1
        assert "$odd" in w.worker._seen
        [record] = [r for r in caplog.records if "skipping" in r.getMessage()]
        assert record.getMessage() == f"skipping event $odd in {ROOM}"
        assert record.exc_info is not None

        async def refuse(room: MatrixRoom, event: Event) -> None:
            raise SubmitFailed(event.event_id)

        w.worker._handle_event = refuse  # type: ignore[method-assign]
        with pytest.raises(SubmitFailed):
            await w.worker._handle_safely(room, parsed(event("$refused")))
        assert "$refused" not in w.worker._seen


async def test_a_message_the_core_refused_is_not_remembered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path) as w:
        w.core.refuse = 1
        with pytest.raises(SubmitFailed):
            await w.worker._handle_event(room_of(w), parsed(event("$m")))
        [record] = [r for r in caplog.records if "did not take" in r.getMessage()]
        assert record.getMessage() == "the core did not take message $m"
        assert "$m" not in w.worker._seen
        assert w.thread_of_event.get("$m") is None
        await w.worker._handle_event(room_of(w), parsed(event("$m")))
        assert w.core.ids() == ["$m"]


async def test_edits_and_other_events_are_remembered_and_not_handed_over(tmp_path: Path) -> None:
    edit = {
        "msgtype": "m.text",
        "body": "* fixed",
        "m.new_content": {"msgtype": "m.text", "body": "fixed"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$a"},
    }
    async with world(tmp_path) as w:
        await w.worker._handle_event(room_of(w), parsed(event("$edit", edit)))
        await w.worker._handle_event(room_of(w), parsed(reaction("$like", "$a", "👍")))
        assert w.core.messages == []
        assert "$edit" in w.worker._seen
        assert "$like" in w.worker._seen


# -- access ------------------------------------------------------------------------------------


async def test_someone_not_allowed_is_told_once_in_their_element_thread(tmp_path: Path) -> None:
    in_thread = {
        "msgtype": "m.text",
        "body": "let me in",
        "m.relates_to": {"rel_type": "m.thread", "event_id": "$root"},
    }
    async with world(tmp_path, token="s1") as w:
        await w.run_script(
            batch("s2", [event("$x", in_thread, sender=MALLORY), event("$y", sender=MALLORY)])
        )
        assert w.core.messages == []
        assert w.outbox.notices == [
            (
                ROOM,
                "Mallory: you are not allowed to use this agent, so your messages do not reach it.",
                "$root",
            )
        ]
        assert "$x" in w.worker._seen
        assert "$y" in w.worker._seen


async def test_the_notice_names_a_user_without_a_display_name_by_id(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        room = room_of(w)
        room.add_member("@nameless:example.org", None, None)
        await w.worker._handle_event(room, parsed(event("$n", sender="@nameless:example.org")))
        await w.settle()
        [(_, text, root)] = w.outbox.notices
        assert text.startswith("@nameless:example.org: you are not allowed")
        assert root == ""


async def test_allowed_places_limit_where_allowed_users_are_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path, users=(ALICE,), places=(ROOM,)) as w:
        with caplog.at_level(logging.INFO, "bridge.chat.matrix.sync"):
            await w.worker._handle_event(room_of(w, OTHER_ROOM), parsed(event("$elsewhere")))
        assert f"ignoring a message from {ALICE} in {OTHER_ROOM} (not allowed)" in caplog.messages
        await w.worker._handle_event(room_of(w), parsed(event("$here")))
        await w.settle()
        assert w.core.ids() == ["$here"]
        assert [room for room, _, _ in w.outbox.notices] == [OTHER_ROOM]


# -- 🛑 and ✅ reactions ----------------------------------------------------------------------


async def test_a_stop_reaction_stops_the_thread_of_the_message_it_marks(tmp_path: Path) -> None:
    async with world(tmp_path, token="s1") as w:
        await w.run_script(batch("s2", [event("$m"), reaction("$stop", "$m", "🛑️")]))
        [message] = w.core.messages
        assert w.core.stops == [(message.thread, Author(id=ALICE, display_name="Alice"))]
        assert "$stop" in w.worker._seen


async def test_a_stop_reaction_after_a_restart_asks_the_homeserver_for_the_thread(
    tmp_path: Path,
) -> None:
    root_message = event(
        "$earlier",
        {
            "msgtype": "m.text",
            "body": "from the last run",
            "m.relates_to": {"rel_type": "m.thread", "event_id": "$root"},
        },
    )
    async with world(tmp_path) as w:
        w.client.events["$earlier"] = RoomGetEventResponse.from_dict(root_message)
        await w.worker._handle_event(room_of(w), parsed(reaction("$stop", "$earlier", "🛑")))
        await w.settle()
        assert w.core.stops == [
            (
                ThreadRef(platform="matrix", channel=ROOM, thread="$root"),
                Author(id=ALICE, display_name="Alice"),
            )
        ]


async def test_a_stop_reaction_on_an_unknown_message_stops_nothing(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.client.events["$gone"] = OSError("unreachable")
        await w.worker._handle_event(room_of(w), parsed(reaction("$s1", "$gone", "🛑")))
        await w.worker._handle_event(room_of(w), parsed(reaction("$s2", "$never", "🛑")))
        await w.settle()
        assert w.core.stops == []
        assert {"$s1", "$s2"} <= set(w.worker._seen)


async def test_a_stop_reaction_by_someone_not_allowed_stops_nothing(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.thread_of_event.put("$m", ThreadRef(platform="matrix", channel=ROOM))
        await w.worker._handle_event(
            room_of(w), parsed(reaction("$stop", "$m", "🛑", sender=MALLORY))
        )
        await w.settle()
        assert w.core.stops == []
        assert "$stop" in w.worker._seen
        assert w.outbox.notices == []


async def test_a_stop_that_fails_in_the_core_does_not_stop_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path) as w:
        w.core.fail_stop = True
        thread = ThreadRef(platform="matrix", channel=ROOM)
        w.thread_of_event.put("$m", thread)
        await w.worker._handle_event(room_of(w), parsed(reaction("$stop", "$m", "🛑")))
        await w.settle()
        assert f"stopping the turn of {thread.key} failed" in caplog.messages


async def test_a_stop_reaction_on_an_encrypted_message_reads_its_thread(tmp_path: Path) -> None:
    thread_message = event(
        "$secret",
        {
            "msgtype": "m.text",
            "body": "hidden",
            "m.relates_to": {"rel_type": "m.thread", "event_id": "$root"},
        },
    )
    async with world(tmp_path, olm=FakeOlm()) as w:
        w.client.events["$secret"] = RoomGetEventResponse.from_dict(encrypted("$secret"))
        w.client.decrypted["$secret"] = parsed(thread_message)
        w.thread_of_event.put("$known", ThreadRef(platform="matrix", channel=OTHER_ROOM))
        await w.worker._handle_event(room_of(w), parsed(reaction("$stop", "$secret", "🛑")))
        await w.settle()
        assert [thread for thread, _ in w.core.stops] == [
            ThreadRef(platform="matrix", channel=ROOM, thread="$root")
        ]


async def test_an_approval_reaction_is_decided_by_the_core(tmp_path: Path) -> None:
    thread = ThreadRef(platform="matrix", channel=ROOM, thread="$root")
    async with world(tmp_path) as w:
        w.thread_of_event.put("$request", thread)
        await w.worker._handle_event(room_of(w), parsed(reaction("$ok", "$request", "✅")))
        await w.settle()
        assert w.core.decisions == [
            (thread, "$request", ApprovalChoice.APPROVE, Author(id=ALICE, display_name="Alice"))
        ]
        assert w.outbox.notices == []
        assert "$ok" in w.worker._seen


async def test_an_approval_reaction_by_someone_not_allowed_is_told_it_changed_nothing(
    tmp_path: Path,
) -> None:
    thread = ThreadRef(platform="matrix", channel=ROOM, thread="$root")
    async with world(tmp_path) as w:
        w.thread_of_event.put("$request", thread)
        await w.worker._handle_event(
            room_of(w), parsed(reaction("$no", "$request", "❌", sender=MALLORY))
        )
        await w.settle()
        # The core is not asked: someone not allowed here may not answer.
        assert w.core.decisions == []
        assert w.outbox.notices == [
            (
                ROOM,
                "Mallory: you may not answer the agent's requests here, so your reaction "
                "changed nothing.",
                "$root",
            )
        ]
        # A reaction on a message whose thread nobody knows is left alone.
        await w.worker._handle_event(room_of(w), parsed(reaction("$lost", "$nowhere", "✅")))
        await w.settle()
        assert w.core.decisions == []
        assert len(w.outbox.notices) == 1


async def test_a_non_approver_is_told_and_a_failed_decision_is_only_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    thread = ThreadRef(platform="matrix", channel=ROOM)
    async with world(tmp_path) as w:
        w.thread_of_event.put("$request", thread)
        w.core.outcome = DecideOutcome.NOT_APPROVER
        await w.worker._handle_event(room_of(w), parsed(reaction("$a1", "$request", "♾️")))
        await w.settle()
        assert w.core.decisions[0][2] is ApprovalChoice.ALWAYS
        assert [text.split(":")[0] for _, text, _ in w.outbox.notices] == ["Alice"]
        w.core.outcome = DecideOutcome.UNKNOWN
        await w.worker._handle_event(room_of(w), parsed(reaction("$a2", "$request", "✅")))
        await w.settle()
        assert len(w.outbox.notices) == 1

        async def broken(*_: Any) -> DecideOutcome:
            raise RuntimeError("store gone")

        w.core.decide = broken  # type: ignore[method-assign]
        await w.worker._handle_event(room_of(w), parsed(reaction("$a3", "$request", "✅")))
        await w.settle()
        assert f"deciding a request in {thread.key} failed" in caplog.messages
        assert len(w.outbox.notices) == 1


# -- invites ---------------------------------------------------------------------------------


async def test_invites_from_allowed_users_are_accepted_and_others_rejected(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    invited = member("$inv", BOT, "invite", sender=ALICE)
    foreign = member("$inv2", BOT, "invite", sender=MALLORY)
    someone_else = member("$inv3", "@other:example.org", "invite", sender=ALICE)
    async with world(tmp_path, token="s1") as w:
        with caplog.at_level(logging.INFO, "bridge.chat.matrix.rooms"):
            await w.run_script(
                batch(
                    "s2",
                    invites={
                        "!a:example.org": [invited],
                        "!b:example.org": [foreign],
                        "!c:example.org": [someone_else],
                    },
                )
            )
        assert w.client.joined == ["!a:example.org"]
        assert w.client.left == ["!b:example.org", "!c:example.org"]
        assert f"joined !a:example.org (invited by {ALICE})" in caplog.messages
        assert (
            f"rejecting the invite to !b:example.org from {MALLORY} (not allowed)"
            in caplog.messages
        )


async def test_an_invite_to_a_room_not_allowed_is_rejected(tmp_path: Path) -> None:
    async with world(tmp_path, users=(ALICE,), places=(ROOM,)) as w:
        await w.worker.keeping.handle_invites(
            batch(
                "s2",
                invites={
                    ROOM: [member("$i1", BOT, "invite", sender=ALICE)],
                    "!x:example.org": [member("$i2", BOT, "invite", sender=ALICE)],
                },
            )
        )
        assert w.client.joined == [ROOM]
        assert w.client.left == ["!x:example.org"]


async def test_a_failed_rejection_or_join_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path) as w:
        w.client.leave_answer = RoomLeaveError.from_dict({"errcode": "M_FORBIDDEN", "error": "no"})
        await w.worker.keeping._reject("!b:example.org", MALLORY)
        assert "rejecting !b:example.org failed: RoomLeaveError: M_FORBIDDEN no" in caplog.messages
        caplog.clear()
        w.client.leave_answer = RoomLeaveResponse()
        await w.worker.keeping._reject("!b:example.org", MALLORY)
        assert "failed" not in caplog.text

        async def unreachable(room_id: str) -> Any:
            raise OSError("unreachable")

        w.client.room_leave = unreachable  # type: ignore[method-assign]
        w.client.join = unreachable  # type: ignore[method-assign]
        await w.worker.keeping._reject("!b:example.org", MALLORY)
        assert "rejecting !b:example.org failed: OSError" in caplog.messages
        await w.worker.keeping._join("!a:example.org", ALICE)
        assert "joining !a:example.org failed: OSError" in caplog.messages


# -- a newly joined room, a gap after a long absence -------------------------------------------


async def test_a_new_rooms_history_is_dropped_except_what_the_inviter_wrote_after_inviting(
    tmp_path: Path,
) -> None:
    timeline = [
        event("$before", ts=1),
        member("$invite", BOT, "invite", sender=ALICE, ts=2),
        event("$mallory", sender=MALLORY, ts=3),
        event("$lazy-dm", ts=4),
        member("$alice-again", ALICE, "join", sender=ALICE, ts=5),
        member("$join", BOT, "join", sender=BOT, ts=6),
        event("$after", ts=7),
    ]
    async with world(tmp_path, token="s1", users=(ALICE, MALLORY)) as w:
        await w.run_script(batch("s2", timeline))
        assert w.core.ids() == ["$lazy-dm", "$after"]


async def test_a_join_without_an_invite_in_view_drops_all_earlier_history(tmp_path: Path) -> None:
    timeline = [
        event("$before", ts=1),
        member("$join", BOT, "join", sender=BOT, ts=2),
        member(
            "$again",
            BOT,
            "join",
            sender=BOT,
            ts=3,
            unsigned={"prev_content": {"membership": "join"}},
        ),
        event("$after", ts=4),
    ]
    async with world(tmp_path, token="s1") as w:
        await w.run_script(batch("s2", timeline))
        # A join that was already a join (a profile change) is not the bot's join.
        assert w.core.ids() == ["$after"]


async def test_a_gap_is_filled_from_the_history_oldest_first_and_bounded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path, token="s1") as w:
        w.client.messages_pages = [
            RoomMessagesResponse.from_dict(
                {"chunk": [event("$g3", ts=30), event("$g2", ts=20)], "start": "p", "end": "p2"},
                ROOM,
            ),
            RoomMessagesResponse.from_dict(
                {"chunk": [event("$g1", ts=10), event("$g0", ts=5)], "start": "p2", "end": "p3"},
                ROOM,
            ),
        ]
        with caplog.at_level(logging.WARNING, "bridge.chat.matrix.rooms"):
            await w.run_script(batch("s2", [event("$now", ts=40)], limited=True, prev_batch="p"))
        # backfill_max = 3: two pages are fetched, no third, and the bridge says so.
        assert w.core.ids() == ["$g0", "$g1", "$g2", "$g3", "$now"]
        assert [
            (c["start"], c["end"], c["direction"].value, c["limit"])
            for c in w.client.messages_calls
        ] == [("p", "s1", "b", 100), ("p2", "s1", "b", 100)]
        assert f"more than 3 events missed in {ROOM}" in caplog.messages


async def test_a_gap_stops_at_the_end_of_the_history(tmp_path: Path) -> None:
    tuning = SyncTuning(backfill_max=500)
    async with world(tmp_path, token="s1", tuning=tuning) as w:
        w.client.messages_pages = [
            RoomMessagesResponse.from_dict(
                {"chunk": [event("$g2", ts=20)], "start": "p", "end": "p2"}, ROOM
            ),
            # The same token again: the history ends here.
            RoomMessagesResponse.from_dict(
                {"chunk": [event("$g1", ts=10)], "start": "p2", "end": "p2"}, ROOM
            ),
        ]
        events = await w.worker.keeping._backfill(ROOM, "p", "s1")
        assert [e.event_id for e in events] == ["$g1", "$g2"]
        assert len(w.client.messages_calls) == 2
        # An empty page ends it too; so does a failure.
        w.client.messages_pages = [
            RoomMessagesResponse.from_dict({"chunk": [], "start": "p", "end": "p9"}, ROOM)
        ]
        assert await w.worker.keeping._backfill(ROOM, "p", "s1") == []
        w.client.messages_pages = [OSError("unreachable")]
        assert await w.worker.keeping._backfill(ROOM, "p", "s1") == []


async def test_a_gap_keeps_only_what_came_after_the_bot_joined(tmp_path: Path) -> None:
    async with world(tmp_path, token="s1") as w:
        w.client.messages_pages = [
            RoomMessagesResponse.from_dict(
                {
                    "chunk": [event("$g2", ts=20), event("$g1", ts=10), encrypted("$e0")],
                    "start": "p",
                    "end": "p",
                },
                ROOM,
            ),
        ]
        await w.run_script(
            batch(
                "s2",
                [event("$now", ts=40)],
                limited=True,
                prev_batch="p",
                state=[member("$join", BOT, "join", sender=BOT, ts=20)],
            )
        )
        assert w.core.ids() == ["$g2", "$now"]


async def test_no_gap_is_filled_without_a_limited_timeline(tmp_path: Path) -> None:
    async with world(tmp_path, token="s1") as w:
        await w.run_script(batch("s2", [event("$now")], limited=False, prev_batch="p"))
        assert w.client.messages_calls == []
        assert w.core.ids() == ["$now"]


# -- encryption --------------------------------------------------------------------------------


async def test_without_encryption_a_room_is_told_once_why_it_cannot_be_read(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, token="s1", problem="python-olm is not installed") as w:
        await w.run_script(
            batch("s2", [encrypted("$e1"), encrypted("$e2"), encrypted("$m", sender=MALLORY)])
        )
        assert w.outbox.notices == [
            (
                ROOM,
                "🔒 I cannot read encrypted messages in this room: python-olm is not installed.",
                "",
            )
        ]
        assert w.core.messages == []


async def test_without_a_named_problem_the_notice_still_says_why(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        await w.settle()
        [(_, text, _)] = w.outbox.notices
        assert text.endswith("in this room: encryption is not available.")


async def test_an_encrypted_message_is_handed_over_once_its_key_arrives(tmp_path: Path) -> None:
    olm = FakeOlm()
    async with world(tmp_path, token="s1", olm=olm) as w:
        # A message of someone not allowed is not even asked for.
        await w.run_script(batch("s2", [encrypted("$e1"), encrypted("$x", sender=MALLORY)]))
        assert w.core.messages == []
        assert list(w.worker.decryption.waiting) == ["$e1"]
        # The key is asked of the device that encrypted the message.
        [(kind, method, path, data, info)] = w.client.sent
        assert kind.__name__ == "RoomKeyRequestResponse"
        assert method == "PUT"
        assert re.fullmatch(
            r"/_matrix/client/v3/sendToDevice/m\.room_key_request/[0-9a-f-]{36}"
            r"\?access_token=syt_bot_token",
            path,
        ), path
        request = next(iter(json.loads(data)["messages"][ALICE].values()))
        assert request["body"]["session_id"] == "sess"
        assert list(json.loads(data)["messages"][ALICE]) == ["ALICEDEV"]
        assert info == ("sess", "sess", ROOM, "m.megolm.v1.aes-sha2")
        # The key comes: the next sync hands the message over, as if it had come in clear.
        w.client.decrypted["$e1"] = parsed(event("$e1", {"msgtype": "m.text", "body": "clear"}))
        await w.client.feed(batch("s3", []))
        assert w.core.ids() == ["$e1"]
        assert w.core.messages[0].text == "clear"
        assert w.worker.decryption.waiting == {}
        assert w.outbox.notices == []


async def test_a_key_already_asked_for_is_not_asked_again(tmp_path: Path) -> None:
    olm = FakeOlm(outgoing_key_requests={"sess": object()})
    async with world(tmp_path, olm=olm) as w:
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        assert w.client.sent == []
        assert "$e1" in w.worker.decryption.waiting
        no_device = encrypted("$e2", session="other")
        del no_device["content"]["device_id"]
        await w.worker._handle_event(room_of(w), parsed(no_device))
        assert w.client.sent == []


async def test_a_decrypted_message_the_core_refuses_waits_for_the_next_batch(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, olm=FakeOlm()) as w:
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        w.client.decrypted["$e1"] = parsed(event("$e1"))
        w.core.refuse = 1
        with pytest.raises(SubmitFailed):
            await w.worker.retry_undecrypted()
        assert "$e1" in w.worker.decryption.waiting
        await w.worker.retry_undecrypted()
        assert w.core.ids() == ["$e1"]
        assert w.worker.decryption.waiting == {}


async def test_a_withheld_key_is_explained_in_the_senders_words(tmp_path: Path) -> None:
    withheld = {
        "type": "m.room_key.withheld",
        "sender": ALICE,
        "content": {
            "code": "m.unverified",
            "reason": "Device not verified",
            "session_id": "sess",
            "algorithm": "m.megolm.v1.aes-sha2",
            "room_id": ROOM,
            "sender_key": "curve",
        },
    }
    not_withheld = {
        "type": "m.something.else",
        "sender": ALICE,
        "content": {"session_id": "sess", "code": "m.blacklisted"},
    }
    no_session = {"type": "m.room_key.withheld", "sender": ALICE, "content": {"code": "m.x"}}
    async with world(tmp_path, token="s1", olm=FakeOlm()) as w:
        await w.run_script(
            batch("s2", [encrypted("$e1")]),
            batch("s3", [], to_device=[not_withheld, no_session]),
        )
        assert w.outbox.notices == []
        await w.client.feed(batch("s4", [], to_device=[withheld]))
        assert w.outbox.notices == [
            (
                ROOM,
                f"🔒 I could not decrypt a message from {ALICE}: their client withheld the key "
                "(it does not send keys to devices it has not verified: Device not verified).",
                "",
            )
        ]
        assert w.worker.decryption.waiting == {}


async def test_a_key_that_never_comes_is_reported_after_the_grace_time(tmp_path: Path) -> None:
    tuning = SyncTuning(decrypt_grace=0.0)
    async with world(tmp_path, olm=FakeOlm(), tuning=tuning) as w:
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        w.worker.decryption.waiting["$e1"].since -= 1
        await w.worker.retry_undecrypted()
        await w.settle()
        # Told once that the bot keeps waiting (the key may still come, for a day)...
        [(room, text, _)] = w.outbox.notices
        assert room == ROOM
        assert text.startswith(f"🔒 I could not decrypt a message from {ALICE} yet: its key has")
        assert "$e1" in w.worker.decryption.waiting
        await w.worker.retry_undecrypted()
        await w.settle()
        assert len(w.outbox.notices) == 1
        # ... and, once the day is over, that the message stays unread.
        w.worker.decryption.waiting["$e1"].since -= tuning.key_wait
        await w.worker.retry_undecrypted()
        await w.settle()
        assert len(w.outbox.notices) == 2
        assert "will stay unread" in w.outbox.notices[1][1]
        assert w.worker.decryption.waiting == {}


async def test_a_key_still_in_its_grace_time_is_waited_for(tmp_path: Path) -> None:
    async with world(tmp_path, olm=FakeOlm()) as w:
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        await w.worker.retry_undecrypted()
        await w.settle()
        assert w.outbox.notices == []
        assert "$e1" in w.worker.decryption.waiting
        # A room the bot left meanwhile is told at once (it will never be read).
        del w.client.rooms[ROOM]
        await w.worker.retry_undecrypted()
        await w.settle()
        assert len(w.outbox.notices) == 1
        assert w.worker.decryption.waiting == {}


async def test_without_olm_nothing_is_decrypted(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        w.client.decrypted["$e1"] = parsed(event("$e1"))
        megolm = parsed(encrypted("$e1"))
        assert isinstance(megolm, MegolmEvent)
        megolm.room_id = ROOM
        assert w.worker.decryption.try_decrypt(megolm) is None
        w.client.olm = cast(Any, FakeOlm())
        assert w.worker.decryption.try_decrypt(megolm) is w.client.decrypted["$e1"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"code": "m.blacklisted"}, "it blocked the bot's device"),
        (
            {"code": "m.unauthorised", "reason": "  "},
            "the bot was not allowed to read that message",
        ),
        ({"code": "m.unavailable", "reason": " gone "}, "it no longer has the key: gone"),
        ({"code": "m.no_olm"}, "it could not open a secure channel to the bot"),
        ({"code": "m.custom", "reason": " their words "}, "their words"),
        ({"code": "m.custom"}, "m.custom"),
        ({}, "no reason given"),
        ({"reason": 7}, "no reason given"),
    ],
)
def test_withheld_reasons_in_words(content: dict[str, Any], expected: str) -> None:
    assert withheld_reason(content) == expected


async def test_key_maintenance_runs_between_syncs(tmp_path: Path) -> None:
    calls: list[str] = []
    olm = FakeOlm(
        outgoing_to_device_messages=[object()],
        should_upload_keys=True,
        should_query_keys=True,
        wedged_devices=[object()],
    )
    alice_new = FakeDevice(ALICE, "NEW")
    alice_known = FakeDevice(ALICE, "KNOWN")
    olm.trusted.add("KNOWN")
    olm.device_store.devices = {
        ALICE: [alice_new, alice_known],
        MALLORY: [FakeDevice(MALLORY, "M")],
    }
    async with world(tmp_path, olm=olm) as w:

        async def record(name: str, *args: Any) -> None:
            calls.append(name)

        client: Any = w.client
        client.send_to_device_messages = lambda: record("to-device")
        client.keys_upload = lambda: record("upload")
        client.keys_query = lambda: record("query")
        client.keys_claim = lambda users: record(f"claim {sorted(users)}")
        client.get_users_for_key_claiming = lambda: {ALICE: ["NEW"]}
        await w.worker.decryption.housekeeping()
        assert calls == ["to-device", "upload", "query", f"claim {[ALICE]}"]
        # No device is trusted wholesale any more (issue 31): device trust decides per event
        # and per room-key share (test_device_trust.py).
        assert w.client.verified == []

        async def fails() -> None:
            raise OSError("unreachable")

        calls.clear()
        client.send_to_device_messages = fails
        await w.worker.decryption.housekeeping()
        assert calls == []


async def test_key_maintenance_without_olm_does_nothing(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.worker.decryption.housekeeping()
        assert w.client.verified == []


async def test_a_room_joined_a_moment_ago_is_waited_for(tmp_path: Path) -> None:
    client = ScriptedClient()
    rooms = RoomDirectory(client, wait=5)
    assert await rooms.known_room(ROOM)
    result: list[bool] = []

    async def look() -> None:
        result.append(await rooms.known_room("!new:example.org"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(look)
        await anyio.wait_all_tasks_blocked()
        client.rooms["!new:example.org"] = MatrixRoom("!new:example.org", BOT)
        rooms.synced()
    assert result == [True]
    assert not await RoomDirectory(client, wait=0).known_room("!never:example.org")


async def test_a_key_request_that_cannot_be_sent_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path, olm=FakeOlm()) as w:

        async def unreachable(*_: Any) -> Any:
            raise OSError("unreachable")

        w.client._send = unreachable  # type: ignore[method-assign]
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        assert "asking for a room key failed: OSError" in caplog.messages
        assert "$e1" in w.worker.decryption.waiting


async def test_a_gap_of_exactly_the_bound_is_fetched_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path) as w:
        w.client.messages_pages = [
            RoomMessagesResponse.from_dict(
                {"chunk": [event("$g3", ts=30), event("$g2", ts=20)], "start": "p", "end": "p2"},
                ROOM,
            ),
            RoomMessagesResponse.from_dict(
                {"chunk": [event("$g1", ts=10)], "start": "p2", "end": "p3"}, ROOM
            ),
            RoomMessagesResponse.from_dict(
                {"chunk": [event("$g0", ts=5)], "start": "p3", "end": "p4"}, ROOM
            ),
        ]
        with caplog.at_level(logging.WARNING, "bridge.chat.matrix.rooms"):
            events = await w.worker.keeping._backfill(ROOM, "p", "s1")
        # backfill_max = 3 events reached: no third page.
        assert [e.event_id for e in events] == ["$g1", "$g2", "$g3"]
        assert len(w.client.messages_calls) == 2
        assert f"more than 3 events missed in {ROOM}" in caplog.messages


async def test_a_failed_gap_fill_is_logged_with_its_room(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with world(tmp_path) as w:
        w.client.messages_pages = [OSError("unreachable")]
        assert await w.worker.keeping._backfill(ROOM, "p", "s1") == []
        assert f"filling the gap in {ROOM} failed: OSError" in caplog.messages


async def test_an_approval_reaction_after_a_restart_asks_the_homeserver_for_the_thread(
    tmp_path: Path,
) -> None:
    request = event(
        "$request",
        {
            "msgtype": "m.text",
            "body": "May I run ls?",
            "m.relates_to": {"rel_type": "m.thread", "event_id": "$root"},
        },
        sender=BOT,
    )
    async with world(tmp_path) as w:
        w.client.events["$request"] = RoomGetEventResponse.from_dict(request)
        await w.worker._handle_event(room_of(w), parsed(reaction("$ok", "$request", "✅")))
        await w.settle()
        [(thread, handle, choice, _)] = w.core.decisions
        assert thread == ThreadRef(platform="matrix", channel=ROOM, thread="$root")
        assert (handle, choice) == ("$request", ApprovalChoice.APPROVE)


async def test_an_encrypted_message_seen_again_is_not_waited_for_anew(tmp_path: Path) -> None:
    async with world(tmp_path, olm=FakeOlm()) as w:
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        since = w.worker.decryption.waiting["$e1"].since
        # The same event again (a gap filled from the history overlaps the timeline).
        await w.worker._handle_event(room_of(w), parsed(encrypted("$e1")))
        assert w.worker.decryption.waiting["$e1"].since == since
        assert len(w.client.sent) == 1

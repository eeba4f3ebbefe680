"""The Matrix adapter against a real Synapse."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from nio import (
    ReactionEvent,
    RedactionEvent,
    RoomMemberEvent,
    RoomMessageNotice,
    RoomMessageText,
)
from nio.crypto.attachments import decrypt_attachment
from nio.events import Event

from bridge.chat.matrix import MatrixAdapter
from bridge.chat.matrix.sync import SyncTuning
from bridge.core.events import AttachmentError, Reaction, ToolActivity, TurnOutcome
from tests.doubles import fetch_into, outgoing

from .conftest import (
    FAST_TUNING,
    Human,
    RecordingInbound,
    bot_config,
    matrix_world,
    running_adapter,
)
from .synapse import Synapse

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]

# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def _content(event: Event) -> dict[str, Any]:
    content = event.source.get("content", {})
    assert isinstance(content, dict)
    return content


def _is_edit_of(event_id: str) -> Callable[[Event], bool]:
    def match(event: Event) -> bool:
        relation = _content(event).get("m.relates_to", {})
        return relation.get("rel_type") == "m.replace" and relation.get("event_id") == event_id

    return match


def _from(sender: str, kind: type[Event] = RoomMessageText) -> Callable[[Event], bool]:
    def match(event: Event) -> bool:
        return isinstance(event, kind) and event.sender == sender

    return match


def _reaction(key: str) -> Callable[[Event], bool]:
    def match(event: Event) -> bool:
        return isinstance(event, ReactionEvent) and event.key == key

    return match


async def test_invite_from_allowed_user_is_joined(synapse: Synapse, tmp_path: Path) -> None:
    # The world fixture itself waits for the join that follows the allowed user's invite.
    async with matrix_world(synapse, tmp_path) as world:
        assert world.bot_user.user_id in world.human.room(world.room_id).users


async def test_invite_from_stranger_is_rejected(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        stranger = synapse.register("mallory")
        async with Human.connect(synapse, stranger) as mallory:
            room_id = await mallory.create_room([world.bot_user.user_id])
            left = await mallory.wait_event(
                room_id,
                lambda e: (
                    isinstance(e, RoomMemberEvent)
                    and e.state_key == world.bot_user.user_id
                    and e.membership == "leave"
                ),
            )
            assert left.sender == world.bot_user.user_id


async def test_messages_from_before_the_join_start_no_turn(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        # The bot is running; a new room gets some history before the bot is invited.
        alice = world.human
        room_id = await alice.create_room([])
        for n in range(3):
            await alice.say(room_id, f"history {n}")
        await alice.client.room_invite(room_id, world.bot_user.user_id)
        await alice.wait_joined(room_id, world.bot_user.user_id)
        await alice.say(room_id, "after the join")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
        await alice.say(world.room_id, "marker")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 2)
        assert world.inbound.texts() == ["after the join", "marker"]


async def test_message_is_submitted_with_room_thread_and_author(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        event_id = await world.human.say(world.room_id, "hello agent")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
        [message] = world.inbound.messages
        assert message.thread == world.thread()
        assert message.event_id == message.message_id == event_id
        assert message.text == "hello agent"
        assert message.author.id == world.human.user_id
        assert message.author.display_name == "Alice Liddell"
        assert message.sent_at is not None


async def test_strangers_and_own_messages_start_no_turn(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        stranger = synapse.register("eve")
        await world.adapter.post_message(world.thread(), "the bot's own words")
        async with Human.connect(synapse, stranger) as eve:
            # Alice lets Eve in; Eve is in the room but not allowed to use the bot.
            await world.human.client.room_invite(world.room_id, stranger.user_id)
            await eve.join(world.room_id)
            await eve.say(world.room_id, "let me in")
            await eve.say(world.room_id, "please")
            notice = await eve.wait_event(
                world.room_id, _from(world.bot_user.user_id, RoomMessageNotice)
            )
            assert "not allowed" in notice.body
        await world.human.say(world.room_id, "from alice")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
        await world.human.say(world.room_id, "again from alice")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 2)
        assert world.inbound.texts() == ["from alice", "again from alice"]
        # One notice per user and run, however often they write.
        await world.human.wait_event(world.room_id, lambda e: e.event_id == notice.event_id)
        notices = [
            e
            for e in world.human.timeline[world.room_id]
            if _from(world.bot_user.user_id, RoomMessageNotice)(e)
        ]
        assert len(notices) == 1


async def test_threaded_message_gets_its_own_thread(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path, threads=True) as world:
        root = await world.human.say(world.room_id, "root message")
        reply = await world.human.say(
            world.room_id,
            "in the thread",
            **{
                "m.relates_to": {
                    "rel_type": "m.thread",
                    "event_id": root,
                    "is_falling_back": True,
                    "m.in_reply_to": {"event_id": root},
                }
            },
        )
        await world.inbound.wait_for(lambda i: len(i.messages) >= 2)
        first, second = world.inbound.messages
        assert first.thread == world.thread()
        assert second.thread == world.thread(root)
        assert second.event_id == reply

        # The bot's answer goes into that thread.
        async with world.adapter.open_reply(second.thread, second.message_id) as live:
            await live.append("threaded answer")
            await live.finish(TurnOutcome(final_text="threaded answer"))
            answer = await world.human.wait_event(world.room_id, _from(world.bot_user.user_id))
            relation = _content(answer)["m.relates_to"]
            assert relation["rel_type"] == "m.thread"
            assert relation["event_id"] == root
            # The thread's history: its root and its replies, oldest first.
            entries = await world.adapter.history(second.thread, 10)
            assert [e.text for e in entries] == ["root message", "in the thread", "threaded answer"]


async def test_live_reply_edits_end_in_the_full_answer(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        question = await world.human.say(world.room_id, "question")
        async with world.adapter.open_reply(world.thread(), question) as live:
            chunks = [f"part {n} " for n in range(30)]
            for chunk in chunks:
                await live.append(chunk)
                await anyio.sleep(0.02)
            await live.tool(ToolActivity(name="run_command", summary="ls -la", state="ACTIVE"))
            await live.finish(TurnOutcome(final_text="**Final** answer: " + "".join(chunks)))

            first = await world.human.wait_event(world.room_id, _from(world.bot_user.user_id))
            # A reply to the question, rendered as HTML.
            assert _content(first)["m.relates_to"]["m.in_reply_to"]["event_id"] == question
            final_text = "**Final** answer: " + "".join(chunks).strip()
            last = await world.human.wait_event(
                world.room_id,
                lambda e: (
                    _is_edit_of(first.event_id)(e)
                    and _content(e)["m.new_content"]["body"] == final_text
                ),
            )
            new = _content(last)["m.new_content"]
            assert new["format"] == "org.matrix.custom.html"
            assert "<strong>Final</strong>" in new["formatted_body"]
            edits = [
                e for e in world.human.timeline[world.room_id] if _is_edit_of(first.event_id)(e)
            ]
            # Coalesced: far fewer edits than appends, the final one last.
            assert 1 <= len(edits) < len(chunks)
            assert edits[-1].event_id == last.event_id


async def test_long_answer_is_split(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        paragraphs = [f"Paragraph {n}: " + "lorem ipsum " * 79 + "dolor." for n in range(40)]
        answer = "\n\n".join(paragraphs)
        assert len(answer.encode()) > 30_000
        async with world.adapter.open_reply(world.thread(), None) as live:
            await live.finish(TurnOutcome(final_text=answer))
            bot = world.bot_user.user_id
            # Wait until the messages hold the whole answer, in order.
            with anyio.fail_after(30):
                while True:
                    messages = [
                        e
                        for e in world.human.timeline.get(world.room_id, [])
                        if _from(bot)(e) and "m.relates_to" not in _content(e)
                    ]
                    joined = "\n\n".join(m.body for m in messages)
                    if joined == answer:
                        break
                    await world.human.sync()
            assert len(messages) >= 3
            for message in messages:
                assert len(json.dumps(message.source).encode()) < 65_536


async def test_react_puts_and_replaces_reactions(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        message = await world.human.say(world.room_id, "react to me")
        await world.adapter.react(world.thread(), message, Reaction.QUEUED)
        queued = await world.human.wait_event(
            world.room_id, lambda e: isinstance(e, ReactionEvent) and e.key == "⏳"
        )
        assert isinstance(queued, ReactionEvent)
        assert queued.reacts_to == message
        # Seen mid-turn: the bot's read receipt, which is no event in the room (the account's
        # message rate is shared by every room).
        await world.adapter.react(world.thread(), message, Reaction.INJECTED)
        await world.human.wait_read_by(world.room_id, message, world.bot_user.user_id)
        # The earlier status goes away.
        await world.human.wait_event(
            world.room_id,
            lambda e: isinstance(e, RedactionEvent) and e.redacts == queued.event_id,
        )
        await world.adapter.react(world.thread(), message, Reaction.FAILED)
        await world.human.wait_event(world.room_id, _reaction("⚠️"))
        bot_events = [
            e
            for e in world.human.timeline[world.room_id]
            if e.sender == world.bot_user.user_id and not isinstance(e, RoomMemberEvent)
        ]
        # Three status changes in three events: ⏳, its redaction, ⚠️.
        assert len(bot_events) == 3


async def test_stop_reaction_on_live_reply_stops_the_turn(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        async with world.adapter.open_reply(world.thread(), None) as live:
            await live.append("working on it")
            reply = await world.human.wait_event(world.room_id, _from(world.bot_user.user_id))
            await world.human.send(
                world.room_id,
                {
                    "m.relates_to": {
                        "rel_type": "m.annotation",
                        "event_id": reply.event_id,
                        "key": "🛑",
                    }
                },
                kind="m.reaction",
            )
            await world.inbound.wait_for(lambda i: len(i.stops) >= 1)
            thread, by = world.inbound.stops[0]
            assert thread == world.thread()
            assert by.id == world.human.user_id
            await live.finish(TurnOutcome(final_text="", interrupted=True))
            await world.human.wait_event(
                world.room_id,
                lambda e: (
                    _is_edit_of(reply.event_id)(e)
                    and "Interrupted" in _content(e)["m.new_content"]["body"]
                ),
            )


async def test_image_is_an_attachment_and_fetched(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        upload, _ = await world.human.client.upload(
            lambda *_: PNG, content_type="image/png", filename="dot.png", filesize=len(PNG)
        )
        await world.human.send(
            world.room_id,
            {
                "msgtype": "m.image",
                "body": "dot.png",
                "url": upload.content_uri,
                "info": {"mimetype": "image/png", "size": len(PNG)},
            },
        )
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
        [ref] = world.inbound.messages[0].attachments
        assert ref.name == "dot.png"
        assert ref.is_image
        assert ref.size == len(PNG)
        dest = tmp_path / "saved" / "dot.png"
        size = await fetch_into(world.adapter, ref, dest, max_bytes=10_000)
        assert size == len(PNG)
        assert dest.read_bytes() == PNG
        with pytest.raises(AttachmentError, match="too large"):
            await fetch_into(world.adapter, ref, tmp_path / "small", max_bytes=10)
        # A size the sender understated is caught while downloading.
        lying = ref.model_copy(update={"size": 1})
        with pytest.raises(AttachmentError, match="too large"):
            await fetch_into(world.adapter, lying, tmp_path / "small", max_bytes=10)


async def test_post_file_lands_in_the_room(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        path = tmp_path / "report.txt"
        path.write_text("the report\n")
        await world.adapter.post_file(world.thread(), outgoing(path), "Weekly report")
        event = await world.human.wait_event(
            world.room_id,
            lambda e: e.sender == world.bot_user.user_id and _content(e).get("msgtype") == "m.file",
        )
        content = _content(event)
        assert content["body"] == "Weekly report"
        assert content["filename"] == "report.txt"
        downloaded = await world.human.client.download(content["url"])
        assert downloaded.body == b"the report\n"


async def test_history_is_oldest_first_with_edits(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        await world.human.say(world.room_id, "first")
        async with world.adapter.open_reply(world.thread(), None) as live:
            await live.append("draft")
            await live.finish(TurnOutcome(final_text="final answer"))
            await world.human.say(world.room_id, "second")
            await world.inbound.wait_for(lambda i: len(i.messages) >= 2)
            entries = await world.adapter.history(world.thread(), 10)
            assert [e.text for e in entries] == ["first", "final answer", "second"]
            assert entries[0].author.display_name == "Alice Liddell"
            assert all(e.listed for e in entries), "an allowed person and the bot are listed"
            assert [e.text for e in await world.adapter.history(world.thread(), 2)] == [
                "final answer",
                "second",
            ]


async def test_restart_submits_missed_messages_once(synapse: Synapse, tmp_path: Path) -> None:
    # A short timeline makes the missed messages overflow one sync: the gap is filled.
    tuning = dataclasses.replace(FAST_TUNING, sync=SyncTuning(timeout_ms=5_000, timeline_limit=3))
    async with matrix_world(synapse, tmp_path, tuning=tuning) as world:
        await world.human.say(world.room_id, "before")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
    login = world.data_dir / "matrix" / "login.json"
    device_id = json.loads(login.read_text())["device_id"]
    # The adapter is stopped now; the human keeps talking.
    async with Human.connect(synapse, world.human.user) as alice:
        for n in range(6):
            await alice.say(world.room_id, f"while down {n}")
        config = bot_config(synapse, world.bot_user, allowed_users=[alice.user_id])
        adapter = MatrixAdapter(config, data_dir=world.data_dir, tuning=tuning)
        inbound = RecordingInbound()
        async with running_adapter(adapter, inbound):
            await inbound.wait_for(lambda i: len(i.messages) >= 6)
            await alice.say(world.room_id, "after")
            await inbound.wait_for(lambda i: len(i.messages) >= 7)
        assert inbound.texts() == [f"while down {n}" for n in range(6)] + ["after"]
    # The second run reused the stored login: same device, same encryption keys.
    assert json.loads(login.read_text())["device_id"] == device_id
    assert stat.S_IMODE(os.stat(login).st_mode) == 0o600
    assert world.bot_user.password not in login.read_text()


async def test_refused_submission_is_delivered_again(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path) as world:
        world.inbound.fail_next = 1
        await world.human.say(world.room_id, "try again")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
        assert world.inbound.texts() == ["try again"]


async def test_encrypted_room_end_to_end(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path, encrypted=True) as world:
        alice = world.human
        assert alice.room(world.room_id).encrypted
        await alice.say(world.room_id, "secret question")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
        [message] = world.inbound.messages
        assert message.text == "secret question"

        # An encrypted image reaches the agent decrypted.
        upload, keys = await alice.client.upload(
            lambda *_: PNG,
            content_type="image/png",
            filename="dot.png",
            encrypt=True,
            filesize=len(PNG),
        )
        assert keys is not None
        await alice.send(
            world.room_id,
            {
                "msgtype": "m.image",
                "body": "dot.png",
                "file": {"url": upload.content_uri, **keys},
                "info": {"mimetype": "image/png", "size": len(PNG)},
            },
        )
        await world.inbound.wait_for(lambda i: len(i.messages) >= 2)
        [ref] = world.inbound.messages[1].attachments
        dest = tmp_path / "dot.png"
        assert await fetch_into(world.adapter, ref, dest, 10_000) == len(PNG)
        assert dest.read_bytes() == PNG

        # A file the agent posts is encrypted too, and Alice can open it.
        report = tmp_path / "report.txt"
        report.write_text("classified\n")
        await world.adapter.post_file(world.thread(), outgoing(report), None)
        posted = await alice.wait_event(
            world.room_id,
            lambda e: e.sender == world.bot_user.user_id and _content(e).get("msgtype") == "m.file",
        )
        file_info = _content(posted)["file"]
        assert "url" not in _content(posted)
        downloaded = await alice.client.download(file_info["url"])
        plain = decrypt_attachment(
            downloaded.body, file_info["key"]["k"], file_info["hashes"]["sha256"], file_info["iv"]
        )
        assert plain == b"classified\n"

        # The bot's answer is encrypted and readable on Alice's side.
        async with world.adapter.open_reply(world.thread(), message.message_id) as live:
            await live.append("secret ")
            answer = await alice.wait_event(world.room_id, _from(world.bot_user.user_id))
            assert answer.decrypted
            assert _content(answer)["body"] == "secret"
            await live.finish(TurnOutcome(final_text="secret answer"))
            await alice.wait_event(
                world.room_id,
                lambda e: (
                    e.decrypted
                    and _is_edit_of(answer.event_id)(e)
                    and _content(e)["m.new_content"]["body"] == "secret answer"
                ),
            )


async def test_encrypted_room_without_encryption_says_so(synapse: Synapse, tmp_path: Path) -> None:
    async with matrix_world(synapse, tmp_path, encrypted=True, bot_encryption=False) as world:
        await world.human.say(world.room_id, "can you read this?")
        notice = await world.human.wait_event(
            world.room_id, _from(world.bot_user.user_id, RoomMessageNotice)
        )
        assert "cannot read encrypted messages" in notice.body
        assert "switched off" in notice.body
        assert world.inbound.messages == []


@pytest.mark.slow
async def test_burst_with_default_rate_limits_all_lands(
    synapse_default_limits: Synapse, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    synapse = synapse_default_limits
    caplog.set_level(logging.INFO, logger="bridge.chat.matrix.ratelimit")
    async with matrix_world(synapse, tmp_path) as world:
        # Synapse's default allows a burst of 10 messages, then one every 5 s.
        count = 12
        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(world.adapter.post_message, world.thread(), f"burst {n}")
        bot = world.bot_user.user_id
        with anyio.fail_after(30):
            while True:
                bodies = [
                    e.body for e in world.human.timeline.get(world.room_id, []) if _from(bot)(e)
                ]
                if len(bodies) >= count:
                    break
                await world.human.sync()
        assert sorted(bodies) == sorted(f"burst {n}" for n in range(count))
        assert any("rate limited" in r.getMessage() for r in caplog.records)

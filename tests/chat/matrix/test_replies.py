"""The bot's replies as an Element user sees them: whole, notifying, in the right thread."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.chat.matrix import MatrixTuning
from bridge.chat.matrix.ratelimit import RetryPolicy
from bridge.chat.matrix.reply import ReplyTuning
from bridge.chat.matrix.sync import SyncTuning
from bridge.core.events import Author, TurnOutcome
from tests.doubles import outgoing

from .conftest import Human, MatrixWorld, matrix_world
from .replies import content, is_edit, shown_messages, shown_text, squeezed
from .synapse import Synapse

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]

LONG_ANSWER = "\n\n".join(
    f"## Раздел {n}\n\nДлинный ответ на русском языке, с **выделением** и `кодом` 🎉. "
    f"长的中文回答，包含表情符号 🚀 和更多文字。第{n}段。 " * 12
    for n in range(40)
)


async def _wait_shown(human: Human, room_id: str, sender: str, expected: str, within: float) -> str:
    with anyio.fail_after(within):
        while True:
            text = shown_text(human.timeline.get(room_id, []), sender)
            if squeezed(text) == squeezed(expected):
                return text
            await human.sync()


async def test_long_non_ascii_answer_in_an_encrypted_room_arrives_whole(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path, encrypted=True) as world:
        question = await world.human.say(world.room_id, "tell me everything")
        await world.inbound.wait_for(lambda i: len(i.messages) >= 1)
        async with world.adapter.open_reply(world.thread(), question) as live:
            for start in range(0, len(LONG_ANSWER), 2_000):
                await live.append(LONG_ANSWER[start : start + 2_000])
                await anyio.sleep(0.05)
            await live.finish(TurnOutcome(final_text=LONG_ANSWER))
        bot = world.bot_user.user_id
        await _wait_shown(world.human, world.room_id, bot, LONG_ANSWER, within=120)
        events = world.human.timeline[world.room_id]
        assert all(e.decrypted for e in events if e.sender == bot and content(e).get("body"))


def _world_mentions(world: MatrixWorld) -> list[tuple[str, dict[str, Any]]]:
    return shown_messages(world.human.timeline[world.room_id], world.bot_user.user_id)


async def test_the_answer_mentions_the_person_it_answers(synapse: Synapse, tmp_path: Path) -> None:
    tuning = MatrixTuning(
        reply=ReplyTuning(edit_interval=0.2),
        sync=SyncTuning(timeout_ms=5_000),
    )
    async with matrix_world(synapse, tmp_path, tuning=tuning) as world:
        alice = world.human
        question = await alice.say(world.room_id, "a long answer please")
        author = Author(id=alice.user_id, display_name="Alice Liddell")
        answer = " ".join(f"word{n}" for n in range(6_000))
        bot = world.bot_user.user_id
        async with world.adapter.open_reply(world.thread(), question, author) as live:
            await live.append(answer[:100])
            await alice.wait_event(
                world.room_id, lambda e: e.sender == bot and "body" in content(e)
            )
            await live.finish(TurnOutcome(final_text=answer))
        await world.adapter.post_message(world.thread(), "a note from the agent")
        await _wait_shown(alice, world.room_id, bot, answer + "a note from the agent", within=60)
        events = [e for e in alice.timeline[world.room_id] if e.sender == bot]
        originals = [e for e in events if content(e).get("body") and not is_edit(e)]
        assert len(originals) >= 3
        first, *rest = originals
        assert content(first)["m.mentions"] == {"user_ids": [alice.user_id]}
        for event in rest:
            assert content(event)["m.mentions"] == {}
        edits = [e for e in events if is_edit(e)]
        assert edits
        for edit in edits:
            # The edit notifies nobody again; the new content keeps the message's mentions.
            assert content(edit)["m.mentions"] == {}
            target = content(edit)["m.relates_to"]["event_id"]
            expected = {"user_ids": [alice.user_id]} if target == first.event_id else {}
            assert content(edit)["m.new_content"]["m.mentions"] == expected


def _in_thread(root: str) -> dict[str, Any]:
    return {
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": root},
        }
    }


async def test_without_threads_every_piece_stays_in_the_element_thread(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path, threads=False) as world:
        alice = world.human
        root = await alice.say(world.room_id, "a thread root")
        asked = await alice.say(world.room_id, "asked inside the thread", **_in_thread(root))
        await world.inbound.wait_for(lambda i: len(i.messages) >= 2)
        message = world.inbound.messages[1]
        # Rooms are the conversations: the thread is not one of its own.
        assert message.thread == world.thread()
        answer = " ".join(f"word{n}" for n in range(6_000))
        async with world.adapter.open_reply(message.thread, asked) as live:
            await live.append(answer[:100])
            await live.finish(TurnOutcome(final_text=answer))
        await world.adapter.post_message(message.thread, "a progress note")
        report = tmp_path / "report.txt"
        report.write_text("numbers\n")
        await world.adapter.post_file(message.thread, outgoing(report), None)
        bot = world.bot_user.user_id
        with anyio.fail_after(60):
            while True:
                shown = shown_messages(alice.timeline.get(world.room_id, []), bot)
                if any(c.get("msgtype") == "m.file" for _, c in shown):
                    break
                await alice.sync()
        originals = [e for e in alice.timeline[world.room_id] if e.sender == bot and not is_edit(e)]
        originals = [e for e in originals if content(e).get("body")]
        assert len(originals) >= 4  # the pieces of the answer, the note, the file
        for event in originals:
            relation = content(event)["m.relates_to"]
            assert relation["rel_type"] == "m.thread"
            assert relation["event_id"] == root


async def test_threaded_continuations_fall_back_to_the_latest_message(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path, threads=True) as world:
        alice = world.human
        root = await alice.say(world.room_id, "a thread root")
        asked = await alice.say(world.room_id, "asked inside the thread", **_in_thread(root))
        # A quoted reply inside the thread: its fallback quote is not part of the question.
        quoted = await alice.say(
            world.room_id,
            f"> <{alice.user_id}> asked inside the thread\n\nand this too",
            **{
                "m.relates_to": {
                    "rel_type": "m.thread",
                    "event_id": root,
                    "is_falling_back": False,
                    "m.in_reply_to": {"event_id": asked},
                }
            },
        )
        await world.inbound.wait_for(lambda i: len(i.messages) >= 3)
        assert world.inbound.messages[2].event_id == quoted
        assert world.inbound.messages[2].text == "and this too"
        message = world.inbound.messages[1]
        answer = " ".join(f"word{n}" for n in range(6_000))
        async with world.adapter.open_reply(message.thread, asked) as live:
            await live.append(answer[:100])
            await live.finish(TurnOutcome(final_text=answer))
        bot = world.bot_user.user_id
        await _wait_shown(alice, world.room_id, bot, answer, within=60)
        originals = [
            e
            for e in alice.timeline[world.room_id]
            if e.sender == bot and not is_edit(e) and content(e).get("body")
        ]
        assert len(originals) >= 3
        fallbacks = [content(e)["m.relates_to"]["m.in_reply_to"]["event_id"] for e in originals]
        # The first piece answers the question; each next one follows the one before.
        assert fallbacks[0] == asked
        assert fallbacks[1:] == [e.event_id for e in originals[:-1]]


@pytest.mark.slow
async def test_five_rooms_streaming_under_default_rate_limits_all_complete(
    synapse_default_limits: Synapse, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    synapse = synapse_default_limits
    caplog.set_level(logging.INFO, logger="bridge.chat.matrix")
    # The shipped retry policy and edit pace: only the sync is quicker.
    tuning = MatrixTuning(retry=RetryPolicy(), sync=SyncTuning(timeout_ms=5_000))
    rooms = 5
    answers = [
        "\n\n".join(f"Room {r}, paragraph {n}: " + "words " * 40 for n in range(12))
        for r in range(rooms)
    ]
    async with matrix_world(synapse, tmp_path, tuning=tuning) as world:
        alice = world.human
        room_ids = [world.room_id]
        for _ in range(rooms - 1):
            room_ids.append(await alice.create_room([world.bot_user.user_id]))
        for room_id in room_ids[1:]:
            await alice.wait_joined(room_id, world.bot_user.user_id)

        async def stream(index: int) -> None:
            # Rooms finish one after the other: each final answer competes with the streamed
            # edits of the rooms still going.
            thread = world.thread().model_copy(update={"channel": room_ids[index]})
            text = answers[index]
            step = len(text) // (20 * (index + 1))
            async with world.adapter.open_reply(thread, None) as live:
                for start in range(0, len(text), step):
                    await live.append(text[start : start + step])
                    await anyio.sleep(0.1)
                await live.finish(TurnOutcome(final_text=text))

        # Count the homeserver's refusals (the queue tells the account's pacer of each).
        queue = world.adapter._queue
        pacer_limited = queue.on_limited
        refusals: list[float] = []

        def limited(wait: float) -> None:
            refusals.append(wait)
            if pacer_limited is not None:
                pacer_limited(wait)

        queue.on_limited = limited
        async with anyio.create_task_group() as tg:
            for index in range(rooms):
                tg.start_soon(stream, index)
        bot = world.bot_user.user_id
        for index, room_id in enumerate(room_ids):
            await _wait_shown(alice, room_id, bot, answers[index], within=300)
        # The homeserver did limit the bot: the pacing was needed.
        assert refusals
        assert not any("could not be sent" in r.getMessage() for r in caplog.records)

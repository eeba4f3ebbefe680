"""Matrix through the whole bridge: a real Synapse, the core, and the agy simulator."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from bridge.app import Bridge, open_bridge, start_adapters
from bridge.chat.matrix import MatrixAdapter
from bridge.config import build_config
from bridge.core.events import Author, ChannelRef, ThreadRef
from tests.chat.matrix.conftest import FAST_TUNING, Human
from tests.chat.matrix.outage import address_outage
from tests.chat.matrix.synapse import Synapse
from tests.chat.matrix.test_upgrades import upgrade
from tests.core.harness import SIMULATOR_ENV
from tests.doubles import signed_in

pytestmark = [pytest.mark.anyio, pytest.mark.synapse, pytest.mark.slow]


@dataclass
class Live:
    bridge: Bridge
    human: Human
    room: str
    bot: str
    tmp: Path


def content(event: Any) -> dict[str, Any]:
    raw = event.source.get("content", {})
    return raw.get("m.new_content", raw) if isinstance(raw, dict) else {}


def from_bot_with(live: Live, text: str) -> Any:
    return lambda e: getattr(e, "sender", "") == live.bot and text in content(e).get("body", "")


@asynccontextmanager
async def live_bridge(
    synapse: Synapse, tmp_path: Path, workdir: Path | None = None
) -> AsyncIterator[Live]:
    alice = synapse.register(f"alice{os.urandom(3).hex()}", displayname="Alice Liddell")
    bot = synapse.register(f"bot{os.urandom(3).hex()}", displayname="Agy Bot")
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp_path / "sim-home"))
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp_path / "data")},
            "agy": {
                "command": [sys.executable, "-m", "bridge.simulator"],
                "init_timeout": 30,
                "isolation": "none",  # its tests signal the agent through files outside
                "pass_env": SIMULATOR_ENV,
            },
            "matrix": {
                "homeserver": synapse.base_url,
                "user_id": bot.user_id,
                "password": bot.password,
                "allowed_users": [alice.user_id],
            },
            "workspaces": [{"path": str(workdir)}] if workdir else [],
            "approvals": {"mode": "off"},  # approvals have tests of their own
        },
        environ={},
    )
    adapter = MatrixAdapter(config.matrix, data_dir=config.bridge.data_dir, tuning=FAST_TUNING)
    async with Human.connect(synapse, alice) as human:
        room = await human.create_room([bot.user_id])
        async with open_bridge(config, {"matrix": adapter}) as bridge:
            async with anyio.create_task_group() as tg:
                await start_adapters(bridge, tg)
                await human.wait_joined(room, bot.user_id)
                yield Live(bridge, human, room, bot.user_id, tmp_path)
                await bridge.core.shutdown()
                tg.cancel_scope.cancel()


async def wait_file(path: Path) -> None:
    with anyio.fail_after(30):
        while not path.exists():
            await anyio.sleep(0.05)


async def test_a_message_gets_a_streamed_answer(synapse: Synapse, tmp_path: Path) -> None:
    async with live_bridge(synapse, tmp_path) as live:
        await live.human.say(live.room, "hello bot [[long 30]] [[chunks 10]]")
        final = await live.human.wait_event(live.room, from_bot_with(live, "line 30"), within=60)
        assert "line 1\n" in content(final)["body"]


async def test_a_message_mid_turn_is_injected(synapse: Synapse, tmp_path: Path) -> None:
    async with live_bridge(synapse, tmp_path) as live:
        started, go = tmp_path / "started", tmp_path / "go"
        await live.human.say(live.room, f"task [[calls 2]] [[touch {started}]] [[wait {go}]]")
        await wait_file(started)
        late = await live.human.say(live.room, "also update the changelog")
        thread_key = f"matrix|{live.room}|"
        with anyio.fail_after(30):
            while not await live.bridge.store.pending(thread_key):
                await anyio.sleep(0.05)
        go.touch()
        await live.human.wait_event(live.room, from_bot_with(live, "Injected:"), within=60)
        # ⏳ when it arrived (queued), then the bot's read receipt once the running turn took it.
        await live.human.wait_read_by(live.room, late, live.bot)


async def test_a_stop_reaction_interrupts(synapse: Synapse, tmp_path: Path) -> None:
    async with live_bridge(synapse, tmp_path) as live:
        started = tmp_path / "started"
        asked = await live.human.say(live.room, f"long job [[touch {started}]] [[sleep 60]]")
        await wait_file(started)
        worker = live.bridge.core.threads[f"matrix|{live.room}|"]
        assert worker.busy
        # Nothing has streamed yet, so the 🛑 goes on the message that started the turn.
        await live.human.send(
            live.room,
            {"m.relates_to": {"rel_type": "m.annotation", "event_id": asked, "key": "🛑"}},
            kind="m.reaction",
        )
        with anyio.fail_after(30):
            while worker.busy:
                await anyio.sleep(0.05)
        await live.human.wait_event(live.room, from_bot_with(live, "Stopped by"), within=30)


async def test_a_file_posted_by_the_agent_lands_in_the_room(
    synapse: Synapse, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("release notes\n")
    async with live_bridge(synapse, tmp_path, work) as live:
        call = '[[mcp bridge_chat post_file {"path": "notes.txt"}]]'
        await live.human.say(live.room, f"share {call}")
        event = await live.human.wait_event(
            live.room,
            lambda e: (
                getattr(e, "sender", "") == live.bot
                and e.source.get("content", {}).get("msgtype") == "m.file"
            ),
            within=60,
        )
        assert event.source["content"]["body"] == "notes.txt"


@pytest.mark.faults
async def test_an_answer_made_while_synapse_is_down_arrives_once_it_is_back(
    synapse: Synapse, tmp_path: Path
) -> None:
    with address_outage(synapse) as outage:
        async with live_bridge(outage.synapse, tmp_path) as live:
            started = tmp_path / "started"
            await live.human.say(live.room, f"outage [[touch {started}]] [[sleep 1]]")
            await wait_file(started)
            # The homeserver goes away mid-turn (and mid-sync): the answer is made meanwhile.
            await anyio.to_thread.run_sync(outage.down)
            await anyio.sleep(3)
            await anyio.to_thread.run_sync(outage.up)
            await live.human.wait_event(live.room, from_bot_with(live, "outage"), within=90)
            await live.human.say(live.room, "after the outage")
            await live.human.wait_event(
                live.room, from_bot_with(live, "after the outage"), within=60
            )
            # One reply message per turn (edits aside): the outage doubled nothing.
            replies = [
                e
                for e in live.human.timeline.get(live.room, [])
                if getattr(e, "sender", "") == live.bot
                and e.source.get("type") == "m.room.message"
                and e.source.get("content", {}).get("m.relates_to", {}).get("rel_type")
                != "m.replace"
            ]
            assert len(replies) == 2, [r.source.get("content", {}).get("body") for r in replies]


async def test_an_upgraded_room_carries_on_with_the_same_conversation(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with live_bridge(synapse, tmp_path) as live:
        await live.human.say(live.room, "before the upgrade")
        await live.human.wait_event(live.room, from_bot_with(live, "before the upgrade"), within=60)
        old_key = f"matrix|{live.room}|"
        conversation = (await live.bridge.store.thread(old_key)).conversation_id
        assert conversation
        new = upgrade(synapse, live.human.user, live.room)
        await live.human.client.room_invite(new, live.bot)
        await live.human.wait_joined(new, live.bot)
        await live.human.say(new, "after the upgrade")
        await live.human.wait_event(new, from_bot_with(live, "after the upgrade"), within=60)
        moved = await live.bridge.store.thread(f"matrix|{new}|")
        assert moved.conversation_id == conversation
        assert (await live.bridge.store.thread(old_key)).conversation_id is None


async def test_a_turn_the_bridge_starts_opens_a_thread_in_the_room(
    synapse: Synapse, tmp_path: Path
) -> None:
    """``Core.start_thread`` (a schedule's prompt): a root message in the room, the answer
    under it, as for a person's message."""
    async with live_bridge(synapse, tmp_path) as live:
        place = ChannelRef(platform="matrix", channel=live.room)
        thread = await live.bridge.core.start_thread(
            place, "nightly report [[long 5]]", Author.schedule("nightly")
        )
        assert thread == ThreadRef(platform="matrix", channel=live.room), "threads = false"
        opening = await live.human.wait_event(
            live.room, from_bot_with(live, "schedule nightly"), within=30
        )
        assert "nightly report" in content(opening)["body"]
        await live.human.wait_event(live.room, from_bot_with(live, "line 5"), within=60)

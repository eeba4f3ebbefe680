"""Approvals in Matrix: a real Synapse, the core and the agy simulator. The bot pre-reacts
✅ ♾️ ❌; the first approver's reaction decides; others are ignored with a notice."""

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
from bridge.chat.matrix.approvals import ALWAYS_KEY, APPROVE_KEY, DENY_KEY
from bridge.config import build_config
from tests.chat.matrix.conftest import FAST_TUNING, Human
from tests.chat.matrix.synapse import Synapse
from tests.core.harness import SIMULATOR_ENV
from tests.doubles import signed_in

pytestmark = [pytest.mark.anyio, pytest.mark.synapse, pytest.mark.slow]


@dataclass
class Live:
    bridge: Bridge
    alice: Human
    bob: Human  # the approver
    eve: Human  # allowed to talk, not to approve
    room: str
    bot: str
    work: Path


def content(event: Any) -> dict[str, Any]:
    raw = event.source.get("content", {})
    return raw.get("m.new_content", raw) if isinstance(raw, dict) else {}


def by_bot(live: Live, text: str) -> Any:
    return lambda e: getattr(e, "sender", "") == live.bot and text in content(e).get("body", "")


@asynccontextmanager
async def live_bridge(synapse: Synapse, tmp_path: Path, **approvals: Any) -> AsyncIterator[Live]:
    tag = os.urandom(3).hex()
    users = {
        name: synapse.register(f"{name}{tag}", displayname=name.title())
        for name in ("alice", "bob", "eve", "bot")
    }
    work = tmp_path / "work"
    work.mkdir(parents=True)
    os.environ["AGY_SIM_HOME"] = str(signed_in(tmp_path / "sim-home"))
    config = build_config(
        {
            "bridge": {"data_dir": str(tmp_path / "data")},
            "agy": {
                "command": [sys.executable, "-m", "bridge.simulator"],
                "init_timeout": 30,
                "pass_env": SIMULATOR_ENV,
                "state_dirs": [],
            },
            "matrix": {
                "homeserver": synapse.base_url,
                "user_id": users["bot"].user_id,
                "password": users["bot"].password,
                "allowed_users": [users[n].user_id for n in ("alice", "bob", "eve")],
            },
            "workspaces": [{"path": str(work)}],
            "approvals": {
                "mode": "ask",
                "timeout": 60,
                "approvers": [users["bob"].user_id],
                **approvals,
            },
        },
        environ={},
    )
    adapter = MatrixAdapter(config.matrix, data_dir=config.bridge.data_dir, tuning=FAST_TUNING)
    async with (
        Human.connect(synapse, users["alice"]) as alice,
        Human.connect(synapse, users["bob"]) as bob,
        Human.connect(synapse, users["eve"]) as eve,
    ):
        room = await alice.create_room([users[n].user_id for n in ("bot", "bob", "eve")])
        await bob.join(room)
        await eve.join(room)
        async with open_bridge(config, {"matrix": adapter}) as bridge:
            async with anyio.create_task_group() as tg:
                await start_adapters(bridge, tg)
                await alice.wait_joined(room, users["bot"].user_id)
                yield Live(bridge, alice, bob, eve, room, users["bot"].user_id, work)
                await bridge.core.shutdown()
                tg.cancel_scope.cancel()


async def react(human: Human, room: str, event_id: str, key: str) -> None:
    await human.send(
        room,
        {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}},
        kind="m.reaction",
    )


async def asked(live: Live, text: str, count: int = 1) -> str:
    """The event id of the ``count``-th request (once the bot has pre-reacted ❌ to it)."""
    found: list[str] = []

    def request(e: Any) -> bool:
        if by_bot(live, "Approval needed")(e) and text in content(e).get("body", ""):
            if e.event_id not in found:
                found.append(e.event_id)
        return len(found) >= count

    await live.alice.wait_event(live.room, request, within=60)
    target = found[count - 1]
    await live.alice.wait_event(
        live.room,
        lambda e: (
            e.source.get("type") == "m.reaction"
            and e.source["content"].get("m.relates_to", {}).get("event_id") == target
            and e.source["content"]["m.relates_to"].get("key") == DENY_KEY
        ),
    )
    return target


async def test_the_first_approvers_reaction_decides(synapse: Synapse, tmp_path: Path) -> None:
    async with live_bridge(synapse, tmp_path) as live:
        await live.alice.say(live.room, "[[tool run_command touch ok.txt]]")
        request = await asked(live, "touch ok.txt")
        await react(live.eve, live.room, request, APPROVE_KEY)
        await live.alice.wait_event(live.room, by_bot(live, "you may not answer"))
        assert not (live.work / "ok.txt").exists()
        await react(live.bob, live.room, request, APPROVE_KEY)
        await live.alice.wait_event(live.room, by_bot(live, "Approved by Bob"), within=60)
        await live.alice.wait_event(live.room, by_bot(live, "You said"), within=60)
        assert (live.work / "ok.txt").exists()


async def test_a_reply_denies_with_a_reason_and_always_sticks(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with live_bridge(synapse, tmp_path) as live:
        await live.alice.say(live.room, "[[tool run_command touch no.txt]]")
        await asked(live, "touch no.txt")
        await live.bob.say(live.room, "deny 1: use the staging db")  # the request's number
        await live.alice.wait_event(
            live.room, by_bot(live, "denied by Bob: use the staging db"), within=60
        )
        assert not (live.work / "no.txt").exists()

        await live.alice.say(live.room, "[[tool run_command echo hi]]")
        request = await asked(live, "echo hi")
        await react(live.bob, live.room, request, ALWAYS_KEY)
        await live.alice.wait_event(live.room, by_bot(live, "Approved always"), within=60)
        await live.alice.say(live.room, "[[tool run_command echo hi]] once more")
        await live.alice.wait_event(live.room, by_bot(live, "once more"), within=60)
        rows = await live.bridge.store.allow_list(f"matrix|{live.room}|")
        assert rows == ["rule: echo hi"]
        assert len(await live.bridge.store.waiting_approvals()) == 0


async def test_timeout_and_stop_deny(synapse: Synapse, tmp_path: Path) -> None:
    async with live_bridge(synapse, tmp_path, timeout=2) as live:
        await live.alice.say(live.room, "[[tool run_command touch late.txt]]")
        await live.alice.wait_event(live.room, by_bot(live, "no one answered in time"), within=60)
        await live.alice.wait_event(live.room, by_bot(live, "no one in the chat"), within=60)
        assert not (live.work / "late.txt").exists()
    async with live_bridge(synapse, tmp_path / "again") as live:
        await live.alice.say(live.room, "[[tool run_command touch stop.txt]]")
        await asked(live, "touch stop.txt")
        await live.bob.say(live.room, "!stop")
        await live.alice.wait_event(live.room, by_bot(live, "the turn was stopped"), within=60)
        assert not (live.work / "stop.txt").exists()

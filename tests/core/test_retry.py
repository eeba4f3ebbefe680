"""A request a crash cut off: reported, never run again by itself, and run once more on
``!retry`` (once only). Scripted agy; the fault tests do the same with real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.core.events import Author, IncomingMessage
from bridge.core.handover import OPEN
from bridge.core.recovery import KEPT
from bridge.core.retry import DONE_ALREADY, NOTHING
from tests.core.scripted import World, ref, result, world

pytestmark = pytest.mark.anyio


async def cut_off_turn(w: World, text: str) -> None:
    """What a SIGKILLed bridge leaves: the thread's conversation, a turn still ``running``."""
    store = w.bridge.store
    await store.add_message(
        IncomingMessage(
            thread=ref(),
            event_id="lost",
            message_id="lost",
            author=Author(id="@bob:test", display_name="Bob"),
            text=text,
        ),
        record_thread=True,
    )
    await store.set_conversation(ref().key, "conv-old", instance=w.bridge.core.leases.name)
    assert await store.take_turn(ref().key, "conv-old") is not None


async def test_a_cut_off_request_runs_again_only_on_retry_and_only_once(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await cut_off_turn(w, "deploy the service")
        await w.bridge.core.recover()
        [(_, notice)] = w.adapter.notices
        assert KEPT[True] in notice and "`!retry`" in notice
        await w.say("!status")
        await w.adapter.wait_notice("(kept after the interrupted turn: the agent remembers")
        await w.say("how is it going?")
        agy = await w.agys.nth(1)
        first = await agy.wait_turns(1)
        assert agy.conversation == "conv-old"  # resumed
        assert first[0].startswith(OPEN) and "Do not continue or redo" in first[0]
        assert "deploy the service" not in "\n".join(first)
        agy.say(result(response="fine"))
        await w.adapter.wait_finished(1)

        await w.say("!retry")
        await w.adapter.wait_notice("request is sent to the agent again, as Alice (@alice:test)")
        again = await agy.wait_turns(2)
        assert again == ["Bob (@bob:test): deploy the service"]  # as its author wrote it
        agy.say(result(response="deployed"))
        await w.adapter.wait_finished(2)

        await w.say("!retry")
        await w.adapter.wait_notice(DONE_ALREADY)
        assert len(agy.turns) == 2


async def test_retry_where_nothing_was_cut_off(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        await w.bridge.core.recover()
        await w.say("!retry")
        await w.adapter.wait_notice(NOTHING)
        assert not w.agys.started

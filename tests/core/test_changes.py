"""Edits and deletions of messages, through the core on the scripted agy: a waiting message
takes the change (revised, or withdrawn and never sent), the agent is told of a change to one
it has (in the running turn or the next), once; a change never answers an approval request or
runs a command again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.core.events import (
    Author,
    ChangeOutcome,
    IncomingMessage,
    MessageChange,
    SubmitOutcome,
)
from bridge.core.store.rows import MessageState
from tests.core.scripted import World, pre_invocation, ref, result, streaming_turn, world

pytestmark = pytest.mark.anyio

ALICE = Author(id="@alice:test", display_name="Alice")


def change(mid: str, text: str | None, event: str, who: Author = ALICE) -> MessageChange:
    return MessageChange(thread=ref(), event_id=event, message_id=mid, author=who, text=text)


async def waiting_second(w: World) -> tuple[object, str]:
    """A running turn, and a second message waiting behind it (not yet handed to agy)."""
    agy = await streaming_turn(w, "one")
    second = await w.say("two: do the thing")
    return agy, second


async def test_an_edited_waiting_message_runs_once_with_its_new_text(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        agy, second = await waiting_second(w)
        core = w.bridge.core
        edit = change(second, "two: do the other thing", "e1")
        assert await core.change(edit) is ChangeOutcome.REVISED
        assert await core.change(edit) is ChangeOutcome.DUPLICATE  # redelivered
        agy.say(result(response="first"))  # type: ignore[attr-defined]
        [block] = await agy.wait_turns(2)  # type: ignore[attr-defined]
        assert "two: do the other thing" in block and "do the thing" not in block
        agy.say(result(response="second"))  # type: ignore[attr-defined]
        await w.adapter.wait_finished(2)
        assert len(agy.turns) == 2  # type: ignore[attr-defined]
        assert not [n for _, n in w.adapter.notices if "edited" in n]


async def test_a_deleted_waiting_message_never_runs_and_the_thread_is_told(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        agy, second = await waiting_second(w)
        core = w.bridge.core
        assert await core.change(change(second, None, "d1")) is ChangeOutcome.WITHDRAWN
        assert await w.adapter.wait_notice("deleted a message") == (
            "Alice (@alice:test) deleted a message before the agent read it; it will not run."
        )
        # Nothing for the hook to hand over, and no next turn.
        assert "two" not in json.dumps(await pre_invocation(tmp_path, agy.conversation))  # type: ignore[attr-defined]
        agy.say(result(response="first"))  # type: ignore[attr-defined]
        await w.adapter.wait_finished(1)
        assert await w.bridge.store.pending(ref().key) == []
        assert len(agy.turns) == 1  # type: ignore[attr-defined]
        [row] = await w.bridge.store._db.fetch(
            "SELECT state FROM inbox WHERE message_id = ? ORDER BY id LIMIT 1", (second,)
        )
        assert row["state"] == MessageState.WITHDRAWN


async def test_a_change_to_a_message_the_agent_has_reaches_the_running_turn_once(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "deploy to staging")
        core = w.bridge.core
        edit = change("m1", "deploy to production", "e1")
        assert await core.change(edit) is ChangeOutcome.TOLD
        assert await core.change(edit) is ChangeOutcome.DUPLICATE
        injected = json.dumps(await pre_invocation(tmp_path, agy.conversation))  # type: ignore[attr-defined]
        assert "Alice edited their message" in injected and "deploy to production" in injected
        # A deletion of it, after the turn: the next turn hears of it, once.
        agy.say(result(response="done"))  # type: ignore[attr-defined]
        await w.adapter.wait_finished(1)
        assert await core.change(change("m1", None, "d1")) is ChangeOutcome.TOLD
        [block] = await agy.wait_turns(2)  # type: ignore[attr-defined]
        assert "Alice deleted their message" in block and "deploy to staging" in block
        assert injected.count("edited their message") == 1


async def test_a_change_never_answers_a_request_or_reruns_a_command(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        core = w.bridge.core
        await w.say("!help")
        assert await core.change(change("m1", "!new", "e1")) is ChangeOutcome.IGNORED
        assert await core.change(change("nowhere", "deny: no", "e2")) is ChangeOutcome.IGNORED
        assert [n for _, n in w.adapter.notices].count("Starting a fresh conversation") == 0
        # Only its author changes a message.
        agy, second = await waiting_second(w)
        mallory = Author(id="@mallory:test", display_name="Mallory")
        outcome = await core.change(change(second, "rm -rf", "e3", who=mallory))
        assert outcome is ChangeOutcome.IGNORED
        [waiting] = await w.bridge.store.pending(ref().key)
        assert waiting.text == "two: do the thing"
        del agy


async def test_a_message_stored_twice_keeps_one_original(tmp_path: Path) -> None:
    """The bridge's note of a change carries the message's id; the original stays the first."""
    async with world(tmp_path) as w:
        await streaming_turn(w, "one")
        await w.bridge.core.change(change("m1", "uno", "e1"))
        original = await w.bridge.store.original(ref().key, "m1")
        assert original is not None and original.text == "one"
        # And a redelivery of the message itself is still one.
        again = IncomingMessage(
            thread=ref(), event_id="m1", message_id="m1", author=ALICE, text="one again"
        )
        assert await w.bridge.core.submit(again) is SubmitOutcome.DUPLICATE

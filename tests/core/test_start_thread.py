"""Turns no chat message started: ``Core.start_thread`` opens a new thread with a root message
(the adapter's ``open_thread`` capability) and runs its turn as any other: it streams, asks
approvals of people, obeys ``!stop``; its author is typed (a schedule, a forge event, the
bridge), and what it posts is scrubbed."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bridge.core.events import ApprovalChoice, Author, AuthorKind, ChannelRef
from tests.core.harness import running
from tests.core.test_scrub_posting import SECRET, config

pytestmark = pytest.mark.anyio

ROOM = ChannelRef(platform="test", channel="room")
BOB = Author(id="@bob:test", display_name="Bob")


async def test_a_scheduled_prompt_opens_a_thread_and_its_turn_answers_there(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as h:
        nightly = Author.schedule("nightly")
        thread = await h.bridge.core.start_thread(ROOM, "summarise the open issues", nightly)
        assert thread.channel == "room" and thread.thread == "root1"
        assert (thread.key, "**schedule nightly** asks:\n\nsummarise the open issues") in (
            h.adapter.notices
        )
        [reply] = await h.adapter.wait_finished(1, thread)
        assert reply.thread == thread and reply.reply_to == "root1"
        assert reply.author == nightly, "the reply knows who asked (no person)"
        assert reply.outcome is not None and reply.outcome.error is None
        # A person's follow-up in the opened thread carries on the same conversation.
        await h.say("and the closed ones?", where=thread)
        await h.adapter.wait_finished(2, thread)
        assert (await h.bridge.store.thread(thread.key)).conversation_id


async def test_a_forge_event_turn_asks_a_person_to_approve(tmp_path: Path) -> None:
    async with running(tmp_path, extra=config()) as h:
        ci = Author.forge("team/repo", "CI failed on #12")
        assert ci.kind is AuthorKind.FORGE and not ci.person
        thread = await h.bridge.core.start_thread(ROOM, "[[tool run_command touch fixed.txt]]", ci)
        await h.adapter.changes.until(lambda: h.adapter.requests)
        [request] = h.adapter.requests
        assert request.thread == thread and request.requested_by == ci
        assert "team/repo: CI failed on #12" in request.text
        await h.bridge.core.decide(thread, "req-1", ApprovalChoice.APPROVE, BOB)
        [reply] = await h.adapter.wait_finished(1, thread)
        assert reply.outcome is not None and reply.outcome.error is None


async def test_a_started_turn_obeys_stop(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        started = h.flag("started")
        thread = await h.bridge.core.start_thread(
            ROOM, f"long [[touch {started}]] [[sleep 60]]", Author.bridge()
        )
        with anyio.fail_after(20):
            while not started.exists():
                await anyio.sleep(0.05)
        await h.say("!stop", where=thread, who="bob")
        [reply] = await h.adapter.wait_finished(1, thread)
        assert reply.outcome is not None and reply.outcome.interrupted


async def test_the_opening_message_is_scrubbed(tmp_path: Path) -> None:
    async with running(tmp_path, extra=config(mode="off")) as h:
        thread = await h.bridge.core.start_thread(ROOM, f"rotate {SECRET}", Author.bridge())
        [opening] = [text for key, text in h.adapter.notices if key == thread.key]
        assert SECRET not in opening and "rotate ***" in opening
        await h.adapter.wait_finished(1, thread)


async def test_a_chat_that_cannot_open_threads_says_so(tmp_path: Path) -> None:
    async with running(tmp_path) as h:
        with pytest.raises(ValueError, match="no chat adapter"):
            await h.bridge.core.start_thread(
                ChannelRef(platform="nowhere", channel="x"), "hi", Author.bridge()
            )


async def test_new_tells_an_adapter_that_hears_resets(tmp_path: Path) -> None:
    """Core says that ``!new`` ran (the adapter does not read it from the text)."""
    async with running(tmp_path) as h:
        await h.say("hello")
        await h.adapter.wait_finished(1)
        await h.say("!new")
        await h.adapter.wait_notice("Starting a fresh conversation")
        assert h.adapter.resets == ["test|room|t1"]

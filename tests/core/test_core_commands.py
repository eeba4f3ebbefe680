"""The thread commands as the core answers them, word for word where the words are the answer
(``!status``, ``!model``, ``!approvals``, ``!new``, ``!stop``), with the scripted agy of
``test_worker``: no subprocess, no timing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from bridge.core.commands import HELP
from bridge.core.events import Author
from bridge.core.status import approvals_line
from bridge.core.store.rows import Usage
from bridge.core.thread.commands import NewConversation, SetModel, Stop
from tests.core.scripted import World, ref, result, streaming_turn, world

pytestmark = pytest.mark.anyio


async def ask(w: World, command: str, thread: str = "t1") -> str:
    """The notice ``command`` gets (commands answer with one notice each)."""
    before = len(w.adapter.notices)
    await w.say(command, thread=thread)
    notice: str = await w.adapter.changes.until(
        lambda: len(w.adapter.notices) > before and w.adapter.notices[before][1]
    )
    assert w.adapter.notices[before][0] == ref(thread).key
    return notice


async def test_status_of_a_thread_without_a_process(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        status = await ask(w, "!status")
        lines = status.split("\n")
        assert lines[0] == f"• Instance: `{w.bridge.core.leases.name}`"
        assert lines[1:6] == [
            "• Process: no agy process (one starts with the next message)",
            "• Conversation: `none yet`",
            "• Model: `default`",
            "• Waiting messages: 0",
            f"• Agent slots: 0/{w.bridge.core.slots.limit} in use, 0 thread(s) in line",
        ]
        assert "Usage so far" not in status
        assert not w.adapter.replies, "a command is not a turn"


async def test_status_says_how_approvals_are_set(tmp_path: Path) -> None:
    """The console's banner says the same: the isolation, the mode, the allow list."""
    rules = {"approvals": {"mode": "ask", "allow_commands": ["git status", "pytest *"]}}
    async with world(tmp_path, rules) as w:
        status = (await ask(w, "!status")).split("\n")
        assert approvals_line(w.bridge.config.approvals) in status
        # Isolation, the caps per thread and (in a sandbox) the network: a line each.
        assert set(w.bridge.runtime.isolation_status().split("\n")) <= set(status)
    assert approvals_line(w.bridge.config.approvals) == (
        "• Approvals: `ask`: commands, writes outside the workspace and fetches wait for a "
        "person in the thread; allowed without asking: `git status`, `pytest *`"
    )


async def test_status_of_a_busy_then_idle_thread(tmp_path: Path) -> None:
    async with world(tmp_path, model="model-x") as w:
        agy = await streaming_turn(w, "one")
        await w.say("queued")
        status = await ask(w, "!status")
        assert f"• Process: agy running a turn (pid {agy.pid})" in status
        assert f"• Conversation: `{agy.conversation}`" in status
        assert "• Model: `model-x`" in status
        assert "• Waiting messages: 1" in status
        assert "1/" in status.split("Agent slots: ", 1)[1]
        agy.say(result(response="first"))
        await agy.wait_turns(2)
        agy.say(result(response="second"))
        [_, second] = await w.adapter.wait_finished(2)
        await w.adapter.changes.until(lambda: second.closed)
        await w.bridge.store.set_usage(
            ref().key, Usage(input_tokens=1234, output_tokens=56, total_tokens=1290)
        )
        status = await ask(w, "!status")
        assert f"• Process: agy idle (pid {agy.pid})" in status
        assert "• Waiting messages: 0" in status
        assert status.split("\n")[-1] == (
            "• Usage so far: 1,234 input, 56 output tokens (1,290 in all)"
        )


async def test_model_shows_switches_and_refuses_what_is_not_a_model_id(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        assert await ask(w, "!model") == "Model for this thread: `agy's default model`."
        refused = "A model id is one word, as `agy models` lists it."
        assert await ask(w, "!model two words") == refused
        assert await ask(w, "!model " + "m" * 201) == refused
        assert await ask(w, "!model " + "m" * 200) == (
            f"Model for this thread is now `{'m' * 200}` (same conversation, from next turn)."
        )
        assert await ask(w, "!model fast-1") == (
            "Model for this thread is now `fast-1` (same conversation, from next turn)."
        )
        assert (await w.bridge.store.thread(ref().key)).model == "fast-1"
        assert await ask(w, "!model") == "Model for this thread: `fast-1`."
        assert not w.agys.started, "no process starts for a command"


async def test_model_of_a_thread_falls_back_to_the_configured_model(tmp_path: Path) -> None:
    async with world(tmp_path, model="configured-1") as w:
        assert await ask(w, "!model") == "Model for this thread: `configured-1`."
        assert "• Model: `configured-1`" in await ask(w, "!status")


async def test_help_unknown_and_stop_when_nothing_runs(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        assert await ask(w, "!help") == HELP
        assert await ask(w, "!Bogus x") == f"Unknown command `!Bogus`.\n{HELP}"
        assert await ask(w, "!stop") == "Nothing is running in this thread."
        agy = await streaming_turn(w, "one")
        agy.say(result(response="done"))
        [reply] = await w.adapter.wait_finished(1)
        await w.adapter.changes.until(lambda: reply.closed)
        assert await ask(w, "!stop") == "Nothing is running in this thread."
        assert agy.interrupted == 0


async def test_new_drops_the_conversation_and_restarts_the_process(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        first = await streaming_turn(w, "one")
        assert await ask(w, "!new") == "Starting a fresh conversation from the next message."
        assert first.interrupted == 1, "the running turn is interrupted"
        [stopped] = await w.adapter.wait_finished(1)
        assert stopped.outcome is not None
        assert stopped.outcome.notes == ["Stopped by Alice (@alice:test)."]
        assert (await w.bridge.store.thread(ref().key)).conversation_id is None
        await w.agys.wait(lambda: first.closed)
        await w.say("again")
        second = await w.agys.nth(2)
        assert "--conversation" not in second.spec.argv
        assert second.conversation != first.conversation


async def test_approvals_lists_resets_and_explains(tmp_path: Path) -> None:
    async with world(tmp_path) as w:
        assert await ask(w, "!approvals") == "\n".join(
            [
                f"• Approvals mode: `{w.bridge.core.config.approvals.mode}`",
                "• Nothing waits for approval.",
                "• This thread's allow list is empty.",
            ]
        )
        store = w.bridge.store
        await store.add_allowed(ref().key, "git status", None)
        await store.add_approval(
            "a1", ref().key, "run_command", {"CommandLine": "rm x"}, "rm x", None
        )
        listed = await ask(w, "!approvals")
        assert listed.split("\n")[1:] == [
            "• Waiting for approval:",
            "  – `rm x` (run_command)",
            "• Allowed always in this thread:",
            "  – `git status`",
        ]
        assert await ask(w, "!approvals what") == (
            "`!approvals` lists; `!approvals reset` clears the list."
        )
        assert await ask(w, "!approvals RESET") == (
            "This thread's allow list is cleared (1 pattern(s) removed); those commands ask again."
        )
        assert await store.allow_list(ref().key) == []


async def test_a_repeated_command_event_runs_once(tmp_path: Path) -> None:
    from bridge.core.events import Author, IncomingMessage, SubmitOutcome

    async with world(tmp_path) as w:
        message = IncomingMessage(
            thread=ref(),
            event_id="e-status",
            message_id="m-status",
            author=Author(id="@alice:test", display_name="Alice"),
            text="!help",
        )
        assert await w.bridge.core.submit(message) is SubmitOutcome.COMMAND
        assert await w.bridge.core.submit(message) is SubmitOutcome.DUPLICATE
        assert [n for _, n in w.adapter.notices] == [HELP]
        again = message.model_copy(update={"event_id": "e-other", "text": "hello"})
        assert await w.bridge.core.submit(again) is SubmitOutcome.ACCEPTED
        assert await w.bridge.core.submit(again) is SubmitOutcome.DUPLICATE
        await w.agys.nth(1)


async def ask_tool(tmp_path: Path, conversation: str, command: str) -> dict[str, Any]:
    """agy's PreToolUse call for ``run_command``, as the hook command makes it; returns when
    the bridge decides."""
    [hooks] = (tmp_path / "data" / "sessions").glob("*/.agents/plugins/*/hooks.json")
    text = (hooks.parent / "PreToolUse.curl").read_text()  # the URL, beside hooks.json
    url = re.search(r"http://127\.0\.0\.1:\d+/\S+/hook/PreToolUse", text)
    assert url is not None
    body = {
        "conversationId": conversation,
        "toolCall": {"name": "run_command", "args": {"CommandLine": command}},
    }
    async with aiohttp.ClientSession() as http:
        answer = await http.post(url.group(0), json=body)
        return dict(await answer.json(content_type=None))


@pytest.mark.parametrize("command", ["!new", "!stop"])
async def test_a_command_while_a_request_waits_denies_it_in_the_askers_name(
    tmp_path: Path, command: str
) -> None:
    async with world(tmp_path) as w:
        agy = await streaming_turn(w, "one")
        answers: list[dict[str, Any]] = []

        async def call() -> None:
            answers.append(await ask_tool(tmp_path, agy.conversation, "rm -rf build"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await w.adapter.changes.until(lambda: w.adapter.requests)
            await w.say(command)
        [answer] = answers
        assert "deny" in json.dumps(answer)
        assert agy.interrupted == 1, "the turn is interrupted before agy reads the deny"
        [approval] = await w.bridge.store._db.fetch("SELECT state, decided_by_json FROM approvals")
        assert approval["state"] == "stopped"
        assert "Alice (@alice:test)" in approval["decided_by_json"]
        settled = w.adapter.settled["req-1"]
        assert settled.state == "stopped" and "Alice (@alice:test)" in settled.text
        [reply] = await w.adapter.wait_finished(1)
        assert reply.outcome is not None and reply.outcome.interrupted
        assert reply.outcome.notes == ["Stopped by Alice (@alice:test)."]
        if command == "!new":
            # Forgotten: the next process (which may already be up) starts another one.
            assert (await w.bridge.store.thread(ref().key)).conversation_id != agy.conversation


async def test_commands_for_a_thread_run_elsewhere_go_to_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker here: ``!stop``, ``!new`` and a model switch are forwarded to the instance that
    runs the thread (the cluster decides whether one does; its own tests cover the rest)."""
    async with world(tmp_path) as w:
        forwarded: list[tuple[str, Any]] = []

        async def send(thread: Any, command: Any) -> bool:
            forwarded.append((thread.key, command))
            return True

        async def owner_of(key: str) -> str:
            return "elsewhere#1"

        async def send_to(owner: str, thread: Any, command: Any, hops: int) -> None:
            assert owner == "elsewhere#1" and hops == 0
            await send(thread, command)

        cluster = w.bridge.core.cluster
        monkeypatch.setattr(cluster, "send", send)
        # A Stop goes to the lease's holder alone (Router.stop).
        monkeypatch.setattr(cluster, "owner_of", owner_of)
        monkeypatch.setattr(cluster, "send_to", send_to)
        await w.say("!stop")
        assert await ask(w, "!new") == "Starting a fresh conversation from the next message."
        assert await ask(w, "!model fast-2") == (
            "Model for this thread is now `fast-2` (same conversation, from next turn)."
        )
        alice = Author(id="@alice:test", display_name="Alice")
        assert forwarded == [
            (ref().key, Stop(alice)),
            (ref().key, NewConversation(alice)),
            (ref().key, SetModel("fast-2", alice)),
        ]
        assert [n for _, n in w.adapter.notices].count("Nothing is running in this thread.") == 0


async def test_a_decision_reaches_only_the_request_it_names(tmp_path: Path) -> None:
    from bridge.core.events import ApprovalChoice, Author, DecideOutcome

    bob = Author(id="@bob:test", display_name="Bob")
    async with world(tmp_path) as w:
        core = w.bridge.core
        # No worker for the thread: nothing to decide.
        assert await core.decide(ref("nowhere"), "req-1", ApprovalChoice.APPROVE, bob) is (
            DecideOutcome.UNKNOWN
        )
        agy = await streaming_turn(w, "one")
        answers: list[dict[str, Any]] = []

        async def call() -> None:
            answers.append(await ask_tool(tmp_path, agy.conversation, "make deploy"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await w.adapter.changes.until(lambda: w.adapter.requests)
            # Another thread's request waits too: !approvals here does not list it.
            await w.bridge.store.add_approval("other", ref("B").key, "run_command", {}, "rm", None)
            listed = await ask(w, "!approvals")
            assert "`make deploy` (run_command)" in listed and "rm" not in listed
            stale = await core.decide(ref(), "req-old", ApprovalChoice.APPROVE, bob)
            assert stale is DecideOutcome.UNKNOWN
            assert not answers, "a click on another request decides nothing"
            assert w.bridge.core.threads[ref().key].work._runner.requester() == Author(  # type: ignore[union-attr]
                id="@alice:test", display_name="Alice"
            ), "the request was asked for the turn's author"
            decided = await core.decide(
                ref(), "req-1", ApprovalChoice.DENY, bob, reason="not on a Friday"
            )
            assert decided is DecideOutcome.DECIDED
        assert "deny" in json.dumps(answers) and "not on a Friday" in json.dumps(answers)
        [row] = await w.bridge.store._db.fetch("SELECT reason FROM approvals WHERE id != 'other'")
        assert row["reason"] == "not on a Friday"
        agy.say(result(response="done"))
        [reply] = await w.adapter.wait_finished(1)
        await w.adapter.changes.until(lambda: reply.closed)
        assert w.bridge.core.threads[ref().key].work._runner.requester() is None  # type: ignore[union-attr]


async def test_with_approvals_off_there_is_nothing_to_decide(tmp_path: Path) -> None:
    from bridge.core.events import ApprovalChoice, Author, DecideOutcome

    async with world(tmp_path, {"approvals": {"mode": "off"}}) as w:
        await streaming_turn(w, "one")
        assert w.bridge.core.threads[ref().key].gate is None
        outcome = await w.bridge.core.decide(
            ref(), "req-1", ApprovalChoice.APPROVE, Author(id="@bob:test", display_name="Bob")
        )
        assert outcome is DecideOutcome.UNKNOWN


async def test_a_title_a_person_gave_the_thread_is_kept_and_shown_by_status(
    tmp_path: Path,
) -> None:
    async with world(tmp_path) as w:
        alice = Author(id="U1", display_name="Alice")
        thread = ref("t1")
        # Not a conversation yet: nothing is kept.
        assert not await w.bridge.core.retitle(thread, "Flaky CI hunt", alice)
        await ask(w, "!status")
        assert await w.bridge.core.store.title(thread.key) is None
        await w.bridge.core.store.ensure_thread(thread)
        assert await w.bridge.core.retitle(thread, "Flaky CI hunt", alice)
        assert await w.bridge.core.retitle(thread, "Flaky CI hunt, part 2", alice)
        status = (await ask(w, "!status")).split("\n")
        assert status[1] == "• Title: “Flaky CI hunt, part 2” (named by Alice (U1))"

"""Only the bridge's own words answer a waiting request: free words are for the agent.

The attack: the agent asks the thread a yes/no question of its own while a request waits, and
a teammate's "yes" (meant for the question) would approve the command.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.core.approvals.replies import Reply, parse_reply
from bridge.core.events import ApprovalChoice, Author
from tests.core.approvals.test_gate import approvals, request, workdir
from tests.core.harness import running, thread

pytestmark = pytest.mark.anyio

BOB = Author(id="@bob:test", display_name="Bob")


@pytest.mark.parametrize(
    "text",
    ["yes", "Yes", "no", "ok", "OK", "allow", "approved", "denied", "y", "sure", "yes: fine"],
)
def test_free_words_are_no_answer(text: str) -> None:
    assert parse_reply(text) is None


@pytest.mark.parametrize(
    ("text", "reply"),
    [
        ("approve", Reply(ApprovalChoice.APPROVE)),
        ("Approve", Reply(ApprovalChoice.APPROVE)),
        ("always", Reply(ApprovalChoice.ALWAYS)),
        ("always: git status", Reply(ApprovalChoice.ALWAYS, "git status")),
        ("deny", Reply(ApprovalChoice.DENY)),
        ("deny: not on Fridays", Reply(ApprovalChoice.DENY, "not on Fridays")),
        ("approve: looks fine", None),  # approve takes no text
        ("approve it", None),
    ],
)
def test_the_answers(text: str, reply: Reply | None) -> None:
    assert parse_reply(text) == reply


async def test_a_yes_to_the_agents_question_does_not_approve(tmp_path: Path) -> None:
    async with running(tmp_path, extra=approvals()) as h:
        await h.say(
            "[[narrate Shall I also clear the cache? (yes/no)]] [[tool run_command touch x.txt]]"
        )
        handle = await request(h)
        await h.say("yes", who="bob")
        await h.say("ok", who="bob")
        # Each answer is decided inside submit: had "yes" been one, the request would be settled.
        assert handle not in h.adapter.settled, "a free 'yes' decided the request"
        assert not (workdir(h) / "x.txt").exists()
        # The words reached the agent as messages (marked seen mid-turn or queued).
        await h.adapter.changes.until(lambda: len(h.adapter.reactions) >= 2)
        # The request still waits for a real answer, and takes one.
        await h.bridge.core.decide(thread(), handle, ApprovalChoice.DENY, BOB)
        await h.adapter.changes.until(lambda: handle in h.adapter.settled)
        assert h.adapter.settled[handle].state == "denied"
        assert not (workdir(h) / "x.txt").exists()

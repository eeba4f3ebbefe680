"""The chat-command registry: one decorated function per command, its help and who may run
it; ``!help`` built from it says word for word what it said when it was written by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from bridge.core.commands import HELP, REGISTRY, Command, parse_command
from bridge.core.commands.registry import ChatCommand, Registry, Who, run_command
from bridge.core.events import Author, IncomingMessage, ThreadRef

pytestmark = pytest.mark.anyio

THREAD = ThreadRef(platform="test", channel="room", thread="t1")
ALICE = Author(id="@alice:test", display_name="Alice")
BOB = Author(id="@bob:test", display_name="Bob")

HAND_WRITTEN_HELP = """\
Commands in this thread:
• `!schedule add "<cron>" [tz] <prompt>`: a prompt run on a schedule as you (`--here`: here)
• `!schedule list`: this channel's schedules, their next and last runs
• `!schedule remove <id>`: remove a schedule (its author or an approver)
• `!stop`: interrupt the agent's running turn
• `!model`: show the model; `!model <id>`: switch this thread's model (same conversation)
• `!new`: start a fresh conversation for this thread
• `!retry`: send the request a bridge restart or failover interrupted again, once
• `!status`: process, conversation, queue and usage of this thread
• `!approvals`: requests waiting for approval and this thread's allow list
• `!approvals reset`: clear this thread's allow list
• `!usage`: your, this thread's and this channel's usage (`!usage day`, `week`, `month`)
• `!budget`: the budgets that apply to you here
• `!budget extend <name> <amount> [person]`: raise a budget for this period (approvers)
• `!web` (in a DM with me): a one-time sign-in link for the web console
• `!help`: this list
Anything else is a message for the agent."""


def test_help_is_built_from_the_registry_as_it_was_written() -> None:
    assert HELP == HAND_WRITTEN_HELP == REGISTRY.help_text()


def test_every_command_has_help_and_is_parsed_by_its_name() -> None:
    assert {"stop", "model", "new", "status", "approvals", "help"} <= REGISTRY.names()
    for name in REGISTRY.names():
        entry = REGISTRY.get(name)
        assert entry is not None and entry.help and all(f"`!{name}" in h for h in entry.help)
        assert parse_command(f"!{name.upper()} x") == Command(name, "x", name.upper())
    assert parse_command("!nope") == Command("unknown", "", "nope")


@dataclass
class FakeCore:
    approvers: list[str]
    said: list[str] = field(default_factory=list)

    @property
    def config(self) -> Any:
        return SimpleNamespace(approvals=SimpleNamespace(approvers=self.approvers))

    async def say(self, thread: ThreadRef, text: str) -> None:
        self.said.append(text)


def message(author: Author, text: str) -> IncomingMessage:
    return IncomingMessage(thread=THREAD, event_id="e", message_id="m", author=author, text=text)


async def test_a_command_is_one_function_with_its_help_and_who_may_run_it() -> None:
    registry = Registry()

    async def budget(core: Any, msg: IncomingMessage, parsed: Command) -> None:
        await core.say(msg.thread, f"budget set to {parsed.arg}")

    registry.add(
        ChatCommand("budget", ("`!budget <n>`: this thread's budget",), Who.APPROVERS, budget)
    )
    core = FakeCore(approvers=[ALICE.id])
    await run_command(core, message(ALICE, "!budget 5"), Command("budget", "5", "budget"), registry)  # type: ignore[arg-type]
    await run_command(core, message(BOB, "!budget 9"), Command("budget", "9", "budget"), registry)  # type: ignore[arg-type]
    await run_command(core, message(BOB, "!what"), Command("unknown", "", "what"), registry)  # type: ignore[arg-type]
    assert core.said[0] == "budget set to 5"
    assert core.said[1] == "Bob (@bob:test): only the approvers of this bridge may run `!budget`."
    assert core.said[2].startswith("Unknown command `!what`.\nCommands in this thread:\n")
    assert "• `!budget <n>`: this thread's budget" in core.said[2]
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(ChatCommand("budget", ("x",), Who.EVERYONE, budget))

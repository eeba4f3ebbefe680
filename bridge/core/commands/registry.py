"""The chat commands, one registered function each: its name, its help, who may run it.

A command is an ``async def`` in any module of this package, decorated with :func:`command`;
the package imports every module in it, so adding a command is writing one function in one
file. ``!help`` (and the answer to an unknown command) is built from the registry.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core.approvals.hook_health import HookHealth
from bridge.core.capabilities import KnowsMembers, PostsWithoutPreviews
from bridge.core.cluster import Cluster
from bridge.core.command_text import Command
from bridge.core.disk import DiskSpace
from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.pulls.seat import Pulls
from bridge.core.router import Router
from bridge.core.schedules.scheduler import Scheduler
from bridge.core.slots import ProcessSlots
from bridge.core.store import Store
from bridge.core.team.controls import TeamControls


class Core(Protocol):
    """What a command may use of the core (:class:`bridge.core.core.Core` is one)."""

    config: Config
    store: Store
    router: Router
    cluster: Cluster
    slots: ProcessSlots
    runtime: AgyRuntime
    # Usage, budgets and the audit trail (None: a core built without them).
    team: TeamControls | None
    # The disk rules (free-space floor, workspace cap), for !status.
    disk: DiskSpace
    # Scheduled prompts (None: a core built without them).
    scheduler: Scheduler | None
    # The adapters that know channel members and direct conversations (!web), and those that
    # post without link previews, by platform.
    members: dict[str, KnowsMembers]
    quiet: dict[str, PostsWithoutPreviews]
    # Pull requests of worktree threads (None: no forge configured).
    pulls: Pulls | None
    # Threads held since their agy ran tools without the gate's hooks.
    hook_health: HookHealth | None

    async def say(self, thread: ThreadRef, text: str) -> None: ...

    async def stop(self, thread: ThreadRef, by: Author) -> None: ...

    async def conversation_reset(self, thread: ThreadRef) -> None: ...


Handler = Callable[[Core, IncomingMessage, Command], Awaitable[None]]


class Who(enum.Enum):
    """Who may run a command (everyone the access lists serve in the thread, to begin with)."""

    EVERYONE = "everyone"
    APPROVERS = "approvers"  # [approvals] approvers (everyone when that list is empty)


@dataclass(frozen=True)
class ChatCommand:
    name: str
    # Help lines, each "`!word …`: what it does" (the bullet is added).
    help: tuple[str, ...]
    who: Who
    run: Handler

    def may_run(self, author: Author, approvers: list[str]) -> bool:
        if self.who is Who.APPROVERS:
            return not approvers or author.id in approvers
        return True


class Registry:
    def __init__(self) -> None:
        self._commands: dict[str, ChatCommand] = {}

    def add(self, entry: ChatCommand) -> None:
        if entry.name in self._commands or entry.name == "unknown":
            raise ValueError(f"a chat command !{entry.name} is registered twice")
        self._commands[entry.name] = entry

    def get(self, name: str) -> ChatCommand | None:
        return self._commands.get(name)

    def names(self) -> frozenset[str]:
        return frozenset(self._commands)

    def help_text(self) -> str:
        # Registration order, with !help itself last.
        entries = sorted(self._commands.values(), key=lambda entry: entry.name == "help")
        lines = [f"• {line}" for entry in entries for line in entry.help]
        return "\n".join(
            ["Commands in this thread:", *lines, "Anything else is a message for the agent."]
        )


REGISTRY = Registry()


def command(name: str, *help: str, who: Who = Who.EVERYONE) -> Callable[[Handler], Handler]:
    """Register the decorated function as ``!name``: ``help`` its lines in ``!help``."""

    def register(run: Handler) -> Handler:
        REGISTRY.add(ChatCommand(name, help, who, run))
        return run

    return register


async def run_command(
    core: Core, message: IncomingMessage, parsed: Command, registry: Registry = REGISTRY
) -> None:
    """Carry out a parsed command: the registered function, if the author may run it."""
    entry = registry.get(parsed.name)
    if entry is None:
        await core.say(message.thread, f"Unknown command `!{parsed.word}`.\n{registry.help_text()}")
        return
    if not entry.may_run(message.author, core.config.approvals.approvers):
        await core.say(
            message.thread,
            f"{message.author.label}: only the approvers of this bridge may run `!{entry.name}`.",
        )
        return
    await entry.run(core, message, parsed)

"""The team controls' commands: !usage and !budget (docs/team-controls.md)."""

from __future__ import annotations

from bridge.core.command_text import Command
from bridge.core.commands.registry import Core, command
from bridge.core.events import IncomingMessage
from bridge.core.team import commands as team


@command(
    "usage",
    "`!usage`: your, this thread's and this channel's usage (`!usage day`, `week`, `month`)",
)
async def usage(core: Core, message: IncomingMessage, parsed: Command) -> None:
    if core.team is None:
        return
    text = await team.usage_text(core.team, message.thread, message.author, parsed.arg)
    await core.say(message.thread, text)


@command(
    "budget",
    "`!budget`: the budgets that apply to you here",
    "`!budget extend <name> <amount> [person]`: raise a budget for this period (approvers)",
)
async def budget(core: Core, message: IncomingMessage, parsed: Command) -> None:
    if core.team is None:
        return
    thread, who = message.thread, message.author
    if parsed.arg:
        # Named approvers only: with no [approvals] approvers nobody may lift a budget.
        approver = who.id in core.config.approvals.approvers
        text = await team.extend(core.team, thread, who, parsed.arg, approver)
    else:
        text = await team.budget_text(core.team, thread, who)
    await core.say(thread, text)

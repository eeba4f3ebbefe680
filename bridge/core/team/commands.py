"""``!usage`` and ``!budget``: what was used here, and the budgets that apply here.

``!usage [day|week|month]``: the author's, this thread's and this channel's usage in this
period and the last (month unless named). ``!budget``: each budget that applies to the author
here, where it stands. ``!budget extend <name> <amount> [person]``: an approver raises a
budget for the current period (``200k`` tokens, ``$5`` cost); audited.
"""

from __future__ import annotations

import time
from typing import cast

from bridge.core.events import Author, ThreadRef
from bridge.core.team.budgets import EVERYONE, amount, subject_of
from bridge.core.team.controls import TeamControls
from bridge.core.team.periods import PeriodName, period_of
from bridge.core.team.texts import budget_line, money, period_heading, sum_line, tokens_text
from bridge.core.team.usage import Filter

PERIODS = ("day", "week", "month")
EXTEND_USAGE = (
    "`!budget extend <name> <amount> [person]`: an amount is tokens (`200k`, `1.5m`) or a cost "
    "(`$5`); for a per-person budget, without a person it raises everyone's share."
)


async def usage_text(team: TeamControls, thread: ThreadRef, who: Author, arg: str) -> str:
    name = arg.strip().lower() or "month"
    if name not in PERIODS:
        return "`!usage` shows this month; `!usage day`, `!usage week` or `!usage month`."
    now = period_of(cast(PeriodName, name), time.time(), team.budgets.zone)
    pricing = team.config.pricing
    lines: list[str] = []
    for heading, period in (("This", now), ("Last", now.previous())):
        lines.append(f"**{heading} {name}: {period_heading(period)}**")
        for label, where in (
            ("You", Filter(person=who.id)),
            ("This thread", Filter(thread_key=thread.key)),
            ("This channel", Filter(channel=thread.channel)),
        ):
            lines.append(
                sum_line(label, await team.book.sum(where, period.start, period.end), pricing)
            )
    top = await team.book.top_people(Filter(channel=thread.channel), now.start, now.end)
    if top:
        shown = ", ".join(
            f"{person} {tokens_text(tokens)}"
            + (f" ({money(cost, pricing.currency)})" if pricing.enabled else "")
            for person, tokens, cost in top
        )
        lines.append(f"• Most in this channel this {name}: {shown}")
    return "\n".join(lines)


async def budget_text(team: TeamControls, thread: ThreadRef, who: Author) -> str:
    budgets = team.budgets
    if not budgets.enabled:
        return "No budgets are configured (`[[budgets]]`); `!usage` shows what was used."
    lines = []
    for budget in budgets.budgets:
        subject = subject_of(budget, who.id, thread)
        if subject is not None:
            lines.append(budget_line(await budgets.standing(budget, subject), team.currency))
    if not lines:
        return "No budget applies to you in this channel."
    return "Budgets that apply to you here:\n" + "\n".join(lines)


async def extend(
    team: TeamControls, thread: ThreadRef, who: Author, arg: str, approver: bool
) -> str:
    words = arg.split()
    if len(words) not in (3, 4) or words[0].lower() != "extend":
        return EXTEND_USAGE
    budget = team.budgets.named(words[1])
    if budget is None:
        names = ", ".join(f"`{b.label}`" for b in team.budgets.budgets) or "none configured"
        return f"There is no budget `{words[1]}` (budgets: {names})."
    if not approver:
        return f"{who.display_name or who.id}: only an approver can extend a budget."
    raised = amount(words[2])
    if raised is None:
        return f"`{words[2]}` is not an amount. {EXTEND_USAGE}"
    tokens, cost = raised
    if (tokens and budget.limit_tokens is None) or (cost and budget.limit_cost is None):
        kind = "tokens" if tokens else "cost"
        return f"Budget `{budget.label}` has no {kind} limit to raise."
    if budget.scope == "channel":
        subject = thread.channel
    else:
        subject = words[3] if len(words) == 4 and budget.scope == "user" else EVERYONE
    period = await team.budgets.extend(budget, subject, tokens, cost, who)
    await team.audit.append(
        "budget_extended",
        thread=thread,
        person=who,
        budget=budget.label,
        subject=subject,
        period=period.key,
        tokens=tokens,
        cost=cost,
    )
    what = tokens_text(tokens) + " tokens" if tokens else money(cost, team.currency)
    whose = "everyone's share" if subject == EVERYONE else f"`{subject}`"
    return (
        f"Budget `{budget.label}` raised by {what} for {whose} until {period.resets()} "
        f"(by {who.display_name or who.id})."
    )


async def status_line(team: TeamControls, thread: ThreadRef) -> str:
    """``!status``'s usage line: this thread, this month (turns as the bridge attributed them)."""
    month = period_of("month", time.time(), team.budgets.zone)
    used = await team.book.sum(Filter(thread_key=thread.key), month.start, month.end)
    return sum_line("This thread this month", used, team.config.pricing)

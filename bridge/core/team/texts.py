"""The words of the team controls: `!usage`, `!budget`, a budget's warning and refusal.

CommonMark, as every core text (docs/architecture.md, "One markup for the bridge's words").
"""

from __future__ import annotations

from bridge.core.team.budgets import EVERYONE, Standing
from bridge.core.team.periods import Period
from bridge.core.team.usage import Sum
from bridge.team_settings import PricingSection

_ADJECTIVE = {"day": "daily", "week": "weekly", "month": "monthly"}


def tokens_text(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:.2f}M"
    if count >= 10_000:
        return f"{count / 1_000:.0f}k"
    return f"{count:,}"


def money(cost: float, currency: str) -> str:
    return f"{cost:,.2f} {currency}"


def used_text(s: Standing, currency: str) -> str:
    """ "120k of 200k tokens" and/or "4.10 of 5.00 USD"."""
    parts = []
    if s.limit_tokens is not None:
        parts.append(f"{tokens_text(s.used.tokens.total)} of {tokens_text(s.limit_tokens)} tokens")
    if s.limit_cost is not None:
        parts.append(f"{money(s.used.cost, currency)} of {money(s.limit_cost, currency)}")
    return " and ".join(parts)


def whose(s: Standing, name: str = "") -> str:
    scope = s.budget.scope
    if scope == "user":
        return f"{name or s.subject}'s"
    if scope == "channel":
        return "this channel's"
    return "the team's"


def refused_text(who: str, s: Standing, currency: str) -> str:
    return (
        f"{who}: your message was not sent to the agent. Budget `{s.budget.label}` "
        f"({whose(s, who)} {_ADJECTIVE[s.budget.period]} budget) has used {used_text(s, currency)} "
        f"{s.period.label}; it resets {s.period.resets()}. Your message is kept; an approver "
        f"can raise the limit for this period with `!budget extend {s.budget.label} <amount>`."
    )


def warning_text(who: str, s: Standing, currency: str) -> str:
    return (
        f"⚠️ Budget `{s.budget.label}` ({whose(s, who)} {_ADJECTIVE[s.budget.period]} budget) is at "
        f"{s.fraction:.0%}: {used_text(s, currency)} used {s.period.label}. It resets "
        f"{s.period.resets()}."
    )


def sum_line(label: str, used: Sum, pricing: PricingSection) -> str:
    t = used.tokens
    line = (
        f"• {label}: {tokens_text(t.total)} tokens in {used.turns} turn(s) "
        f"({tokens_text(t.input)} input, {tokens_text(t.output)} output of which "
        f"{tokens_text(t.thinking)} thinking, {tokens_text(t.cache_read)} cache read)"
    )
    if pricing.enabled:
        line += f", {money(used.cost, pricing.currency)}"
    return line


def period_heading(period: Period) -> str:
    return f"{period.key.split(':', 1)[1]} ({period.name})"


def budget_line(s: Standing, currency: str) -> str:
    state = "over the limit" if s.over else ("past the warning" if s.warned else "fine")
    subject = "" if s.subject == EVERYONE else f" for `{s.subject}`"
    return (
        f"• `{s.budget.label}`{subject}: {used_text(s, currency)} {s.period.label} "
        f"({s.fraction:.0%}, {state}); resets {s.period.resets()}"
    )

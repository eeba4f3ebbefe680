"""The home view's optional sections fed from the features that hold their data: a person's
usage this period against their budgets (bridge.core.team) and the schedules they added
(bridge.core.schedules). Each is wired only when its feature is (app.py), so a chat's home
page shows a section only where there is something behind it."""

from __future__ import annotations

import time

from bridge.core.home import ScheduleLine, UsageLine
from bridge.core.schedules.scheduler import Scheduler
from bridge.core.team.controls import TeamControls
from bridge.core.team.periods import period_of
from bridge.core.team.usage import Filter


class TeamUsage:
    """A person's tokens this month, and each per-person token budget that holds for them in
    every channel, where it stands (a budget narrowed to some channels is shown by !budget
    in those channels, not here)."""

    def __init__(self, team: TeamControls):
        self.team = team

    async def usage_for(self, platform: str, user_id: str) -> list[UsageLine]:
        team = self.team
        month = period_of("month", time.time(), team.budgets.zone)
        used = await team.book.sum(Filter(person=user_id), month.start, month.end)
        lines = [UsageLine("tokens this month", used.tokens.total)]
        for budget in team.budgets.budgets:
            if (
                budget.scope != "user"
                or budget.channels
                or (budget.users and user_id not in budget.users)
                or budget.limit_tokens is None
            ):
                continue
            standing = await team.budgets.standing(budget, user_id)
            lines.append(
                UsageLine(
                    f"tokens this {budget.period} ({budget.label})",
                    standing.used.tokens.total,
                    standing.limit_tokens,
                )
            )
        return lines


class PersonSchedules:
    """The schedules a person added in the chat, with their next run."""

    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler

    async def schedules_for(self, platform: str, user_id: str) -> list[ScheduleLine]:
        return [
            ScheduleLine(thread=s.thread, when=s.when, what=s.what, next_at=s.next_at)
            for s in await self.scheduler.person_schedules(platform, user_id)
        ]

"""Budgets: which apply to a message, where each stands, and the words at each limit.

The store counts (:class:`bridge.core.team.usage.UsageBook`), never this process's memory, so
several instances on one PostgreSQL hold one budget together. A budget is checked before a
turn starts and before a message is injected into a running turn: a running turn is never cut,
so two turns that start together just under a limit may both run; each is counted once, and
the next message is refused.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass

from bridge.core.events import Author, ThreadRef
from bridge.core.store.rows import Database
from bridge.core.team.periods import Period, period_of
from bridge.core.team.usage import Filter, Sum, Tokens, UsageBook
from bridge.team_settings import BudgetSection, PricingSection

# The subject of a budget every person or channel shares (scope "all"), and of an extension
# that raises every subject's limit.
EVERYONE = "*"


@dataclass(frozen=True, slots=True)
class Standing:
    """Where one budget stands for one subject in its current period."""

    budget: BudgetSection
    subject: str
    period: Period
    used: Sum
    limit_tokens: int | None
    limit_cost: float | None

    @property
    def fraction(self) -> float:
        """The larger of tokens used / limit and cost used / limit."""
        parts = [0.0]
        if self.limit_tokens:
            parts.append(self.used.tokens.total / self.limit_tokens)
        if self.limit_cost:
            parts.append(self.used.cost / self.limit_cost)
        return max(parts)

    @property
    def over(self) -> bool:
        return self.fraction >= 1.0

    @property
    def warned(self) -> bool:
        return self.fraction >= self.budget.warn_at


def subject_of(budget: BudgetSection, author_id: str, ref: ThreadRef) -> str | None:
    """Whose share of ``budget`` a message by ``author_id`` in ``ref`` spends; None when the
    budget does not apply to it."""
    if budget.users and author_id not in budget.users:
        return None
    if budget.channels and ref.channel not in budget.channels:
        return None
    if budget.scope == "user":
        return author_id
    if budget.scope == "channel":
        return ref.channel
    return EVERYONE


def counted(budget: BudgetSection, subject: str) -> Filter:
    """The usage rows that count against ``budget`` for ``subject``."""
    people, channels = tuple(budget.users), tuple(budget.channels)
    if budget.scope == "user":
        return Filter(person=subject, channels=channels)
    if budget.scope == "channel":
        return Filter(channel=subject, people=people)
    return Filter(people=people, channels=channels)


def amount(text: str) -> tuple[int, float] | None:
    """``200k`` / ``1.5m`` / ``50000`` tokens, or ``$5`` / ``5$`` / ``5 USD`` cost."""
    value = text.strip().replace(",", "").replace("_", "")
    cost = re.fullmatch(
        r"(?:\$\s*([0-9]+(?:\.[0-9]+)?)|([0-9]+(?:\.[0-9]+)?)\s*(?:\$|[A-Za-z]{3}))", value
    )
    if cost:
        number = float(cost.group(1) or cost.group(2))
        return (0, number) if number > 0 and math.isfinite(number) else None
    tokens = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([kKmM]?)", value)
    if not tokens:
        return None
    scale = {"": 1, "k": 1_000, "m": 1_000_000}[tokens.group(2).lower()]
    count = int(float(tokens.group(1)) * scale)
    return (count, 0.0) if count > 0 else None


class Budgets:
    """The configured budgets, counted in the store."""

    def __init__(
        self,
        db: Database,
        book: UsageBook,
        budgets: list[BudgetSection],
        pricing: PricingSection,
        zone: str = "UTC",
    ):
        self._db = db
        self.book = book
        self.budgets = budgets
        self.pricing = pricing
        self.zone = zone

    @property
    def enabled(self) -> bool:
        return bool(self.budgets)

    def named(self, name: str) -> BudgetSection | None:
        return next((b for b in self.budgets if b.label == name), None)

    async def standing(
        self, budget: BudgetSection, subject: str, now: float | None = None
    ) -> Standing:
        [found] = await self._standings([(budget, subject)], now)
        return found

    async def check(
        self, author: Author, ref: ThreadRef, now: float | None = None
    ) -> list[Standing]:
        """Every budget that applies to ``author`` writing in ``ref``, where it stands: one
        query for them all (it is on every turn's path)."""
        wanted = [
            (budget, subject)
            for budget in self.budgets
            if (subject := subject_of(budget, author.id, ref)) is not None
        ]
        return await self._standings(wanted, now) if wanted else []

    async def _standings(
        self, wanted: list[tuple[BudgetSection, str]], now: float | None
    ) -> list[Standing]:
        moment = time.time() if now is None else now
        periods = [period_of(budget.period, moment, self.zone) for budget, _ in wanted]
        # One row: for each budget, its usage (tokens, cost) and extensions (tokens, cost) in
        # its period, as scalar subqueries (each served by a covering index).
        columns: list[str] = []
        params: list[object] = []
        for n, ((budget, subject), period) in enumerate(zip(wanted, periods, strict=True)):
            clause, where = counted(budget, subject).where()
            usage = " FROM usage_shares WHERE at >= ? AND at < ?" + clause
            extension = (
                " FROM budget_extensions WHERE budget = ? AND period = ? AND subject IN (?, ?)"
            )
            columns += [
                f"(SELECT COALESCE(SUM(total_tokens), 0){usage}) AS t{n}",
                f"(SELECT COALESCE(SUM(cost), 0){usage}) AS c{n}",
                f"(SELECT COALESCE(SUM(tokens), 0){extension}) AS et{n}",
                f"(SELECT COALESCE(SUM(cost), 0){extension}) AS ec{n}",
            ]
            ext = [budget.label, period.key, subject, EVERYONE]
            params += [period.start, period.end, *where, period.start, period.end, *where]
            params += [*ext, *ext]
        [row] = await self._db.fetch("SELECT " + ", ".join(columns), params)
        found = []
        for n, ((budget, subject), period) in enumerate(zip(wanted, periods, strict=True)):
            used = Sum(Tokens(total=int(row[f"t{n}"])), float(row[f"c{n}"]))
            extra_tokens, extra_cost = int(row[f"et{n}"]), float(row[f"ec{n}"])
            found.append(
                Standing(
                    budget,
                    subject,
                    period,
                    used,
                    budget.limit_tokens + extra_tokens if budget.limit_tokens is not None else None,
                    budget.limit_cost + extra_cost if budget.limit_cost is not None else None,
                )
            )
        return found

    async def first_notice(self, standing: Standing, thread_key: str) -> bool:
        """True once per budget, subject, period and thread: the warning is told then."""
        changed = await self._db.execute(
            "INSERT INTO budget_notices (budget, subject, period, thread_key, at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (budget, subject, period, thread_key)"
            " DO NOTHING",
            (standing.budget.label, standing.subject, standing.period.key, thread_key, time.time()),
        )
        return changed > 0

    async def extend(
        self, budget: BudgetSection, subject: str, tokens: int, cost: float, by: Author
    ) -> Period:
        """Raise ``budget`` for ``subject`` (or everyone's share) in the current period."""
        period = period_of(budget.period, time.time(), self.zone)
        await self._db.execute(
            "INSERT INTO budget_extensions (budget, subject, period, tokens, cost, by_json, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                budget.label,
                subject,
                period.key,
                tokens,
                cost,
                json.dumps(by.model_dump(mode="json")),
                time.time(),
            ),
        )
        return period

"""Budgets as a turn policy (:mod:`bridge.core.thread.turn_policy`).

The policy is asked inside the thread's state machine, with no I/O; budgets are counted in the
store. So the turn reads where each author's budgets stand from the store just before it asks
(:meth:`bridge.core.team.controls.TeamControls.prepare`), hands that reading to the policy, and
the policy judges the ask against it: several instances share one count, and the policy stays
a pure function of the ask and what was read for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.core.team.budgets import Standing
from bridge.core.team.texts import refused_text
from bridge.core.thread.turn_policy import GO, Ask, Refuse, Verdict

OTHERS_TOO = (
    "The other messages of this turn were not sent to the agent either (one turn is sent or "
    "refused whole): write them again."
)


@dataclass(frozen=True, slots=True)
class Reading:
    """Where the budgets of an ask's authors stood when it was asked."""

    ask: Ask
    # author id -> the standing of every budget that applies to them here
    standings: dict[str, tuple[Standing, ...]]

    def over(self) -> list[tuple[str, Standing]]:
        """(author's name, the first budget they are over) for each author over one."""
        found = []
        for author in dict.fromkeys(self.ask.who):
            standing = next((s for s in self.standings.get(author.id, ()) if s.over), None)
            if standing is not None:
                found.append((author.display_name or author.id, standing))
        return found


class BudgetPolicy:
    """Refuses a turn or an injection whose author is over a budget."""

    def __init__(self, currency: str):
        self.currency = currency
        # The reading for the ask each thread is about to make (taken by that ask).
        self._readings: dict[str, Reading] = {}

    def expect(self, reading: Reading) -> None:
        self._readings[reading.ask.where.key] = reading

    def judge(self, ask: Ask) -> Verdict:
        reading = self._readings.pop(ask.where.key, None)
        if reading is None or reading.ask is not ask:
            return GO  # not read for this ask: nothing applies (no budget, or not this one)
        over = reading.over()
        if not over:
            return GO
        texts = [refused_text(name, standing, self.currency) for name, standing in over]
        if ask.kind == "turn" and len({a.id for a in ask.who}) > len(over):
            texts.append(OTHERS_TOO)
        return Refuse("\n".join(texts))

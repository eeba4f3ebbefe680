"""Prometheus counters of usage and budgets, on the bridge's own registry.

Labels are bounded: the first :data:`MAX_VALUES` distinct models, channels and people each get
their own label value, later ones are counted as ``other`` (a channel the whole company writes
in must not grow the scrape without end).
"""

from __future__ import annotations

from prometheus_client import Counter

from bridge.core.team.usage import TurnUsage
from bridge.metrics import PREFIX, Metrics

MAX_VALUES = 50
OTHER = "other"


class _Bounded:
    def __init__(self, limit: int = MAX_VALUES):
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self.seen:
            return value
        if len(self.seen) >= self.limit:
            return OTHER
        self.seen.add(value)
        return value


class UsageMetrics:
    def __init__(self, metrics: Metrics, limit: int = MAX_VALUES):
        r = metrics.registry
        self._tokens = Counter(
            PREFIX + "usage_tokens_total",
            "Tokens used by turns (input plus output), by model, channel and person.",
            ["model", "channel", "person"],
            registry=r,
        )
        self._cost = Counter(
            PREFIX + "usage_cost_total",
            "Cost of turns in the configured currency, by model, channel and person.",
            ["model", "channel", "person"],
            registry=r,
        )
        self._refusals = Counter(
            PREFIX + "budget_refusals_total",
            "Messages refused over a budget, by budget.",
            ["budget"],
            registry=r,
        )
        self._model = _Bounded(limit)
        self._channel = _Bounded(limit)
        self._person = _Bounded(limit)

    def turn(self, channel: str, usage: TurnUsage) -> None:
        model, where = self._model(usage.model), self._channel(channel)
        for share in usage.shares:
            labels = {"model": model, "channel": where, "person": self._person(share.person)}
            self._tokens.labels(**labels).inc(share.tokens.total)
            if share.cost is not None:
                self._cost.labels(**labels).inc(share.cost)

    def refused(self, budget: str) -> None:
        self._refusals.labels(budget=budget).inc()

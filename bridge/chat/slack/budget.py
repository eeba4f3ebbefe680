"""One rate budget for the whole app: a token bucket per Slack method (per channel where Slack
counts per channel), shared by every reply.

Slack limits each Web API method per workspace and app ("tiers"): past a method's rate it
answers HTTP 429 with ``Retry-After``. A single reply editing once a second already spends
``chat.update``'s whole Tier 3, and a few streaming replies together exceed Tier 4, so the
replies must share what the app may spend:

- an *urgent* call (a final answer, a notice) waits for a token and may use a reserve that
  intermediate updates leave alone;
- an *optional* call (a live update of a streaming answer, the tool lines, the status refresh)
  never waits: with no token to spare it raises :class:`Deferred` at once, saying when to come
  back, and the reply's pump rests until then, so a rate limit never stalls the final answer
  behind a tool-line update;
- a 429 blocks the method (and channel) for everyone until ``Retry-After`` has passed, however
  long Slack asked for.

The buckets hold at most ``burst`` tokens and refill so that no window of a tier's length sees
more calls than the tier allows (``burst + rate * window <= limit``).

Why not aiolimiter: it offers a blocking ``acquire`` and a capacity check, but not the two
priorities with a reserve, the shared penalty after a 429, or the fill level a reply uses to
slow its flushes, and those are the point here.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import anyio

from bridge.chat.slack.tiers import SLACK_TIERS, TIER_2, TIER_3, TIER_4, Tier

# The tiers live in one table, which the tests' fake Slack reads too.
__all__ = ["SLACK_TIERS", "TIER_2", "TIER_3", "TIER_4", "Deferred", "RateBudget", "Tier"]

# How much of a bucket optional calls leave for urgent ones (a share, at least one token).
_RESERVE = 0.2
# The slowest a reply's flushes get as buckets run low, as a multiple of its interval.
_MAX_SLOWDOWN = 10.0

_optional: contextvars.ContextVar[bool] = contextvars.ContextVar("slack_optional", default=False)


class Deferred(Exception):
    """An optional call was not made: no token to spare. Try again after ``wait`` seconds."""

    def __init__(self, method: str, wait: float) -> None:
        super().__init__(f"{method} deferred for {wait:.2f} s")
        self.method = method
        self.wait = wait


@dataclass
class _Bucket:
    tier: Tier
    tokens: float
    updated: float
    blocked_until: float = -math.inf
    urgent_waiting: int = 0

    def refill(self, now: float) -> None:
        elapsed = max(now - self.updated, 0.0)
        self.tokens = min(self.tier.capacity, self.tokens + elapsed * self.tier.rate)
        self.updated = now

    def wait_for(self, now: float, need: float) -> float:
        """Seconds until ``need`` tokens are there (and the method is not blocked)."""
        short = max(need - self.tokens, 0.0)
        return max(short / self.tier.rate, self.blocked_until - now, 0.0)


@dataclass
class MethodStats:
    calls: int = 0
    deferred: int = 0
    limited: int = 0


@dataclass
class RateBudget:
    tiers: dict[str, Tier] = field(default_factory=lambda: dict(SLACK_TIERS))
    clock: Callable[[], float] = anyio.current_time
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict, repr=False)
    stats: dict[str, MethodStats] = field(default_factory=dict)

    # ----- priorities -------------------------------------------------------------------------

    @staticmethod
    @contextlib.contextmanager
    def optional() -> Iterator[None]:
        """Calls made in this block are optional: :class:`Deferred` instead of waiting."""
        token = _optional.set(True)
        try:
            yield
        finally:
            _optional.reset(token)

    @staticmethod
    def is_optional() -> bool:
        return _optional.get()

    # ----- spending ---------------------------------------------------------------------------

    def _bucket(self, method: str, channel: str | None) -> _Bucket | None:
        tier = self.tiers.get(method)
        if tier is None:
            return None
        # ``channel``: the scope key the caller computed (tiers.scope_key), or a channel id.
        key = (method, (channel or "") if tier.scope != "app" else "")
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tier, tier.capacity, self.clock())
        bucket.refill(self.clock())
        return bucket

    def _stats(self, method: str) -> MethodStats:
        return self.stats.setdefault(method, MethodStats())

    def try_take(self, method: str, channel: str | None = None) -> float:
        """For an optional call: 0 when a token was taken, else the seconds to wait."""
        bucket = self._bucket(method, channel)
        if bucket is None:
            self._stats(method).calls += 1
            return 0.0
        now = self.clock()
        need = min(1.0 + max(1.0, _RESERVE * bucket.tier.capacity), bucket.tier.capacity)
        wait = bucket.wait_for(now, need)
        if bucket.urgent_waiting:
            wait = max(wait, 1.0 / bucket.tier.rate)
        if wait > 0:
            self._stats(method).deferred += 1
            return wait
        bucket.tokens -= 1.0
        self._stats(method).calls += 1
        return 0.0

    async def take(self, method: str, channel: str | None = None) -> None:
        """For an urgent call: wait for a token (the reserve included)."""
        bucket = self._bucket(method, channel)
        if bucket is None:
            self._stats(method).calls += 1
            return
        bucket.urgent_waiting += 1
        try:
            while True:
                bucket.refill(self.clock())
                wait = bucket.wait_for(self.clock(), 1.0)
                if wait <= 0:
                    break
                await anyio.sleep(wait)
        finally:
            bucket.urgent_waiting -= 1
        bucket.tokens -= 1.0
        self._stats(method).calls += 1

    async def spend(self, method: str, channel: str | None = None) -> None:
        """Take a token as the current priority says: wait, or raise :class:`Deferred`."""
        if self.is_optional():
            wait = self.try_take(method, channel)
            if wait > 0:
                raise Deferred(method, wait)
        else:
            await self.take(method, channel)

    def limited(self, method: str, channel: str | None, retry_after: float) -> None:
        """Slack answered 429: nobody calls ``method`` (in ``channel``) for ``retry_after``."""
        self._stats(method).limited += 1
        bucket = self._bucket(method, channel)
        if bucket is None:
            return
        bucket.tokens = min(bucket.tokens, 0.0)
        bucket.blocked_until = max(bucket.blocked_until, self.clock() + retry_after)

    # ----- pacing -----------------------------------------------------------------------------

    def level(self, method: str, channel: str | None = None) -> float:
        """How full the bucket is, 0 to 1 (1 for a method without a tier)."""
        bucket = self._bucket(method, channel)
        if bucket is None:
            return 1.0
        if bucket.blocked_until > self.clock():
            return 0.0
        return max(bucket.tokens, 0.0) / bucket.tier.capacity

    def interval(self, base: float, methods: list[tuple[str, str | None]]) -> float:
        """A reply's flush interval: ``base`` while its buckets are at least half full, longer
        as they run low (up to ten times)."""
        lowest = min((self.level(m, c) for m, c in methods), default=1.0)
        if lowest >= 0.5:
            return base
        return base * min(0.5 / max(lowest, 0.5 / _MAX_SLOWDOWN), _MAX_SLOWDOWN)

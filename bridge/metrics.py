"""Prometheus metrics of one bridge: turns, injections, errors, retries and live gauges.

Every ``Metrics`` owns its own registry (never prometheus_client's global one), so several
bridges in one process, and the tests, never share counters.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from bridge import __version__

log = logging.getLogger(__name__)

PREFIX = "agy_bridge_"
TURN_STATES = ("done", "error", "interrupted")
# A person answers an approval within seconds to minutes; the default timeout is 10 minutes.
APPROVAL_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
# Agent turns run from a quick answer (a second or two) to long builds and test runs (an hour).
TURN_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)


class Metrics:
    """The bridge's counters, histogram and gauges, rendered in the Prometheus text format."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Platforms whose turn outcomes exist already (created once, not at every turn).
        self._platforms_seen: set[str] = set()
        self._turns_started = Counter(
            PREFIX + "turns_started_total", "Turns started.", ["platform"], registry=r
        )
        self._turns = Counter(
            PREFIX + "turns_total", "Turns finished, by outcome.", ["platform", "state"], registry=r
        )
        self._turn_duration = Histogram(
            PREFIX + "turn_duration_seconds",
            "Wall time of a turn, from start to its outcome.",
            ["platform"],
            buckets=TURN_BUCKETS,
            registry=r,
        )
        self._injections = Counter(
            PREFIX + "injections_total",
            "Messages handed to a running turn.",
            ["platform"],
            registry=r,
        )
        self._queued = Counter(
            PREFIX + "queued_messages_total",
            "Messages that waited for the next turn.",
            ["platform"],
            registry=r,
        )
        self._approvals = Counter(
            PREFIX + "approval_requests_total",
            "Gated tool calls, by decision (allowed_by_policy, denied_by_policy, approved, "
            "always, denied, timed_out, stopped, expired).",
            ["decision"],
            registry=r,
        )
        self._approval_wait = Histogram(
            PREFIX + "approval_wait_seconds",
            "Time from asking in the thread to the decision.",
            buckets=APPROVAL_BUCKETS,
            registry=r,
        )
        self._errors = Counter(PREFIX + "errors_total", "Errors, by kind.", ["kind"], registry=r)
        self._chat_retries = Counter(
            PREFIX + "chat_api_retries_total",
            "Chat API calls retried, by reason (429: each 429 answered, once; 5xx, connection: "
            "the client's own retries; transient: the bridge's retry after those).",
            ["platform", "reason"],
            registry=r,
        )
        self._feedback = Counter(
            PREFIX + "answer_feedback_total",
            "Clicks on the feedback buttons under answers, by rating (positive, negative).",
            ["platform", "rating"],
            registry=r,
        )
        self._bad_lines = Counter(
            PREFIX + "agy_bad_lines_total", "Unreadable lines on agy's stdout.", registry=r
        )
        self._live_processes = Gauge(
            PREFIX + "live_processes", "agy processes running now.", registry=r
        )
        self._queued_threads = Gauge(
            PREFIX + "queued_threads", "Threads waiting for a free agy slot.", registry=r
        )
        self._pending_messages = Gauge(
            PREFIX + "pending_messages", "Messages stored but not yet seen by agy.", registry=r
        )
        build_info = Gauge(
            PREFIX + "build_info", "The running bridge's version.", ["version"], registry=r
        )
        build_info.labels(version=__version__).set(1)
        # Until the core says where to read them, the gauges are unknown, not zero.
        self.set_sources(_unknown, _unknown, None)

    def turn_started(self, platform: str) -> None:
        self._turns_started.labels(platform=platform).inc()
        # Every outcome exists from the first turn on, so rate() and ratios see a 0, not a gap.
        if platform not in self._platforms_seen:
            self._platforms_seen.add(platform)
            for state in TURN_STATES:
                self._turns.labels(platform=platform, state=state)

    def turn_finished(self, platform: str, state: str, seconds: float) -> None:
        """``state`` is one of done, error, interrupted."""
        if state not in TURN_STATES:
            raise ValueError(f"unknown turn state {state!r}; expected one of {TURN_STATES}")
        self._turns.labels(platform=platform, state=state).inc()
        # A clock step backwards must not produce a negative duration.
        self._turn_duration.labels(platform=platform).observe(max(0.0, seconds))

    def injected(self, platform: str, count: int) -> None:
        """``count`` messages were handed to a running turn at once."""
        if count < 0:
            raise ValueError(f"injected count must not be negative, got {count}")
        self._injections.labels(platform=platform).inc(count)

    def queued(self, platform: str) -> None:
        self._queued.labels(platform=platform).inc()

    def approval(self, decision: str, waited: float | None = None) -> None:
        """One tool call decided; ``waited``: seconds it waited for a person, when asked."""
        self._approvals.labels(decision).inc()
        if waited is not None:
            self._approval_wait.observe(waited)

    def error(self, kind: str) -> None:
        """``kind`` names where: agy_start, agy_exit, chat_post, store, hook, ..."""
        self._errors.labels(kind=kind).inc()

    def chat_retry(self, platform: str, reason: str) -> None:
        """``reason``: 429, 5xx, connection or transient."""
        self._chat_retries.labels(platform=platform, reason=reason).inc()

    def feedback(self, platform: str, positive: bool) -> None:
        self._feedback.labels(
            platform=platform, rating="positive" if positive else "negative"
        ).inc()

    def bad_line(self) -> None:
        self._bad_lines.inc()

    def set_sources(
        self,
        live_processes: Callable[[], float],
        queued_threads: Callable[[], float],
        pending_messages: Callable[[], float] | None = None,
    ) -> None:
        """Read the gauges through these callbacks at scrape time.

        Without ``pending_messages`` that gauge reads NaN (unknown). A callback that raises
        makes its gauge NaN for that scrape instead of failing the whole scrape.
        """
        self._live_processes.set_function(_guarded("live_processes", live_processes))
        self._queued_threads.set_function(_guarded("queued_threads", queued_threads))
        self._pending_messages.set_function(
            _guarded("pending_messages", pending_messages or _unknown)
        )

    def render(self) -> tuple[bytes, str]:
        """The registry in the Prometheus text format, with its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4


def _unknown() -> float:
    return math.nan


def _guarded(name: str, source: Callable[[], float]) -> Callable[[], float]:
    def read() -> float:
        try:
            return float(source())
        except Exception:
            log.warning("metrics: reading gauge %s failed", name, exc_info=True)
            return math.nan

    return read

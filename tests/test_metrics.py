"""Metrics: counters, the turn histogram and the scrape-time gauges, read back from the text."""

from __future__ import annotations

import math

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bridge import __version__
from bridge.metrics import TURN_BUCKETS, Metrics


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    body, _ = metrics.render()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, frozenset(labels.items())))


def test_turn_counters_move_per_platform_and_state() -> None:
    m = Metrics()
    m.turn_started("slack")
    m.turn_started("slack")
    m.turn_started("matrix")
    m.turn_finished("slack", "done", 3.0)
    m.turn_finished("slack", "error", 4.0)
    m.turn_finished("matrix", "interrupted", 5.0)

    assert value(m, "agy_bridge_turns_started_total", platform="slack") == 2
    assert value(m, "agy_bridge_turns_started_total", platform="matrix") == 1
    assert value(m, "agy_bridge_turns_total", platform="slack", state="done") == 1
    assert value(m, "agy_bridge_turns_total", platform="slack", state="error") == 1
    assert value(m, "agy_bridge_turns_total", platform="matrix", state="interrupted") == 1
    # Outcomes that never happened still read 0 once the platform has started a turn.
    assert value(m, "agy_bridge_turns_total", platform="matrix", state="done") == 0
    assert value(m, "agy_bridge_turns_total", platform="slack", state="interrupted") == 0


def test_turn_duration_histogram_buckets_from_a_second_to_an_hour() -> None:
    m = Metrics()
    m.turn_finished("slack", "done", 0.5)
    m.turn_finished("slack", "done", 90.0)
    m.turn_finished("slack", "done", 5000.0)

    def bucket(le: str) -> float | None:
        return value(m, "agy_bridge_turn_duration_seconds_bucket", platform="slack", le=le)

    assert TURN_BUCKETS[0] == 1.0 and TURN_BUCKETS[-1] == 3600.0
    assert bucket("1.0") == 1
    assert bucket("60.0") == 1
    assert bucket("120.0") == 2
    assert bucket("3600.0") == 2
    assert bucket("+Inf") == 3
    assert value(m, "agy_bridge_turn_duration_seconds_count", platform="slack") == 3
    assert value(m, "agy_bridge_turn_duration_seconds_sum", platform="slack") == 5090.5


def test_negative_duration_is_observed_as_zero() -> None:
    m = Metrics()
    m.turn_finished("slack", "done", -2.0)
    assert value(m, "agy_bridge_turn_duration_seconds_sum", platform="slack") == 0.0
    assert value(m, "agy_bridge_turn_duration_seconds_count", platform="slack") == 1


def test_unknown_turn_state_is_refused() -> None:
    m = Metrics()
    with pytest.raises(ValueError, match="cancelled"):
        m.turn_finished("slack", "cancelled", 1.0)
    assert value(m, "agy_bridge_turns_total", platform="slack", state="cancelled") is None


def test_injections_queue_errors_retries_and_bad_lines_count() -> None:
    m = Metrics()
    m.injected("slack", 3)
    m.injected("slack", 0)
    m.injected("matrix", 1)
    m.queued("matrix")
    m.queued("matrix")
    m.error("agy_exit")
    m.error("agy_exit")
    m.error("store")
    m.chat_retry("slack", "429")
    m.chat_retry("slack", "5xx")
    m.chat_retry("slack", "429")
    m.bad_line()

    assert value(m, "agy_bridge_injections_total", platform="slack") == 3
    assert value(m, "agy_bridge_injections_total", platform="matrix") == 1
    assert value(m, "agy_bridge_queued_messages_total", platform="matrix") == 2
    assert value(m, "agy_bridge_errors_total", kind="agy_exit") == 2
    assert value(m, "agy_bridge_errors_total", kind="store") == 1
    assert value(m, "agy_bridge_chat_api_retries_total", platform="slack", reason="429") == 2
    assert value(m, "agy_bridge_chat_api_retries_total", platform="slack", reason="5xx") == 1
    assert value(m, "agy_bridge_agy_bad_lines_total") == 1


def test_negative_injection_count_is_refused() -> None:
    m = Metrics()
    with pytest.raises(ValueError):
        m.injected("slack", -1)


def test_build_info_names_the_version() -> None:
    m = Metrics()
    assert value(m, "agy_bridge_build_info", version=__version__) == 1


def test_two_instances_never_share_counters() -> None:
    first, second = Metrics(), Metrics()
    first.turn_started("slack")
    first.error("hook")
    second.bad_line()

    assert value(first, "agy_bridge_turns_started_total", platform="slack") == 1
    assert value(second, "agy_bridge_turns_started_total", platform="slack") is None
    assert value(second, "agy_bridge_errors_total", kind="hook") is None
    assert value(first, "agy_bridge_agy_bad_lines_total") == 0
    assert value(second, "agy_bridge_agy_bad_lines_total") == 1
    # Nothing lands in prometheus_client's process-wide registry.
    assert b"agy_bridge_" not in generate_latest(REGISTRY)


def test_gauges_read_their_sources_at_scrape_time() -> None:
    m = Metrics()
    state = {"live": 2, "queued": 1, "pending": 7}
    m.set_sources(lambda: state["live"], lambda: state["queued"], lambda: state["pending"])

    assert value(m, "agy_bridge_live_processes") == 2
    assert value(m, "agy_bridge_queued_threads") == 1
    assert value(m, "agy_bridge_pending_messages") == 7

    state.update(live=4, queued=0, pending=3)
    assert value(m, "agy_bridge_live_processes") == 4
    assert value(m, "agy_bridge_queued_threads") == 0
    assert value(m, "agy_bridge_pending_messages") == 3


def test_gauges_without_a_source_read_unknown() -> None:
    m = Metrics()
    live = value(m, "agy_bridge_live_processes")
    assert live is not None and math.isnan(live)

    m.set_sources(lambda: 1, lambda: 0)
    assert value(m, "agy_bridge_live_processes") == 1
    pending = value(m, "agy_bridge_pending_messages")
    assert pending is not None and math.isnan(pending)


def test_a_failing_source_does_not_fail_the_scrape() -> None:
    def broken() -> int:
        raise RuntimeError("store closed")

    m = Metrics()
    m.turn_started("slack")
    m.set_sources(broken, lambda: 5)

    live = value(m, "agy_bridge_live_processes")
    assert live is not None and math.isnan(live)
    assert value(m, "agy_bridge_queued_threads") == 5
    assert value(m, "agy_bridge_turns_started_total", platform="slack") == 1


def test_render_is_the_prometheus_text_format() -> None:
    m = Metrics()
    m.bad_line()
    body, content_type = m.render()
    assert content_type.startswith("text/plain")
    assert "version=0.0.4" in content_type
    text = body.decode()
    assert "# TYPE agy_bridge_agy_bad_lines_total counter" in text
    assert "# TYPE agy_bridge_turn_duration_seconds histogram" in text
    assert "# TYPE agy_bridge_live_processes gauge" in text

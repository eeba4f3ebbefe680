"""[[budgets]], [pricing] and the [bridge] keys of the team controls, as the config reads them;
calendar periods in the configured time zone."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from bridge.config import ConfigError, build_config
from bridge.core.team.periods import period_of


def test_defaults() -> None:
    config = build_config({}, environ={})
    assert config.bridge.timezone == "UTC" and config.bridge.audit_days == 90
    assert config.budgets == [] and not config.pricing.enabled


def test_a_budget_needs_a_limit_and_a_known_scope() -> None:
    with pytest.raises(ConfigError, match="limit_tokens and/or limit_cost"):
        build_config({"budgets": [{"scope": "user"}]}, environ={})
    with pytest.raises(ConfigError, match=r"budgets\.0\.scope"):
        build_config({"budgets": [{"scope": "room", "limit_tokens": 5}]}, environ={})
    with pytest.raises(ConfigError, match=r"budgets\.0\.warn_at"):
        build_config({"budgets": [{"scope": "all", "limit_tokens": 5, "warn_at": 2}]}, environ={})


def test_budget_names_default_from_scope_and_period_and_must_differ() -> None:
    one = {"scope": "user", "period": "day", "limit_tokens": 5}
    config = build_config({"budgets": [one, {**one, "name": "other"}]}, environ={})
    assert [b.label for b in config.budgets] == ["user-day", "other"]
    with pytest.raises(ConfigError, match="distinct names: user-day"):
        build_config({"budgets": [one, one]}, environ={})


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown time zone `Mars/Olympus`"):
        build_config({"bridge": {"timezone": "Mars/Olympus"}}, environ={})


def test_periods_are_calendar_periods_in_the_zone() -> None:
    paris = ZoneInfo("Europe/Paris")
    # Sunday 2026-03-29 12:00 in Paris, the day clocks go forward (23 hours long).
    now = datetime(2026, 3, 29, 12, 0, tzinfo=paris).timestamp()
    day = period_of("day", now, "Europe/Paris")
    assert day.key == "day:2026-03-29" and day.end - day.start == 23 * 3600
    assert datetime.fromtimestamp(day.start, paris).hour == 0
    week = period_of("week", now, "Europe/Paris")
    assert week.key == "week:2026-03-23"  # from Monday
    month = period_of("month", now, "Europe/Paris")
    assert month.key == "month:2026-03" and month.previous().key == "month:2026-02"
    assert month.resets() == "2026-04-01 00:00 CEST"
    december = period_of("month", datetime(2026, 12, 31, 23, 0, tzinfo=paris).timestamp(), "UTC")
    assert december.key == "month:2026-12" and december.resets() == "2027-01-01 00:00 UTC"

"""Cron expressions through cronsim: clear errors at config load, and the daylight-saving
transitions as cronsim documents them (a time that does not exist runs at the first minute
after the gap; a time that exists twice runs once, at its first occurrence)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bridge.config import ConfigError, build_config
from bridge.cron_times import BadCron, check, duration, latest_at_or_before, next_after
from tests.core.schedules.fake_clock import utc


def schedule(**fields: Any) -> dict[str, Any]:
    entry = {"name": "n", "cron": "0 9 * * *", "channel": "C1", "prompt": "p"} | fields
    return {"schedules": [entry]}


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"cron": "61 * * * *"}, "schedule `n`: `61 * * * *` is not a valid cron expression"),
        ({"cron": "0 9 * *"}, "it needs five fields"),
        ({"cron": "0 0 9 * * *"}, "it has 6"),
        ({"cron": "0 0 30 2 *"}, "is not a valid cron expression: Bad day-of-month"),
        ({"timezone": "Europe/Atlantis"}, "unknown time zone `Europe/Atlantis`"),
        ({"channel": "", "room": ""}, "needs exactly one of `channel` or `room`"),
        ({"catch_up": "soon"}, "`soon` is not a duration"),
        ({"name": "a b"}, "letters, digits, - and _ only"),
    ],
)
def test_a_bad_schedule_is_refused_at_load_with_the_reason(
    fields: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match="schedules") as raised:
        build_config(schedule(**fields), environ={})
    assert words in str(raised.value)


def test_a_schedule_must_be_in_a_served_channel_and_named_once() -> None:
    served = {"slack": {"allowed_channels": ["C2"]}}
    with pytest.raises(ConfigError, match="the bridge does not serve C1"):
        build_config(schedule() | served, environ={})
    twice = {"schedules": schedule()["schedules"] * 2}
    with pytest.raises(ConfigError, match="schedules need distinct names: n"):
        build_config(twice, environ={})
    config = build_config(schedule(catch_up="1h30m", room="!r:x", channel=""), environ={})
    [entry] = config.schedules
    assert entry.catch_up == 5400 and entry.platform == "matrix" and entry.thread == "new"


def test_durations() -> None:
    assert duration("1h") == 3600 and duration("90m") == 5400 and duration(45) == 45
    for bad in ("", "h", "1d", "-5m"):
        with pytest.raises(ValueError):
            duration(bad)


def test_the_expression_is_checked_in_its_zone() -> None:
    check("0 9 * * 1-5", "Europe/Paris")
    with pytest.raises(BadCron, match="unknown time zone"):
        check("0 9 * * *", "Nowhere")


def test_latest_and_next_are_in_the_schedules_zone() -> None:
    at = utc("2027-01-04 08:30")  # 09:30 in Paris
    assert latest_at_or_before("0 9 * * *", "Europe/Paris", at) == utc("2027-01-04 08:00")
    assert latest_at_or_before("0 9 * * *", "UTC", at) == utc("2027-01-03 09:00")
    assert next_after("0 9 * * *", "Europe/Paris", at) == utc("2027-01-05 08:00")
    # A time exactly on the schedule is due at that time, not a day later.
    assert latest_at_or_before("0 9 * * *", "UTC", utc("2027-01-04 09:00")) == utc(
        "2027-01-04 09:00"
    )


def test_daylight_saving_transitions_as_cronsim_documents() -> None:
    # Spring: 02:30 does not exist in Paris on 2027-03-28 (02:00 -> 03:00): it runs at 03:00
    # local (01:00 UTC), once.
    spring = next_after("30 2 * * *", "Europe/Paris", utc("2027-03-27 12:00"))
    assert spring == utc("2027-03-28 01:00")
    # Autumn: 02:30 exists twice on 2027-10-31: it runs once, at the first (00:30 UTC).
    autumn = next_after("30 2 * * *", "Europe/Paris", utc("2027-10-30 12:00"))
    assert autumn == utc("2027-10-31 00:30")
    after = next_after("30 2 * * *", "Europe/Paris", autumn)
    assert after == utc("2027-11-01 01:30")
    assert after is not None and after.tzinfo == UTC
    assert datetime(2027, 11, 1, 1, 30, tzinfo=UTC) == after

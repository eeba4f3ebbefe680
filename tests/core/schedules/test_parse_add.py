"""`!schedule add`'s arguments: the quoted expression (plain or typographic quotes), an optional
zone and `--here` in either order, then the prompt."""

from __future__ import annotations

import pytest

from bridge.core.commands.schedule import parse_add
from bridge.cron_times import BadCron


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ('"0 9 * * 1-5" triage', ("0 9 * * 1-5", "UTC", False, "triage")),
        (
            "“0 9 * * *” Europe/Paris --here check CI",
            ("0 9 * * *", "Europe/Paris", True, "check CI"),
        ),
        ("‘*/5 * * * *’ --here UTC ping", ("*/5 * * * *", "UTC", True, "ping")),
        ("«0  9 * * *» Asia/Tokyo Sum up", ("0 9 * * *", "Asia/Tokyo", False, "Sum up")),
        ('"0 9 * * *" UTC/ish is not a zone', None),
        (
            '"0 9 * * *" Japan stays in the prompt',
            ("0 9 * * *", "UTC", False, "Japan stays in the prompt"),
        ),
        ('"0 9 * * *" multi\nline prompt', ("0 9 * * *", "UTC", False, "multi\nline prompt")),
    ],
)
def test_the_arguments(text: str, parsed: tuple[str, str, bool, str] | None) -> None:
    if parsed is None:
        with pytest.raises(BadCron, match="unknown time zone `UTC/ish`"):
            parse_add(text, "UTC")
    else:
        assert parse_add(text, "UTC") == parsed


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0 9 * * * unquoted", "put the cron expression in quotes"),
        ('"0 9 * * *"', "say what the agent should do"),
        ('"0 9 * * *" --here', "say what the agent should do"),
    ],
)
def test_what_is_missing_is_said(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_add(text, "UTC")

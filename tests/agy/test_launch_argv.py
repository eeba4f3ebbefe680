"""agy's command line, whole: each flag only when agy advertises it, in its place, spelt right.

The flags agy does not know make it refuse to start, and a flag spelt otherwise would be passed
on as a prompt or refused: an exact comparison pins every one of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.agy.capabilities import Capabilities
from bridge.agy.launch import LaunchSettings, build_argv, command_line
from tests.agy.test_launch import ALL

# Every flag agy advertises (the capability probe of tests/agy/test_launch.py).
FLAGS = ALL.flags
BASE = [
    "agy",
    "--print=",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--add-dir",
    "/s",
]


def argv(
    settings: LaunchSettings, flags: frozenset[str] = FLAGS, **kwargs: str | None
) -> list[str]:
    caps = Capabilities(flags=flags, probed=True)
    return build_argv(
        settings,
        caps,
        session_dir=Path("/s"),
        model=kwargs.get("model"),
        conversation=kwargs.get("conversation"),
    )


def test_every_flag_in_its_place() -> None:
    settings = LaunchSettings(sandbox=True, turn_timeout=600, extra_args=("--effort", "high"))
    assert argv(settings, model="m1", conversation="c1") == [
        *BASE,
        "--dangerously-skip-permissions",
        "--sandbox",
        "--model",
        "m1",
        "--conversation",
        "c1",
        "--print-timeout",
        "540s",
        "--effort",
        "high",
    ]


def test_a_mode_instead_of_skipped_permissions() -> None:
    settings = LaunchSettings(skip_permissions=False, mode="plan")
    assert argv(settings, FLAGS - {"--print-timeout"}) == [*BASE, "--mode", "plan"]
    # agy without --mode: no mode; without a mode set: nothing either.
    assert argv(settings, FLAGS - {"--print-timeout", "--mode"}) == BASE
    no_mode = LaunchSettings(skip_permissions=False)
    assert argv(no_mode, FLAGS - {"--print-timeout"}) == BASE


@pytest.mark.parametrize(
    ("missing", "settings", "kwargs"),
    [
        ("--dangerously-skip-permissions", LaunchSettings(), {}),
        ("--sandbox", LaunchSettings(skip_permissions=False, sandbox=True), {}),
        ("--model", LaunchSettings(skip_permissions=False), {"model": "m1"}),
        ("--conversation", LaunchSettings(skip_permissions=False), {"conversation": "c1"}),
    ],
)
def test_a_flag_agy_does_not_advertise_is_left_out(
    missing: str, settings: LaunchSettings, kwargs: dict[str, str]
) -> None:
    flags = FLAGS - {"--print-timeout", missing}
    assert argv(settings, flags, **kwargs) == BASE
    if missing == "--dangerously-skip-permissions":
        # Skipping permissions never falls back to a mode.
        with_mode = LaunchSettings(mode="plan")
        assert argv(with_mode, flags) == BASE


def test_settings_that_are_off_add_nothing() -> None:
    off = LaunchSettings(skip_permissions=False, sandbox=False)
    assert argv(off, FLAGS - {"--print-timeout"}, model="", conversation="") == BASE


def test_a_command_line_for_the_log_quotes_what_a_shell_would_split() -> None:
    assert command_line(["agy", "--print=", "--add-dir", "/a b", ""]) == (
        "agy --print= --add-dir '/a b' ''"
    )

from __future__ import annotations

import re

import pytest

from bridge.simulator.flags import (
    UsageError,
    help_text,
    omitted_flags,
    parse_args,
    parse_go_duration,
)

NONE: frozenset[str] = frozenset()


def test_values_with_space_or_equals_and_repeated_add_dir() -> None:
    options = parse_args(
        ["--model=gemini-x", "--add-dir", "/a", "--add-dir=/b", "--print-timeout", "1m30s"], NONE
    )
    assert options.model == "gemini-x"
    assert options.add_dirs == ["/a", "/b"]
    assert options.print_timeout == 90.0


def test_print_equals_empty_is_an_empty_prompt() -> None:
    options = parse_args(["--print=", "--dangerously-skip-permissions"], NONE)
    assert options.print_prompt == ""
    assert options.skip_permissions is True


def test_bare_p_swallows_the_next_flag_like_pflag() -> None:
    options = parse_args(["-p", "--dangerously-skip-permissions", "--sandbox"], NONE)
    assert options.print_prompt == "--dangerously-skip-permissions"
    assert options.skip_permissions is False
    assert options.sandbox is True


def test_bool_flags_take_an_explicit_value() -> None:
    assert parse_args(["--sandbox=false"], NONE).sandbox is False
    with pytest.raises(UsageError, match=r"strconv\.ParseBool"):
        parse_args(["--sandbox=maybe"], NONE)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus"], "unknown flag: --bogus"),
        (["-x"], "unknown shorthand flag: 'x' in -x"),
        (["--model"], "flag needs an argument: --model"),
        (["--print-timeout", "soon"], 'invalid argument "soon" for "--print-timeout"'),
    ],
)
def test_bad_command_lines(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_args(argv, NONE)


def test_omitted_flags_leave_help_and_become_unknown() -> None:
    omitted = omitted_flags("--print-timeout, --sandbox,--help")
    assert omitted == {"--print-timeout", "--sandbox"}  # --help cannot be hidden
    text = help_text(omitted)
    assert "--print-timeout" not in text and "--sandbox" not in text
    assert "--dangerously-skip-permissions" in text
    with pytest.raises(UsageError, match="unknown flag: --sandbox"):
        parse_args(["--sandbox"], omitted)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("2m", 120.0), ("1m30s", 90.0), ("1.5h", 5400.0), ("250ms", 0.25), ("0", 0.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "s", "1x", "1m30"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="time: "):
        parse_go_duration(text)

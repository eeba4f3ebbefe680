from __future__ import annotations

from pathlib import Path

import pytest

from bridge.agy.capabilities import Capabilities, parse_help, probe
from bridge.agy.launch import RUN_MARKER_ENV, LaunchSettings, build_argv, build_env, print_timeout
from bridge.simulator.flags import Options, UsageError, parse_args

ALL = Capabilities(
    flags=frozenset(
        {
            "--print",
            "--input-format",
            "--output-format",
            "--add-dir",
            "--conversation",
            "--model",
            "--dangerously-skip-permissions",
            "--print-timeout",
            "--sandbox",
            "--mode",
        }
    ),
    probed=True,
)


def test_argv_has_stream_json_and_an_explicit_empty_prompt() -> None:
    argv = build_argv(
        LaunchSettings(extra_args=("--x",)),
        ALL,
        session_dir=Path("/s"),
        model="m1",
        conversation="c1",
    )
    assert argv[:2] == ["agy", "--print="]
    assert argv[2:6] == ["--input-format", "stream-json", "--output-format", "stream-json"]
    assert argv[argv.index("--add-dir") + 1] == "/s"
    assert argv[argv.index("--model") + 1] == "m1"
    assert argv[argv.index("--conversation") + 1] == "c1"
    assert "--dangerously-skip-permissions" in argv and "--x" in argv


def _as_agy_reads(argv: list[str], prefix: int = 1) -> Options:
    return parse_args(argv[prefix:], frozenset())


def test_extra_args_are_read_as_agy_reads_them() -> None:
    settings = LaunchSettings(extra_args=("--effort", "high", "--agent", "x"))
    argv = build_argv(settings, ALL, session_dir=Path("/s"), model="m", conversation=None)
    options = _as_agy_reads(argv)
    assert options.print_prompt == ""
    assert (options.effort, options.agent, options.model) == ("high", "x", "m")


@pytest.mark.parametrize("trailing", ["--effort", "--agent", "-p", "--mode"])
def test_a_trailing_bare_value_flag_cannot_swallow_print(trailing: str) -> None:
    """pflag gives a value flag the next argument, whatever it is: nothing may follow the
    print flag's place so closely that it is eaten. agy then refuses the command line loudly
    instead of starting without print mode."""
    settings = LaunchSettings(command=("python", "-m", "agy"), extra_args=(trailing,))
    argv = build_argv(settings, ALL, session_dir=Path("/s"), model=None, conversation=None)
    with pytest.raises(UsageError, match="flag needs an argument"):
        _as_agy_reads(argv, prefix=3)


def test_only_advertised_flags_are_sent() -> None:
    caps = Capabilities(flags=ALL.flags - {"--print-timeout", "--sandbox"}, probed=True)
    argv = build_argv(
        LaunchSettings(sandbox=True), caps, session_dir=Path("/s"), model=None, conversation=None
    )
    assert "--print-timeout" not in argv and "--sandbox" not in argv
    assert "--model" not in argv and "--conversation" not in argv


def test_failed_probe_sends_essentials_only() -> None:
    caps = Capabilities()
    argv = build_argv(
        LaunchSettings(sandbox=True), caps, session_dir=Path("/s"), model="m", conversation="c"
    )
    assert "--model" in argv and "--sandbox" not in argv and "--print-timeout" not in argv


def test_mode_when_permissions_are_not_skipped() -> None:
    argv = build_argv(
        LaunchSettings(skip_permissions=False, mode="plan"),
        ALL,
        session_dir=Path("/s"),
        model=None,
        conversation=None,
    )
    assert "--dangerously-skip-permissions" not in argv
    assert argv[argv.index("--mode") + 1] == "plan"


def test_relative_session_dir_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        build_argv(LaunchSettings(), ALL, session_dir=Path("rel"), model=None, conversation=None)


@pytest.mark.parametrize(("ours", "theirs"), [(1800, "1740s"), (120, "60s"), (30, "15s")])
def test_print_timeout_sits_under_our_deadline(ours: float, theirs: str) -> None:
    assert print_timeout(ours) == theirs


def test_environment_loses_secrets_and_gains_identity() -> None:
    settings = LaunchSettings(
        secret_env_names=("SLACK_BOT_TOKEN", "MY_SECRET"),
        secret_values=("s3cret-value",),
        env={"EXTRA": "1"},
        git_name="Bot",
        git_email="bot@x",
    )
    base = {
        "PATH": "/bin",
        "SLACK_BOT_TOKEN": "xoxb-1",
        "MY_SECRET": "x",
        "OTHER": "s3cret-value",
        "SLACK_APP_TOKEN_OLD": "xapp",
        "HOME": "/root",
    }
    env = build_env(settings, base, run_marker="m1")
    assert env["PATH"] == "/bin" and env["HOME"] == "/root" and env["EXTRA"] == "1"
    for gone in ("SLACK_BOT_TOKEN", "MY_SECRET", "OTHER", "SLACK_APP_TOKEN_OLD"):
        assert gone not in env
    assert env["GIT_AUTHOR_NAME"] == env["GIT_COMMITTER_NAME"] == "Bot"
    assert env["GIT_AUTHOR_EMAIL"] == "bot@x"
    assert env[RUN_MARKER_ENV] == "m1"


def test_parse_help_finds_known_flags_only() -> None:
    text = "  -p, --print string\n  --model string\n  --print-timeout duration\n  --bogus-x\n"
    assert parse_help(text) == {"--print", "--model", "--print-timeout"}


@pytest.mark.anyio
async def test_probe_of_a_missing_command_is_not_fatal() -> None:
    caps = await probe(["/nonexistent/agy"], 2)
    assert not caps.probed and "cannot run" in caps.problem
    assert caps.has("--input-format") and not caps.has("--print-timeout")


@pytest.mark.anyio
async def test_probe_of_a_slow_command_times_out(tmp_path: Path) -> None:
    script = tmp_path / "slow"
    script.write_text("#!/bin/sh\nsleep 5\n")
    script.chmod(0o755)
    caps = await probe([str(script)], 0.3)
    assert not caps.probed and "did not answer" in caps.problem

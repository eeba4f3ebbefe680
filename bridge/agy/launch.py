"""How agy is started: its argv and its environment.

Both are pure functions of the config, the probed capabilities and the session, so they can be
tested without starting anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from bridge.agy.capabilities import Capabilities

# Every agy process (and every command it runs) carries this variable, so a restarted bridge
# can find and end what an earlier run left behind without trusting a bare PID.
RUN_MARKER_ENV = "AGY_BRIDGE_RUN"


class LaunchSettings(BaseModel):
    """The config-derived part of a launch (from ``[agy]`` and ``[identity]``)."""

    model_config = ConfigDict(frozen=True)

    command: tuple[str, ...] = ("agy",)
    skip_permissions: bool = True
    mode: str = ""
    sandbox: bool = False
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = {}
    git_name: str = "agy-bridge"
    git_email: str = "agy-bridge@localhost"
    turn_timeout: float = 1800.0
    secret_env_names: tuple[str, ...] = ()
    secret_values: tuple[str, ...] = ()
    # Names taken from the bridge's environment beyond the allow-list (``[agy] pass_env``).
    pass_env: tuple[str, ...] = ()


# What agy inherits from the bridge's environment without being asked: enough for a shell, a
# locale and a clock. Everything else (database passwords, cloud credentials, agent sockets,
# cluster configs, whatever the unit file carries) stays out unless ``[agy] pass_env`` names it:
# agy's commands run whatever the agent wrote, and ``env`` would print it.
ALLOWED_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ"})
ALLOWED_ENV_PREFIXES = ("LC_",)
# Variables agy's own login or network may need; held back unless passed, so doctor names them.
LOGIN_ENV = frozenset(
    {
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "CLOUDSDK_CONFIG",
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    }
)


def print_timeout(turn_timeout: float) -> str:
    """agy's own deadline, strictly under ours so agy can report its timeout in its own words.

    Seed 004: one minute less than our deadline, or half of it when that is two minutes or less.
    """
    seconds = turn_timeout / 2 if turn_timeout <= 120 else turn_timeout - 60
    return f"{max(1, int(seconds))}s"


def build_argv(
    settings: LaunchSettings,
    caps: Capabilities,
    *,
    session_dir: Path,
    model: str | None,
    conversation: str | None,
) -> list[str]:
    if not session_dir.is_absolute():
        # agy loads plugins of an --add-dir workspace in print mode only for absolute paths.
        raise ValueError(f"session directory must be absolute: {session_dir}")
    # Print mode with an explicit empty prompt, attached and first: a value flag takes the next
    # argument whatever it is, so a bare --print would eat the flag after it, and a bare value
    # flag at the end of extra_args would eat a --print placed after it. Here nothing precedes
    # it but the command, and its value cannot be separated from it.
    argv = [*settings.command, "--print="]
    argv += ["--input-format", "stream-json", "--output-format", "stream-json"]
    argv += ["--add-dir", str(session_dir)]
    if settings.skip_permissions:
        if caps.has("--dangerously-skip-permissions"):
            argv.append("--dangerously-skip-permissions")
    elif settings.mode and caps.has("--mode"):
        argv += ["--mode", settings.mode]
    if settings.sandbox and caps.has("--sandbox"):
        argv.append("--sandbox")
    if model and caps.has("--model"):
        argv += ["--model", model]
    if conversation and caps.has("--conversation"):
        argv += ["--conversation", conversation]
    if caps.has("--print-timeout"):
        argv += ["--print-timeout", print_timeout(settings.turn_timeout)]
    argv += list(settings.extra_args)
    return argv


def build_env(
    settings: LaunchSettings, base: Mapping[str, str], *, run_marker: str
) -> dict[str, str]:
    """agy's environment: the allow-list of ours (and what ``pass_env`` names), never a
    secret, plus the commit identity and the operator's ``[agy] env``.

    agy and every command it runs inherit this; a ``run_command`` of ``env`` must show no token.
    """
    banned = set(settings.secret_env_names)
    # Short values ("1", "true") would match everywhere; real tokens and passwords are longer.
    secrets = [value for value in settings.secret_values if len(value) >= 6]
    passed = set(settings.pass_env)
    env = {
        name: value
        for name, value in base.items()
        if (_allowed(name) or name in passed)
        and name not in banned
        and not _looks_like_token(name)
        and not any(secret in value for secret in secrets)
    }
    env.update(
        GIT_AUTHOR_NAME=settings.git_name,
        GIT_AUTHOR_EMAIL=settings.git_email,
        GIT_COMMITTER_NAME=settings.git_name,
        GIT_COMMITTER_EMAIL=settings.git_email,
    )
    env.update(settings.env)
    # Last, over [agy] env and pass_env: no file a thread can write (a ~/.gitconfig, with or
    # without a sandbox) configures a program it does not own.
    env.update(NO_GLOBAL_CONFIG)
    env[RUN_MARKER_ENV] = run_marker
    return env


# Global configuration off for agy and every command it runs: git reads neither
# ~/.gitconfig, $XDG_CONFIG_HOME/git/config nor /etc/gitconfig (a planted core.fsmonitor or
# alias would run at the next allowed `git status`), and no global attributes or ignore file.
NO_GLOBAL_CONFIG = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_ATTR_NOSYSTEM": "1",
}


def _allowed(name: str) -> bool:
    return name in ALLOWED_ENV or name.startswith(ALLOWED_ENV_PREFIXES)


def held_back(settings: LaunchSettings, base: Mapping[str, str]) -> list[str]:
    """The names of the bridge's variables agy does not get (names only: values are secret)."""
    given = build_env(settings, base, run_marker="")
    return sorted(name for name in base if name not in given)


def login_env_held_back(settings: LaunchSettings, base: Mapping[str, str]) -> list[str]:
    """Held-back variables that agy's own login or network access may need."""
    return [name for name in held_back(settings, base) if name in LOGIN_ENV]


def _looks_like_token(name: str) -> bool:
    # The bridge's own token variables, whatever the operator called them in their unit file.
    upper = name.upper()
    return upper.startswith(("SLACK_", "MATRIX_")) and any(
        word in upper for word in ("TOKEN", "SECRET", "PASSWORD")
    )


def command_line(argv: Sequence[str]) -> str:
    """A readable command line for logs (argv holds no secret)."""
    return " ".join(arg if arg and " " not in arg else repr(arg) for arg in argv)

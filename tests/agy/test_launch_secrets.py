"""agy's environment: which variables are secrets, by name and by value."""

from __future__ import annotations

from bridge.agy.launch import LaunchSettings, build_env, held_back, login_env_held_back


def env_of(base: dict[str, str], **settings: object) -> dict[str, str]:
    return build_env(LaunchSettings(**settings), base, run_marker="m")  # type: ignore[arg-type]


def test_the_bridges_kind_of_variable_is_dropped_whatever_its_name() -> None:
    base = {
        "SLACK_LEGACY_TOKEN": "a",
        "MATRIX_OLD_PASSWORD": "b",
        "slack_signing_secret_2": "c",
        "SLACK_CHANNEL": "kept",
        "MATRIX_HOMESERVER": "kept",
        "MY_TOKEN": "kept",
    }
    # Even passed by name (pass_env), the bridge's kind of token never goes.
    env = env_of(base, pass_env=tuple(base))
    assert {k for k in base if k in env} == {"SLACK_CHANNEL", "MATRIX_HOMESERVER", "MY_TOKEN"}


def test_a_secret_value_is_dropped_under_any_name_and_short_values_are_not_secrets() -> None:
    base = {"NOTE": "prefix-abcdef-suffix", "PIN": "12345", "FLAG": "1", "KEPT": "abcde"}
    env = env_of(base, secret_values=("abcdef", "12345", "1"), pass_env=tuple(base))
    assert "NOTE" not in env
    assert env["PIN"] == "12345" and env["FLAG"] == "1" and env["KEPT"] == "abcde"


def test_named_secrets_go_and_the_operators_env_wins_over_ours() -> None:
    env = env_of(
        {"OPS_KEY": "x", "GIT_AUTHOR_NAME": "someone", "LANG": "C"},
        secret_env_names=("OPS_KEY",),
        env={"GIT_AUTHOR_NAME": "operator", "LANG": "C.UTF-8"},
    )
    assert "OPS_KEY" not in env
    assert env["GIT_AUTHOR_NAME"] == "operator" and env["LANG"] == "C.UTF-8"
    assert env["GIT_COMMITTER_NAME"] == "agy-bridge"
    assert env["GIT_AUTHOR_EMAIL"] == env["GIT_COMMITTER_EMAIL"] == "agy-bridge@localhost"


def test_only_the_allow_list_and_what_pass_env_names_reach_agy() -> None:
    base = {
        "PATH": "/usr/bin",
        "HOME": "/home/bridge",
        "LANG": "C.UTF-8",
        "LC_TIME": "C",
        "TZ": "UTC",
        "PGPASSWORD": "pg-secret",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "SSH_AUTH_SOCK": "/run/agent",
        "KUBECONFIG": "/home/bridge/.kube/config",
        "DOCKER_HOST": "tcp://docker:2375",
        "GEMINI_API_KEY": "needed-by-agy",
        "HTTPS_PROXY": "http://proxy:3128",
    }
    env = env_of(base, pass_env=("GEMINI_API_KEY", "NOT_SET_ANYWHERE"))
    assert {k for k in base if k in env} == {
        "PATH",
        "HOME",
        "LANG",
        "LC_TIME",
        "TZ",
        "GEMINI_API_KEY",
    }
    assert "NOT_SET_ANYWHERE" not in env
    settings = LaunchSettings(pass_env=("GEMINI_API_KEY",))
    assert held_back(settings, base) == sorted(
        [
            "PGPASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "SSH_AUTH_SOCK",
            "KUBECONFIG",
            "DOCKER_HOST",
            "HTTPS_PROXY",
        ]
    )
    # What agy's own login or network may need is named, so doctor can warn.
    assert login_env_held_back(settings, base) == ["HTTPS_PROXY"]


def test_no_global_configuration_reaches_agy_whatever_is_passed() -> None:
    """A ~/.gitconfig a command wrote (with or without a sandbox) configures no git of agy's:
    global and system configuration are off, even when the operator's environment or
    ``[agy] env`` names another file."""
    base = {"PATH": "/usr/bin", "HOME": "/home/bridge", "GIT_CONFIG_GLOBAL": "/home/x/.gitconfig"}
    settings = LaunchSettings(pass_env=("GIT_CONFIG_GLOBAL",), env={"GIT_CONFIG_NOSYSTEM": "0"})  # type: ignore[call-arg]
    env = build_env(settings, base, run_marker="m")
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_ATTR_NOSYSTEM"] == "1"
    assert env["HOME"] == "/home/bridge"

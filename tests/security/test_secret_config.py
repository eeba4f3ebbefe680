"""Invariant 1: every secret given in the config file (not through its environment variable) is
treated as one. For each of the five, through the console CLI as an operator runs it:

- the agent says it (its answer streamed in pieces that cut the secret, a tool's command
  line): the thread shows ``***``;
- agy prints it on a line that is not an event (logged as unreadable): the log shows ``***``;
- it sits in an innocent-looking environment variable of the bridge: agy does not inherit it.

The secrets are distinct, so leaving any one of them out of the bridge's list fails this test.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from tests.core.harness import SIMULATOR_ENV
from tests.faults.console import console_env, start_console, write_config

# Each secret as it sits in the file; none of them is in the environment under its own name.
CONFIG_SECRETS = {
    ("slack", "bot_token"): f"xoxb-only-in-file-{secrets.token_hex(10)}",
    ("slack", "app_token"): f"xapp-only-in-file-{secrets.token_hex(10)}",
    ("slack", "signing_secret"): f"signing-only-in-file-{secrets.token_hex(10)}",
    ("matrix", "access_token"): f"syt_only_in_file_{secrets.token_hex(10)}",
    ("matrix", "password"): f"matrix-pw-only-in-file-{secrets.token_hex(10)}",
}
OWN_NAMES = (
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "MATRIX_ACCESS_TOKEN",
    "MATRIX_PASSWORD",
)


def _toml() -> str:
    sections: dict[str, list[str]] = {}
    for (section, key), value in CONFIG_SECRETS.items():
        sections.setdefault(section, []).append(f"{key} = {json.dumps(value)}")
    sections["matrix"] += ['homeserver = "http://127.0.0.1:9"', 'user_id = "@bot:localhost"']
    return "\n".join(f"[{name}]\n" + "\n".join(lines) for name, lines in sections.items())


def _env(root: Path) -> dict[str, str]:
    env = console_env(root)
    for name in OWN_NAMES:
        env.pop(name, None)
    # Copied where no name gives it away.
    for n, value in enumerate(CONFIG_SECRETS.values()):
        env[f"DEPLOY_NOTE_{n}"] = value
    env["BUILD_LABEL"] = "innocent-and-kept"
    return env


@pytest.mark.parametrize("key", list(CONFIG_SECRETS), ids=lambda k: ".".join(k))
def test_a_secret_given_only_in_the_config_file_is_a_secret(
    tmp_path: Path, key: tuple[str, str]
) -> None:
    secret = CONFIG_SECRETS[key]
    # BUILD_LABEL is passed by name: agy inherits only the allow-list and what pass_env names.
    config = write_config(
        tmp_path,
        log_level="DEBUG",
        extra=_toml(),
        agy={"pass_env": [*SIMULATOR_ENV, "BUILD_LABEL"]},
    )
    run = start_console(tmp_path, config, "secret", env=_env(tmp_path))
    dump = tmp_path / "agent-env.txt"
    # The agent prints the secret on agy's own stdout (a line that is not an event), dumps its
    # environment, and answers with the secret in its words, streamed in pieces that cut it.
    run.send(
        f"[[tool run_command echo 'not an event {secret}' > /proc/$PPID/fd/1]] "
        f"[[tool run_command env > {dump}]] "
        f"[[chunks 7]] [[reply the token is {secret} (done)]]"
    )
    run.wait_output("(done)")
    assert run.finish() == 0, run.err()[-3000:]
    log, chat = run.err(), run.out()
    seen_env = dump.read_text()

    assert "unreadable line from agy" in log and "not an event ***" in log, log[-3000:]
    assert "the token is *** (done)" in chat, chat
    assert "BUILD_LABEL=innocent-and-kept" in seen_env, "the dump is the agent's environment"
    assert secret not in log, "the secret is in the log"
    assert secret not in chat, "the secret is in the thread"
    assert secret not in seen_env, "agy inherited the secret"

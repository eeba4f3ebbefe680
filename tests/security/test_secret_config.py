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


def test_a_secret_given_only_in_the_config_file_is_a_secret(tmp_path: Path) -> None:
    """One console, one turn per secret: the bridge's start (1.2 s of CPU) is paid once, and
    each secret is still said, printed and inherited in a turn of its own."""
    # BUILD_LABEL is passed by name: agy inherits only the allow-list and what pass_env names.
    config = write_config(
        tmp_path,
        log_level="DEBUG",
        extra=_toml(),
        agy={"pass_env": [*SIMULATOR_ENV, "BUILD_LABEL"]},
    )
    run = start_console(tmp_path, config, "secret", env=_env(tmp_path))
    dumps = {}
    for n, (key, secret) in enumerate(CONFIG_SECRETS.items()):
        dumps[key] = dump = tmp_path / f"agent-env-{n}.txt"
        # The agent prints the secret on agy's own stdout (a line that is not an event), dumps
        # its environment, and answers with the secret in its words, streamed in pieces that
        # cut it.
        run.send(
            f"[[tool run_command echo 'not an event {n} {secret}' > /proc/$PPID/fd/1]] "
            f"[[tool run_command env > {dump}]] "
            f"[[chunks 7]] [[reply the token {n} is {secret} (done {n})]]"
        )
        run.wait_output(f"(done {n})")
    assert run.finish() == 0, run.err()[-3000:]
    log, chat = run.err(), run.out()

    for n, (key, secret) in enumerate(CONFIG_SECRETS.items()):
        name = ".".join(key)
        seen_env = dumps[key].read_text()
        assert f"not an event {n} ***" in log, (name, log[-3000:])
        assert f"the token {n} is *** (done {n})" in chat, (name, chat)
        assert "BUILD_LABEL=innocent-and-kept" in seen_env, "the dump is the agent's environment"
        assert secret not in log, f"the secret {name} is in the log"
        assert secret not in chat, f"the secret {name} is in the thread"
        assert secret not in seen_env, f"agy inherited the secret {name}"
    assert "unreadable line from agy" in log, log[-3000:]

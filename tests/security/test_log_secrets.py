"""Secrets never reach a log line or a chat message, with logging at DEBUG.

Two ways: the console CLI as a subprocess (its stderr is the log, formatted and filtered as in
production), and the core harness with every log record captured (caplog). The turns touch
every path that could carry a secret: hooks (the listener URL has the token in it), MCP tool
calls, injection, an agy crash (its stderr is shown), an agy error, a status command.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path

import anyio
import pytest

from tests.core.harness import Harness, running
from tests.faults.console import console_env, start_console, write_config
from tests.faults.fake import fake_agy
from tests.security.made_up_secrets import config_secrets, config_with, secret
from tests.security.session import tokens_in

# A listener token anywhere in a URL path, whatever the session: 32 random bytes, urlsafe.
TOKEN_IN_URL = re.compile(r"/[A-Za-z0-9_-]{43}/(?:hook|mcp)/")


CONFIG_SECRETS = config_secrets()
ENV_SECRETS = {
    "SLACK_BOT_TOKEN": secret("xoxb-env-"),
    "SLACK_APP_TOKEN": secret("xapp-env-"),
    "MATRIX_ACCESS_TOKEN": secret("syt_env_"),
    "MATRIX_PASSWORD": secret("matrix-pw-env-"),
}


def mcp(tool: str, **args: object) -> str:
    return f"[[mcp bridge_chat {tool} {json.dumps(args)}]]"


def assert_clean(text: str, secrets_: set[str], where: str) -> None:
    assert secrets_, "nothing to look for"
    for value in secrets_:
        assert value not in text, f"a secret ({value[:6]}…) is in {where}"
    assert not TOKEN_IN_URL.search(text), f"a listener URL with its token is in {where}"


# --- the console CLI, as an operator runs it ----------------------------------------------------


def _toml_secrets() -> str:
    sections: dict[str, list[str]] = {}
    for (section, key), value in CONFIG_SECRETS.items():
        sections.setdefault(section, []).append(f"{key} = {json.dumps(value)}")
    sections["matrix"] += ['homeserver = "http://127.0.0.1:9"', 'user_id = "@bot:localhost"']
    return "\n".join(f"[{name}]\n" + "\n".join(lines) for name, lines in sections.items())


def test_the_console_at_debug_logs_and_shows_nosecret(tmp_path: Path) -> None:
    config = write_config(tmp_path, log_level="DEBUG", extra=_toml_secrets())
    env = console_env(tmp_path, **ENV_SECRETS)
    run = start_console(tmp_path, config, "debug", env=env)
    data = tmp_path / "data"
    tokens: set[str] = set()
    go, started = tmp_path / "go", tmp_path / "started"

    run.send(f"one {mcp('post_message', text='progress note')} [[reply answer-one]]")
    run.wait_output("answer-one")
    tokens |= tokens_in(data)
    run.send(f"two [[calls 2]] [[touch {started}]] [[wait {go}]] [[reply answer-two]]")
    while not started.exists():
        time.sleep(0.02)
    run.send("written mid-turn")
    run.wait_output("queued for the next turn")  # stored; the next model call takes it
    go.touch()
    run.wait_output("answer-two")
    run.wait_output("seen by the agent mid-turn")
    tokens |= tokens_in(data)
    # Before the crash: the agy that runs it has the MCP client loaded already (an agy
    # started after the crash would load it again, a second of CPU).
    run.send(f"{mcp('thread_history', limit=5)} [[reply answer-three]]")
    run.wait_output("answer-three")
    run.send("[[crash]]")
    run.wait_output("agy stopped unexpectedly")
    tokens |= tokens_in(data)
    run.send("[[fatal Individual quota reached for this account]]")
    run.wait_output("Individual quota reached")
    tokens |= tokens_in(data)
    run.send("!status")
    run.wait_output("Conversation:")
    assert run.finish() == 0, run.err()[-3000:]

    assert tokens, "the sessions' tokens were read"
    log, chat = run.err(), run.out()
    assert "DEBUG" in log and "/hook/" not in log
    assert "Injected:" in chat, "the hook path was exercised"
    everything = {*CONFIG_SECRETS.values(), *ENV_SECRETS.values(), *tokens}
    assert_clean(log, everything, "the log")
    assert_clean(chat, everything, "the chat")


# --- the harness, every record captured -----------------------------------------------------------


def _records_text(caplog: pytest.LogCaptureFixture) -> str:
    lines = []
    for record in caplog.records:
        lines.append(record.getMessage())
        if record.exc_info:
            lines.append(logging.Formatter().formatException(record.exc_info))
        if record.exc_text:
            lines.append(record.exc_text)
        lines += [str(v) for k, v in vars(record).items() if k in ("chat_thread", "conversation")]
    return "\n".join(lines)


def _shown(h: Harness) -> str:
    parts = [text for _, text in h.adapter.notices]
    for reply in h.adapter.replies:
        parts += reply.deltas + [f"{t.summary} {t.error or ''}" for t in reply.tools]
        if reply.outcome is not None:
            parts += [reply.outcome.final_text, reply.outcome.error or "", *reply.outcome.notes]
    return "\n".join(parts)


@pytest.mark.anyio
async def test_no_log_record_holds_a_secret_or_a_listener_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in ENV_SECRETS.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)
    tokens: set[str] = set()
    async with running(tmp_path, config_with(CONFIG_SECRETS), max_line_bytes=4096) as h:
        go, started = h.flag("go"), h.flag("started")
        await h.say(f"{mcp('post_message', text='progress')} [[garbage]] [[bigline 9000]]")
        await h.adapter.wait_finished(1)
        tokens |= tokens_in(tmp_path / "data")
        await h.say(f"[[calls 2]] [[touch {started}]] [[wait {go}]]")
        while not started.exists():
            await anyio.sleep(0.02)
        await h.say("mid-turn")
        await h.adapter.changes.until(lambda: h.adapter.reactions)
        go.touch()
        await h.adapter.wait_finished(2)
        await h.say(f"{mcp('post_file', path='/etc/hostname')} {mcp('nope')}")
        await h.adapter.wait_finished(3)
        await h.say("[[crash]]")
        await h.adapter.wait_finished(4)
        tokens |= tokens_in(tmp_path / "data")
        await h.say("after")
        await h.adapter.wait_finished(5)
        tokens |= tokens_in(tmp_path / "data")
        shown = _shown(h)
    assert tokens, "the sessions' tokens were read"
    everything = {*CONFIG_SECRETS.values(), *ENV_SECRETS.values(), *tokens}
    assert len(caplog.records) > 50, "DEBUG logging was on"
    assert_clean(_records_text(caplog), everything, "a log record")
    assert_clean(shown, everything, "the thread")


@pytest.mark.anyio
async def test_agys_stderr_shown_in_the_thread_never_carries_a_listener_token(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, **fake_agy(tmp_path)) as h:
        await h.say("LEAK-EXIT")
        [died] = await h.adapter.wait_finished(1)
        tokens = tokens_in(tmp_path / "data")
        assert died.outcome is not None and "hook bridge/PreInvocation failed" in (
            died.outcome.error or ""
        )
        assert_clean(_shown(h), tokens, "the thread")

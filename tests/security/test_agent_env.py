"""The agent cannot read the bridge's secrets from its environment.

The secrets sit both in the bridge's own environment and in its config. The agent runs ``env``
(and reads ``/proc/self/environ``) through a real ``run_command``; neither that output, nor
agy's own environment, nor anything the thread is shown holds any of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.core.harness import Harness, running, thread
from tests.security.made_up_secrets import config_secrets, config_with, secret

pytestmark = pytest.mark.anyio


CONFIG_SECRETS = config_secrets()
ENV_SECRETS = {
    "SLACK_BOT_TOKEN": secret("xoxb-env-"),
    "SLACK_APP_TOKEN": secret("xapp-env-"),
    "SLACK_SIGNING_SECRET": secret("signing-env-"),
    "MATRIX_ACCESS_TOKEN": secret("syt_env_"),
    "MATRIX_PASSWORD": secret("matrix-pw-env-"),
    # Named in [bridge] secret_env by the operator.
    "OPS_API_KEY": secret("ops-"),
    # The bridge's own kind of variable under a name the operator chose.
    "SLACK_LEGACY_BOT_TOKEN": secret("xoxb-legacy-"),
}
# A config secret copied into an innocent-looking variable.
COPIED = {"DEPLOY_NOTE": CONFIG_SECRETS[("slack", "bot_token")]}
ALL = [*CONFIG_SECRETS.values(), *ENV_SECRETS.values()]


def config_extra(tmp: Path) -> dict[str, Any]:
    bridge = {"data_dir": str(tmp / "data"), "secret_env": ["OPS_API_KEY"]}
    return config_with(CONFIG_SECRETS, {"bridge": bridge})


@asynccontextmanager
async def bridge_with_secrets(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> AsyncIterator[Harness]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    async with running(tmp, config_extra(tmp)) as h:
        yield h


def shown(h: Harness) -> str:
    """Everything the thread was shown: streamed text, answers, tools, notices."""
    parts: list[str] = [text for _, text in h.adapter.notices]
    for reply in h.adapter.replies:
        parts += reply.deltas
        parts += [f"{t.name} {t.summary} {t.error or ''}" for t in reply.tools]
        if reply.outcome is not None:
            parts += [reply.outcome.final_text, reply.outcome.error or "", *reply.outcome.notes]
    return "\n".join(parts)


async def run_env(h: Harness) -> str:
    """What the agent sees of its environment, two ways, through its own commands."""
    dump = h.flag("agent-env.txt")
    await h.say(
        f"[[tool run_command env > {dump}]] "
        f"[[tool run_command tr '\\0' '\\n' < /proc/self/environ >> {dump}]] "
        "[[tool run_command env]] show me your environment"
    )
    [reply] = await h.adapter.wait_finished(1)
    assert reply.outcome is not None and reply.outcome.error is None, reply.outcome
    text = dump.read_text()
    assert "AGY_BRIDGE_RUN=" in text, "the dump really is the agent's environment"
    return text


async def test_run_command_env_shows_no_secret_of_the_bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with bridge_with_secrets(tmp_path, monkeypatch, {**ENV_SECRETS, **COPIED}) as h:
        seen = await run_env(h)
        worker = h.bridge.core.threads[thread().key]
        assert worker.proc is not None
        agy_env = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().decode()
        for secret in ALL:
            assert secret not in seen
            assert secret not in agy_env
            assert secret not in shown(h)
        for name in [*ENV_SECRETS, *COPIED]:
            assert f"{name}=" not in seen


async def test_a_secret_inside_another_variable_does_not_reach_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = CONFIG_SECRETS[("slack", "bot_token")]
    embedded = {"WEBHOOK_AUTH_HEADER": f"Bearer {token}"}
    async with bridge_with_secrets(tmp_path, monkeypatch, embedded) as h:
        seen = await run_env(h)
        assert token not in seen

"""The adapter's files: private permissions, the sync token, the access policy."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from bridge.chat.matrix import MatrixAdapter, NotConnected
from bridge.chat.matrix.client import (
    MatrixFiles,
    MatrixLoginError,
    SyncTokenStore,
    open_session,
    write_private,
)
from bridge.config import MatrixSection
from bridge.core.events import ThreadRef

from .conftest import bot_config
from .synapse import Synapse

pytestmark = pytest.mark.anyio


def test_private_files_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "secret.json"
    write_private(path, "{}")
    write_private(path, '{"again": true}')
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text() == '{"again": true}'
    files = MatrixFiles.under(tmp_path)
    files.prepare()
    assert stat.S_IMODE(os.stat(files.root).st_mode) == 0o700
    assert files.store.is_dir()


def test_sync_token_round_trip_and_owner_check(tmp_path: Path) -> None:
    path = tmp_path / "sync.json"
    store = SyncTokenStore(path, "@bot:example.org")
    assert store.load() is None
    store.save("s72_1")
    assert store.load() == "s72_1"
    # Another account's token would skip or replay that account's events.
    assert SyncTokenStore(path, "@other:example.org").load() is None
    path.write_text("not json")
    assert store.load() is None


async def test_no_credentials_is_a_clear_error(tmp_path: Path) -> None:
    config = MatrixSection(homeserver="http://127.0.0.1:9", user_id="@bot:localhost")
    with pytest.raises(MatrixLoginError, match=r"password or matrix\.access_token"):
        await open_session(config, tmp_path)


@pytest.mark.synapse
async def test_password_login_once_then_reused(synapse: Synapse, tmp_path: Path) -> None:
    bot = synapse.register("bot")
    config = bot_config(synapse, bot)
    first = await open_session(config, tmp_path)
    await first.client.close()
    assert first.encryption_problem == ""
    assert first.client.olm is not None
    stored = json.loads((tmp_path / "matrix" / "login.json").read_text())
    assert stored["device_id"] == first.client.device_id
    second = await open_session(config, tmp_path)
    await second.client.close()
    assert second.client.access_token == first.client.access_token
    assert second.client.device_id == first.client.device_id
    # A wrong password with no stored login is refused clearly.
    wrong = config.model_copy(update={"password": SecretStr("wrong")})
    with pytest.raises(MatrixLoginError, match="login"):
        await open_session(wrong, tmp_path / "other")


@pytest.mark.synapse
async def test_access_token_login(synapse: Synapse, tmp_path: Path) -> None:
    bot = synapse.register("bot")
    config = MatrixSection(
        homeserver=synapse.base_url,
        user_id=bot.user_id,
        access_token=SecretStr(bot.access_token),
        encryption=False,
    )
    session = await open_session(config, tmp_path)
    await session.client.close()
    assert session.client.device_id == bot.device_id
    assert session.client.user_id == bot.user_id
    assert "switched off" in session.encryption_problem
    # No token of ours is written when the configuration holds it.
    assert not (tmp_path / "matrix" / "login.json").exists()
    bad = config.model_copy(update={"access_token": SecretStr("syt_nonsense")})
    with pytest.raises(MatrixLoginError, match="not valid"):
        await open_session(bad, tmp_path)


async def test_adapter_is_a_chat_adapter_that_needs_run(tmp_path: Path) -> None:
    config = MatrixSection(homeserver="http://127.0.0.1:9", user_id="@bot:localhost")
    adapter = MatrixAdapter(config, data_dir=tmp_path)
    assert adapter.platform == "matrix"
    with pytest.raises(NotConnected):
        await adapter.post_message(ThreadRef(platform="matrix", channel="!r:x"), "hi")

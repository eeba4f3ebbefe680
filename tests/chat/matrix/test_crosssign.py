"""Cross-signing against a real Synapse: an identity Element trusts, a device it signed."""

from __future__ import annotations

import json
import os
import stat
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import SecretStr

from bridge.chat.matrix.client import MatrixFiles, open_session
from bridge.chat.matrix.crosssign import verify
from bridge.config import MatrixSection

from .conftest import bot_config, matrix_world
from .synapse import MatrixUser, Synapse

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]


def _post(synapse: Synapse, token: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        synapse.base_url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def keys_of(synapse: Synapse, asker: MatrixUser, user_id: str) -> dict[str, Any]:
    """What any client sees in /keys/query for ``user_id``."""
    answer = _post(
        synapse, asker.access_token, "/_matrix/client/v3/keys/query", {"device_keys": {user_id: []}}
    )
    assert isinstance(answer, dict)
    return answer


def _only_key(key_object: dict[str, Any]) -> str:
    [key] = key_object["keys"].values()
    assert isinstance(key, str)
    return key


def assert_cross_signed(answer: dict[str, Any], user_id: str, device_id: str) -> tuple[str, str]:
    """The master and self-signing keys, checked: the device's signature verifies."""
    master = answer["master_keys"][user_id]
    self_signing = answer["self_signing_keys"][user_id]
    master_key = _only_key(master)
    ssk = _only_key(self_signing)
    assert master["usage"] == ["master"]
    assert self_signing["usage"] == ["self_signing"]
    # The self-signing key is vouched for by the master key, the device by the self-signing key.
    assert verify(self_signing, master_key, user_id)
    device = answer["device_keys"][user_id][device_id]
    assert verify(device, ssk, user_id)
    return master_key, ssk


async def test_bot_publishes_a_verifiable_identity_that_survives_restart(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with matrix_world(synapse, tmp_path, encrypted=True) as world:
        bot = world.bot_user
        device_id = str(world.adapter._connected().client.device_id)
        master, ssk = assert_cross_signed(
            keys_of(synapse, world.human.user, bot.user_id), bot.user_id, device_id
        )
        key_file = MatrixFiles.under(world.data_dir).cross_signing
        assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
        stored = key_file.read_text()
    # A restart reuses the keys: nothing new is generated or published.
    session = await open_session(bot_config(synapse, bot), world.data_dir)
    await session.client.close()
    assert session.encryption_problem == ""
    assert session.client.device_id == device_id
    assert key_file.read_text() == stored
    again = keys_of(synapse, world.human.user, bot.user_id)
    assert assert_cross_signed(again, bot.user_id, device_id) == (master, ssk)


async def test_access_token_only_refuses_encryption_when_keys_need_the_password(
    synapse: Synapse, tmp_path: Path
) -> None:
    bot = synapse.register("bot")
    # Another client already set up cross-signing for the account (keys this bridge lacks).
    elsewhere = await open_session(bot_config(synapse, bot), tmp_path / "elsewhere")
    await elsewhere.client.close()
    config = MatrixSection(
        homeserver=synapse.base_url, user_id=bot.user_id, access_token=SecretStr(bot.access_token)
    )
    session = await open_session(config, tmp_path / "bridge")
    await session.client.close()
    assert session.client.olm is None
    assert "cross-signing" in session.encryption_problem
    assert "matrix.password" in session.encryption_problem
    # The published identity is left alone.
    answer = keys_of(synapse, bot, bot.user_id)
    assert bot.user_id in answer["master_keys"]


async def test_access_token_only_publishes_a_first_identity(
    synapse: Synapse, tmp_path: Path
) -> None:
    # Synapse lets the very first upload through without the password.
    bot = synapse.register("bot")
    config = MatrixSection(
        homeserver=synapse.base_url, user_id=bot.user_id, access_token=SecretStr(bot.access_token)
    )
    session = await open_session(config, tmp_path)
    await session.client.close()
    assert session.encryption_problem == ""
    assert_cross_signed(keys_of(synapse, bot, bot.user_id), bot.user_id, bot.device_id)


async def test_lost_device_logs_in_on_a_new_signed_device(synapse: Synapse, tmp_path: Path) -> None:
    # (An unencrypted room: the test's nio human would not share its session with a new device.)
    async with matrix_world(synapse, tmp_path) as world:
        client = world.adapter._connected().client
        old_device = str(client.device_id)
        master, _ = assert_cross_signed(
            keys_of(synapse, world.human.user, world.bot_user.user_id),
            world.bot_user.user_id,
            old_device,
        )
        # The device is deleted (as "sign out" in Element's session list does).
        _post(synapse, str(client.access_token), "/_matrix/client/v3/logout", {})
        with anyio.fail_after(60):
            while True:
                connection = world.adapter._connection
                if connection is not None and connection.client.device_id != old_device:
                    break
                await anyio.sleep(0.2)
        new_device = str(connection.client.device_id)
        answer = keys_of(synapse, world.human.user, world.bot_user.user_id)
        assert old_device not in answer["device_keys"][world.bot_user.user_id]
        assert assert_cross_signed(answer, world.bot_user.user_id, new_device)[0] == master
        # And the bot still hears the room.
        await world.human.say(world.room_id, "still there?")
        await world.inbound.wait_for(lambda i: "still there?" in i.texts())

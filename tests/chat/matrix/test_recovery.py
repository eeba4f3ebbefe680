"""A bot that survives against a real Synapse: a lost crypto store, a cut-off key upload."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientError
from nio import MegolmEvent, ReactionEvent
from pydantic import SecretStr

from bridge.chat.matrix import MatrixAdapter
from bridge.chat.matrix.client import MatrixFiles, open_session
from bridge.chat.matrix.crosssign import CrossSigner, CrossSigningKeys, public_b64
from bridge.config import MatrixSection
from bridge.core.events import Reaction, ThreadRef

from .conftest import FAST_TUNING, RecordingInbound, bot_config, element_user, running_adapter
from .synapse import Synapse
from .test_crosssign import assert_cross_signed, keys_of

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]


async def test_a_lost_store_with_the_login_kept_comes_back_as_a_new_signed_device(
    synapse: Synapse, tmp_path: Path
) -> None:
    alice = synapse.register("alice")
    bot = synapse.register("bot")
    config = bot_config(synapse, bot, allowed_users=[alice.user_id])
    data_dir = tmp_path / "bridge"
    files = MatrixFiles.under(data_dir)
    async with element_user(synapse, alice, tmp_path) as human:
        room_id = await human.create_room([bot.user_id], encrypted=True)
        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            await human.wait_joined(room_id, bot.user_id)
            old_device = str(adapter._connected().client.device_id)
            await human.say(room_id, "before the loss")
            await inbound.wait_for(lambda i: "before the loss" in i.texts())
        master, _ = assert_cross_signed(
            keys_of(synapse, alice, bot.user_id), bot.user_id, old_device
        )

        # The crypto store is lost; login.json (and the cross-signing keys) are kept.
        shutil.rmtree(files.store)
        assert files.login.exists()

        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            client = adapter._connected().client
            assert client.olm is not None, "encryption stayed off after the store was lost"
            new_device = str(client.device_id)
            assert new_device != old_device
            answer = keys_of(synapse, alice, bot.user_id)
            # The old device (whose keys nobody holds any more) is gone from the homeserver,
            # and the new one is signed by the same identity: a client that excludes insecure
            # devices shares its keys with it and trusts what it sends.
            assert old_device not in answer["device_keys"][bot.user_id]
            assert assert_cross_signed(answer, bot.user_id, new_device)[0] == master

            await human.sync()
            question = await human.say(room_id, "after the loss")
            await inbound.wait_for(lambda i: "after the loss" in i.texts())
            thread = ThreadRef(platform="matrix", channel=room_id, thread="")
            await adapter.react(thread, question, Reaction.QUEUED)
            reaction = await human.wait_event(
                room_id,
                lambda e: isinstance(e, (ReactionEvent, MegolmEvent)) and e.sender == bot.user_id,
            )
            assert isinstance(reaction, ReactionEvent), "the human could not decrypt the answer"
            assert reaction.decrypted


async def test_a_lost_store_with_an_access_token_says_what_to_do(
    synapse: Synapse, tmp_path: Path
) -> None:
    bot = synapse.register("bot")
    config = MatrixSection(
        homeserver=synapse.base_url, user_id=bot.user_id, access_token=SecretStr(bot.access_token)
    )
    first = await open_session(config, tmp_path)
    await first.client.close()
    assert first.encryption_problem == ""
    shutil.rmtree(MatrixFiles.under(tmp_path).store)
    session = await open_session(config, tmp_path)
    await session.client.close()
    # The token belongs to the device whose keys are lost: only a new token (a new device) or
    # the password helps, and the bridge says so instead of failing at every start.
    assert session.client.olm is None
    problem = session.encryption_problem
    assert "encryption store" in problem
    assert bot.device_id in problem
    assert "new access token" in problem
    assert "MATRIX_PASSWORD" in problem
    # The device the operator still relies on is left alone.
    answer = keys_of(synapse, bot, bot.user_id)
    assert bot.device_id in answer["device_keys"][bot.user_id]


async def test_an_upload_cut_off_after_the_keys_were_made_is_finished_with_the_same_keys(
    synapse: Synapse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = synapse.register("bot")
    config = bot_config(synapse, bot)
    real_upload = CrossSigner._upload_keys

    async def cut_off(self: CrossSigner, *args: Any, **kwargs: Any) -> None:
        raise ClientError("connection reset during the upload")

    monkeypatch.setattr(CrossSigner, "_upload_keys", cut_off)
    with pytest.raises(ClientError):
        await open_session(config, tmp_path)
    key_file = MatrixFiles.under(tmp_path).cross_signing
    # The keys were on disk before the upload was tried.
    made = key_file.read_text()
    assert bot.user_id not in keys_of(synapse, bot, bot.user_id).get("master_keys", {})

    monkeypatch.setattr(CrossSigner, "_upload_keys", real_upload)
    session = await open_session(config, tmp_path)
    await session.client.close()
    assert session.encryption_problem == ""
    assert key_file.read_text() == made
    answer = keys_of(synapse, bot, bot.user_id)
    master, ssk = assert_cross_signed(answer, bot.user_id, str(session.client.device_id))
    kept = CrossSigningKeys.load(key_file, bot.user_id)
    assert kept is not None
    assert (master, ssk) == (public_b64(kept.master), public_b64(kept.self_signing))

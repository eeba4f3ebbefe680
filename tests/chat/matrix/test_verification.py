"""A person verifies the bot from an independent client (issue 31), against a real Synapse.

The person's client is matrix-js-sdk with its Rust crypto (``tests/chat/matrix/js``, installed
with ``npm ci`` there; Node 20 with ``Promise.withResolvers`` polyfilled). It requests
verification in a DM with the bot as Element's *Verify* does, and shows its seven emoji; the
operator compares them with the bot's through ``agy-bridge matrix verify`` (the store, with
the bridge running) and confirms. Then the client sees the bot as verified, and the bot's
user-signing key has signed the person's identity.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from bridge.chat.matrix import MatrixAdapter
from bridge.chat.matrix.client import MatrixFiles
from bridge.chat.matrix.crosssign import CrossSigningKeys, public_b64, verify
from bridge.cli import main as cli_main
from bridge.core.store.opening import open_store

from .conftest import FAST_TUNING, RecordingInbound, bot_config, running_adapter
from .synapse import Synapse
from .test_crosssign import keys_of

pytestmark = [pytest.mark.anyio, pytest.mark.synapse, pytest.mark.usefixtures("restore_logging")]

JS = Path(__file__).parent / "js"


def _node() -> str:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "matrix-js-sdk").is_dir():
        pytest.skip("the independent client is not installed: `cd tests/chat/matrix/js && npm ci`")
    return node


async def _lines(stream: Any, into: list[dict[str, Any]], changed: list[anyio.Event]) -> None:
    buffer = ""
    async for chunk in TextReceiveStream(stream):
        buffer += chunk
        while "\n" in buffer:
            line, buffer = buffer.split("\n", 1)
            if line.strip().startswith("{"):
                into.append(json.loads(line))
                changed[0].set()
                changed[0] = anyio.Event()


@pytest.mark.parametrize("mode", ["room", "to-device"])
async def test_a_person_verifies_the_bot_through_the_operators_emoji(
    synapse: Synapse, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    node = _node()
    person = synapse.register("carol", displayname="Carol")
    bot = synapse.register("bot", displayname="Agy Bot")
    data_dir = tmp_path / "bridge"
    config_file = tmp_path / "config.toml"
    config_file.write_text(
        f'[bridge]\ndata_dir = "{data_dir}"\n\n[matrix]\n'
        f'homeserver = "{synapse.base_url}"\nuser_id = "{bot.user_id}"\n'
    )
    adapter = MatrixAdapter(
        bot_config(synapse, bot, allowed_users=[person.user_id]),
        data_dir=data_dir,
        tuning=FAST_TUNING,
    )
    said: list[dict[str, Any]] = []
    changed = [anyio.Event()]

    async def wait_for(event: str, within: float = 60) -> dict[str, Any]:
        with anyio.fail_after(within):
            while True:
                for line in said:
                    if line["event"] == "error":
                        raise AssertionError(line["message"])
                    if line["event"] == event:
                        return line
                await changed[0].wait()

    def bot_signed_the_person() -> bool:
        keys = CrossSigningKeys.load(MatrixFiles.under(data_dir).cross_signing, bot.user_id)
        assert keys is not None
        master = keys_of(synapse, bot, person.user_id)["master_keys"][person.user_id]
        return verify(master, public_b64(keys.user_signing), bot.user_id)

    def operator(*args: str) -> tuple[int, str]:
        status = cli_main(["matrix", "verify", "--config", str(config_file), *args])
        return status, capsys.readouterr().out

    env = {
        "HS": synapse.base_url,
        "USER_ID": person.user_id,
        "PASSWORD": person.password,
        "BOT": bot.user_id,
        "MODE": mode,
        "PATH": "/usr/bin:/bin",
    }
    async with (
        open_store(f"sqlite:///{data_dir / 'bridge.sqlite3'}") as store,
        running_adapter(_with_store(adapter, store), RecordingInbound()),
        await anyio.open_process([node, str(JS / "verify_bot.mjs")], env=env) as process,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_lines, process.stdout, said, changed)
        try:
            sas = await wait_for("sas", within=90)
            # The operator lists what waits: one line, the request's id first.
            with anyio.fail_after(30):
                while True:
                    _, out = await anyio.to_thread.run_sync(operator)
                    if "carol" in out:
                        break
                    await anyio.sleep(0.5)
            [line] = out.strip().splitlines()
            request_id, user_id, device_id, *_ = line.split()
            requested = await wait_for("requested")
            # The way the request came: to the bot's device, or as an event in the DM.
            assert requested["to_device"] is (mode == "to-device")
            if mode == "to-device":
                assert request_id == requested["transaction_id"]
            else:
                assert request_id.startswith("$")
            assert user_id == person.user_id
            assert device_id == next(s for s in said if s["event"] == "room")["device_id"]
            # The bot's emoji, out of band, are the ones the person's client shows.
            shown = [part.split()[0] for part in line.split("  ", 3)[3].split(", ")]
            assert shown == sas["emoji"]
            assert (await anyio.to_thread.run_sync(operator, "--confirm", request_id))[0] == 0
            await wait_for("done")
            assert (await wait_for("status"))["cross_signing_verified"] is True
            # The bot signs the person's identity after its "done", which the person's client
            # may report first: the adapter is not stopped before the signature has landed.
            with anyio.fail_after(30):
                while not await anyio.to_thread.run_sync(bot_signed_the_person):
                    await anyio.sleep(0.2)
        finally:
            tg.cancel_scope.cancel()
            if process.returncode is None:
                process.kill()

        # The bot's user-signing key signed the person's identity (the homeserver shows such
        # a signature to its signer only, as the spec asks).
        assert bot_signed_the_person()
        master = keys_of(synapse, bot, person.user_id)["master_keys"][person.user_id]
        [pin] = await store.identity_pins()
        assert pin.user_id == person.user_id
        assert pin.master_key == next(iter(master["keys"].values()))
        assert await store.verifications() == []


def _with_store(adapter: MatrixAdapter, store: Any) -> MatrixAdapter:
    adapter.use_trust_store(store)
    return adapter

"""Invites as Element sends them, and who the bot serves (the access rule on Synapse)."""

from __future__ import annotations

from pathlib import Path

import pytest
from nio import RoomMemberEvent

from bridge.chat.matrix import MatrixAdapter

from .conftest import FAST_TUNING, Human, RecordingInbound, bot_config, cross_sign, running_adapter
from .synapse import Synapse

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]


@pytest.mark.parametrize("encrypted", [False, True])
async def test_first_message_of_a_lazy_dm_is_answered_once(
    synapse: Synapse, tmp_path: Path, encrypted: bool
) -> None:
    alice_user = synapse.register("alice")
    bot = synapse.register("bot")
    config = bot_config(synapse, bot, allowed_users=[alice_user.user_id])
    data_dir = tmp_path / "bridge"
    inbound = RecordingInbound()
    # A first run, so that what follows is not "before the bridge's very first start".
    async with running_adapter(
        MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING), inbound
    ):
        pass
    store = tmp_path / "alice-store" if encrypted else None
    async with Human.connect(synapse, alice_user, store) as alice:
        if encrypted:
            await cross_sign(alice, tmp_path / "alice-cross-signing.json")
        # Element creates the DM with the invite and sends the first message at once, before
        # the bot has joined (here: while the bridge is down, so the order is certain).
        room_id = await alice.create_room([bot.user_id], encrypted=encrypted)
        await alice.say(room_id, "hello, are you there?")
        adapter = MatrixAdapter(config, data_dir=data_dir, tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            await alice.wait_joined(room_id, bot.user_id)
            await inbound.wait_for(lambda i: len(i.messages) >= 1)
            await alice.say(room_id, "second")
            await inbound.wait_for(lambda i: len(i.messages) >= 2)
        assert inbound.texts() == ["hello, are you there?", "second"]
        assert inbound.messages[0].thread.channel == room_id


@pytest.mark.parametrize(
    ("users", "rooms", "alice_here", "alice_elsewhere", "bob_here"),
    [
        # Both lists: these people, in these rooms.
        (True, True, True, False, False),
        # Only people: those people, anywhere.
        (True, False, True, True, False),
        # Only rooms: anyone, in those rooms.
        (False, True, True, False, True),
        # Neither: nobody.
        (False, False, False, False, False),
    ],
)
async def test_access_lists_apply_together_to_messages_and_invites(
    synapse: Synapse,
    tmp_path: Path,
    users: bool,
    rooms: bool,
    alice_here: bool,
    alice_elsewhere: bool,
    bob_here: bool,
) -> None:
    alice_user = synapse.register("alice")
    bob_user = synapse.register("bob")
    bot = synapse.register("bot")
    async with Human.connect(synapse, alice_user) as alice, Human.connect(synapse, bob_user) as bob:
        here = await alice.create_room([bot.user_id, bob_user.user_id])
        elsewhere = await alice.create_room([])
        await bob.join(here)
        config = bot_config(
            synapse,
            bot,
            allowed_users=[alice_user.user_id] if users else [],
            allowed_rooms=[here] if rooms else [],
        )
        inbound = RecordingInbound()
        adapter = MatrixAdapter(config, data_dir=tmp_path / "bridge", tuning=FAST_TUNING)
        async with running_adapter(adapter, inbound):
            # An invite is accepted on the same terms as a message.
            invite_here = alice_here
            membership = await alice.wait_event(
                here,
                lambda e: (
                    isinstance(e, RoomMemberEvent)
                    and e.state_key == bot.user_id
                    and e.membership in ("join", "leave")
                ),
            )
            assert membership.membership == ("join" if invite_here else "leave")
            await alice.client.room_invite(elsewhere, bot.user_id)
            membership = await alice.wait_event(
                elsewhere,
                lambda e: (
                    isinstance(e, RoomMemberEvent)
                    and e.state_key == bot.user_id
                    and e.membership in ("join", "leave")
                ),
            )
            assert membership.membership == ("join" if alice_elsewhere else "leave")
            if not invite_here:
                return
            await bob.say(here, "bob here")
            await alice.say(here, "alice here")
            await inbound.wait_for(lambda i: "alice here" in i.texts())
            if alice_elsewhere:
                await alice.say(elsewhere, "alice elsewhere")
                await inbound.wait_for(lambda i: "alice elsewhere" in i.texts())
            # Bob wrote first: had he been let in, his message would be here already.
            assert ("bob here" in inbound.texts()) == bob_here

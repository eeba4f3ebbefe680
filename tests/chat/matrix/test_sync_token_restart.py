"""Invariants 2 and 6 for Matrix: the sync token is saved only after its events are handed over.

The core refuses a batch (its store cannot be written), then the adapter is stopped and a fresh
one starts on the same data directory: the message is still delivered, once. Within one run the
token in memory would hide a token written to disk too early; across a restart it cannot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bridge.chat.matrix import MatrixAdapter
from bridge.core.events import IncomingMessage, SubmitOutcome
from bridge.core.store.rows import StoreError

from .conftest import FAST_TUNING, Human, RecordingInbound, bot_config, running_adapter
from .synapse import MatrixUser, Synapse

pytestmark = [pytest.mark.anyio, pytest.mark.synapse]


@dataclass
class RefusingInbound(RecordingInbound):
    """The core with a full disk while ``refusing``: every submission fails, as the store's."""

    refusing: bool = False
    refused: list[str] = field(default_factory=list)

    async def submit(self, message: IncomingMessage) -> SubmitOutcome:
        if self.refusing:
            self.refused.append(message.text)
            self._notify()
            raise StoreError("could not write to the store: database or disk is full")
        return await super().submit(message)


@dataclass
class Room:
    synapse: Synapse
    bot: MatrixUser
    human: Human
    room_id: str
    data_dir: Path

    def adapter(self) -> MatrixAdapter:
        config = bot_config(self.synapse, self.bot, allowed_users=[self.human.user_id])
        return MatrixAdapter(config, data_dir=self.data_dir, tuning=FAST_TUNING)


@asynccontextmanager
async def room_with_bot(synapse: Synapse, tmp_path: Path) -> AsyncIterator[Room]:
    """A room where Alice invited the bot, which joined once; the bot is stopped again."""
    alice = synapse.register("alice", displayname="Alice")
    bot = synapse.register("bot", displayname="Agy Bot")
    async with Human.connect(synapse, alice) as human:
        room_id = await human.create_room([bot.user_id])
        room = Room(synapse, bot, human, room_id, tmp_path / "bridge")
        async with running_adapter(room.adapter(), RecordingInbound()):
            await human.wait_joined(room_id, bot.user_id)
        yield room


async def test_a_batch_the_core_refused_is_delivered_once_after_a_restart(
    synapse: Synapse, tmp_path: Path
) -> None:
    async with room_with_bot(synapse, tmp_path) as room:
        token_file = room.data_dir / "matrix" / "sync.json"
        first = RefusingInbound(refusing=True)
        async with running_adapter(room.adapter(), first):
            saved = token_file.read_text()
            await room.human.say(room.room_id, "deliver me once")
            # Refused, and refused again when the batch is fetched anew: the first refusal has
            # been dealt with in full before the adapter stops.
            await first.wait_for(lambda i: len(i.refused) >= 2)
            assert token_file.read_text() == saved, "the token moved past a refused batch"
        assert first.messages == []

        second = RefusingInbound()
        async with running_adapter(room.adapter(), second):
            await second.wait_for(lambda i: "deliver me once" in i.texts())
            await room.human.say(room.room_id, "and then this")
            await second.wait_for(lambda i: "and then this" in i.texts())
        assert second.texts() == ["deliver me once", "and then this"]

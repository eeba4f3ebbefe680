"""What the web console asks of Matrix: who is joined to a room, and which rooms are a DM."""

from __future__ import annotations

import pytest
from nio import AsyncClient, MatrixRoom

from bridge.chat.matrix.members import RoomMembers
from bridge.core.capabilities import KnowsMembers

pytestmark = pytest.mark.anyio

BOT = "@bot:test"


class _Rooms(RoomMembers):
    def __init__(self, client: AsyncClient | None) -> None:
        self.client = client

    def _members_client(self) -> AsyncClient | None:
        return self.client


def _room(room_id: str, *people: str) -> MatrixRoom:
    room = MatrixRoom(room_id, BOT)
    for user in (BOT, *people):
        room.add_member(user, None, None)
    return room


async def test_members_and_direct_rooms() -> None:
    client = AsyncClient("http://127.0.0.1:1", BOT)
    try:
        client.rooms["!dm:test"] = _room("!dm:test", "@alice:test")
        client.rooms["!team:test"] = _room("!team:test", "@alice:test", "@bob:test")
        rooms = _Rooms(client)
        assert isinstance(rooms, KnowsMembers)
        assert await rooms.is_member("!team:test", "@bob:test")
        assert not await rooms.is_member("!dm:test", "@bob:test")
        assert not await rooms.is_member("!unknown:test", "@alice:test")
        assert await rooms.is_direct("!dm:test")
        assert not await rooms.is_direct("!team:test")
        assert not await _Rooms(None).is_member("!team:test", "@bob:test")  # not connected
    finally:
        await client.close()

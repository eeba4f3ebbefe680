"""What the web console asks of Matrix: whether a person is joined to a room, and whether a
room is a direct conversation (the bot and one person), from the rooms the sync keeps."""

from __future__ import annotations

from nio import AsyncClient, MatrixRoom


class RoomMembers:
    """Mixed into the adapter: ``_members_client()`` is its connected client, or None."""

    def _members_client(self) -> AsyncClient | None:
        raise NotImplementedError

    def _room(self, room_id: str) -> MatrixRoom | None:
        client = self._members_client()
        return client.rooms.get(room_id) if client is not None else None

    async def is_member(self, channel: str, user_id: str) -> bool:
        room = self._room(channel)
        return room is not None and user_id in room.users

    async def is_direct(self, channel: str) -> bool:
        """Joined by the bot and one person only (and not a space or a bigger room)."""
        room = self._room(channel)
        return room is not None and len(room.users) == 2 and room.member_count <= 2

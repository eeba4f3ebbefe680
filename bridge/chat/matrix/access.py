"""Who may talk to the agent: deny by default.

A user is allowed when listed in ``allowed_users``; every member of a room listed in
``allowed_rooms`` is allowed in that room. An invite is accepted on the same terms (the inviter
is allowed, or the room is listed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class AccessPolicy:
    users: frozenset[str]
    rooms: frozenset[str]

    @classmethod
    def of(cls, users: Iterable[str], rooms: Iterable[str]) -> AccessPolicy:
        return cls(
            users=frozenset(u.strip() for u in users if u.strip()),
            rooms=frozenset(r.strip() for r in rooms if r.strip()),
        )

    def allows(self, user_id: str, room_id: str) -> bool:
        return user_id in self.users or room_id in self.rooms

    def with_rooms(self, rooms: Iterable[str]) -> AccessPolicy:
        """The same policy with room aliases replaced by the room ids they resolved to."""
        return AccessPolicy(users=self.users, rooms=frozenset(rooms))

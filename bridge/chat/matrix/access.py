"""Who may talk to the agent: deny by default.

A message is served when (its sender is listed in ``allowed_users``, or that list is empty)
and (its room is listed in ``allowed_rooms``, or that list is empty), and at least one list
is non-empty: an operator who fills both means "these people, in these rooms"; with both
empty nobody is served. An invite is accepted on the same terms (the inviter, the room).
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
        if not self.users and not self.rooms:
            return False
        user_ok = not self.users or user_id in self.users
        room_ok = not self.rooms or room_id in self.rooms
        return user_ok and room_ok

    def with_rooms(self, rooms: Iterable[str]) -> AccessPolicy:
        """The same policy with room aliases replaced by the room ids they resolved to."""
        return AccessPolicy(users=self.users, rooms=frozenset(rooms))

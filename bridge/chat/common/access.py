"""Who may talk to the agent: the same rule for every platform.

An operator lists people (``allowed_users``) and places (Slack channels, Matrix rooms). Filling
both means "these people, in these places": a message is served when its author is listed (or
no one is) and its place is listed (or none is). Both lists empty serves nobody, so a fresh
install is closed until the operator opens it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


def _clean(values: Iterable[str]) -> frozenset[str]:
    return frozenset(value.strip() for value in values if value.strip())


@dataclass(frozen=True)
class AccessRule:
    users: frozenset[str]
    places: frozenset[str]

    @classmethod
    def of(cls, users: Iterable[str], places: Iterable[str]) -> AccessRule:
        """From config lists (blank entries ignored)."""
        return cls(users=_clean(users), places=_clean(places))

    @property
    def closed(self) -> bool:
        """Both lists empty: nobody is served."""
        return not self.users and not self.places

    def allows(self, user: str, place: str) -> bool:
        """Whether ``user`` may talk to the agent in ``place`` (also: accept their invite)."""
        if self.closed:
            return False
        return (not self.users or user in self.users) and (not self.places or place in self.places)

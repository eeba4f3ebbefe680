"""Who may talk to the agent through Slack: deny by default, one notice per refusal."""

from __future__ import annotations

from collections.abc import Iterable

from bridge.chat.common.lru import LRUMap

NOTICE_TEXT = (
    "Sorry, the agent is not available to you here: ask the bridge's operator to add you "
    "(or this channel) to its allowed list."
)


class AccessPolicy:
    """``allowed_users`` and ``allowed_channels`` from the config, as for Matrix rooms.

    A listed user may talk to the agent anywhere the bot is; every member of a listed channel
    (C…, G…, or a DM's own D… id) may talk to it in that channel. Both lists empty: nobody.
    So listing channels alone does not open the bot to DMs from the whole workspace.
    """

    def __init__(self, allowed_users: Iterable[str], allowed_channels: Iterable[str]) -> None:
        self._users = frozenset(u.strip() for u in allowed_users if u.strip())
        self._channels = frozenset(c.strip() for c in allowed_channels if c.strip())

    def allows(self, user: str, channel: str) -> bool:
        return user in self._users or channel in self._channels


class NoticeLedger:
    """Remembers which user+channel pairs were already told they are not allowed (per run).

    Bounded: past ``capacity`` pairs the oldest are forgotten (and may be told once more).
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._seen: LRUMap[tuple[str, str], None] = LRUMap(capacity)

    def first_time(self, user: str, channel: str) -> bool:
        return self._seen.add((user, channel), None)

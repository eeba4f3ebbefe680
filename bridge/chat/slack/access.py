"""Who may talk to the agent through Slack: deny by default, one notice per refusal."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from bridge.chat.common.access import AccessRule
from bridge.chat.common.lru import LRUMap
from bridge.chat.slack.bound import ThreadCalls
from bridge.chat.slack.client import CALL_ERRORS
from bridge.chat.slack.events import PLATFORM
from bridge.chat.slack.spawn import TaskSlot
from bridge.core.events import ThreadRef

NOTICE_TEXT = (
    "Sorry, the agent is not available to you here: ask the bridge's operator to add you "
    "(or this channel) to its allowed list."
)


class AccessPolicy:
    """``allowed_users`` and ``allowed_channels`` from the config, by the shared rule
    (:class:`bridge.chat.common.access.AccessRule`): the user is listed (or no user is) and
    the channel is listed (or no channel is); both lists empty serves nobody.

    Channels are C…, G…, or a DM's own D… id: listing channels alone does not open the bot to
    DMs from the whole workspace, and with both lists filled a listed user's DMs need their
    D… ids listed too.
    """

    def __init__(self, allowed_users: Iterable[str], allowed_channels: Iterable[str]) -> None:
        self._rule = AccessRule.of(allowed_users, allowed_channels)

    def allows(self, user: str, channel: str) -> bool:
        return self._rule.allows(user, channel)

    def serves_somewhere(self, user: str) -> bool:
        """Whether some channel could serve ``user`` (for pages of their own: the App Home)."""
        rule = self._rule
        return not rule.closed and (not rule.users or user in rule.users)


class NoticeLedger:
    """Remembers which user+channel pairs were already told they are not allowed (per run).

    Bounded: past ``capacity`` pairs the oldest are forgotten (and may be told once more).
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._seen: LRUMap[tuple[str, str], None] = LRUMap(capacity)

    def first_time(self, user: str, channel: str) -> bool:
        return self._seen.add((user, channel), None)


class Refusals:
    """Tells a person privately (an ephemeral message), once per channel and run, that the
    agent is not available to them there; sent as a task, outside the event's handler."""

    def __init__(self, calls: Callable[[ThreadRef], ThreadCalls], tasks: TaskSlot) -> None:
        self._calls = calls
        self._tasks = tasks
        self._ledger = NoticeLedger()

    def refuse(self, user: str, channel: str, thread_ts: str) -> None:
        if not self._tasks.running or not self._ledger.first_time(user, channel):
            return
        self._tasks.spawn(self._send, user, channel, thread_ts)

    async def _send(self, user: str, channel: str, thread_ts: str) -> None:
        try:
            thread = ThreadRef(platform=PLATFORM, channel=channel, thread=thread_ts)
            await self._calls(thread).whisper("access notice", user, NOTICE_TEXT)
        except CALL_ERRORS:
            pass  # logged by with_retries

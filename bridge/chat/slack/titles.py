"""A person renaming a thread's agent session in Slack (``agent_session_title_changed``).

Slack sends the event whenever a person changes a session's title, even one the app set (the
event's page): ``channel``, ``thread_ts``, the new ``title``, ``previous_title`` (absent when
there was none) and the ``user``. The title is kept by the core (``!status`` shows it); from
then on the bridge never gives that session a title of its own (it only names a session when
the session starts, with the thread's first line, and never renames one), so a person's name
for a thread stays. Renames by people the bridge does not serve there are ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.events import PLATFORM
from bridge.chat.slack.users import UserDirectory
from bridge.core.events import Inbound, ThreadRef

log = logging.getLogger(__name__)


class TitleChanged(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    channel: str
    thread_ts: str
    title: str = ""
    previous_title: str | None = None
    user: str = ""


def title_changed(event: dict[str, Any]) -> TitleChanged | None:
    try:
        changed = TitleChanged.model_validate(event)
    except ValidationError:
        return None
    if not (changed.channel and changed.thread_ts and changed.user and changed.title.strip()):
        return None
    return changed


class SessionTitles:
    """Keeps each person's rename: in the core, and as a mark that the bridge titles no more."""

    def __init__(
        self,
        access: AccessPolicy,
        users: UserDirectory,
        *,
        renamed: Callable[[ThreadRef], None],
    ) -> None:
        self._access = access
        self._users = users
        self._renamed = renamed
        self.inbound: Inbound | None = None

    async def on_changed(self, event: dict[str, Any]) -> None:
        changed = title_changed(event)
        inbound = self.inbound
        if changed is None or inbound is None:
            return
        if not self._access.allows(changed.user, changed.channel):
            log.info("Slack: a rename by %s in %s ignored", changed.user, changed.channel)
            return
        thread = ThreadRef(platform=PLATFORM, channel=changed.channel, thread=changed.thread_ts)
        self._renamed(thread)
        author = await self._users.author(changed.user)
        if not await inbound.retitle(thread, changed.title, author):
            log.info("Slack: a rename in %s that is no conversation", thread.key)

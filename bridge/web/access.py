"""Who sees which thread in the console, and who may act there: the chat's own rules.

- ``[web] admins`` see every thread.
- Everyone else must still be served by their platform's access list (``allowed_users``,
  empty: everyone), and sees the threads of channels and rooms they are members of (their DMs
  with the bot included), as the chat says (:class:`bridge.core.capabilities.KnowsMembers`,
  asked at most once per ``membership_seconds`` per person and channel). A chat that cannot
  say shows them only the threads they wrote in.
- Approving, denying and stopping follow ``[approvals] approvers`` (empty: everyone who sees
  the thread), as in the chat; the gate checks the approvers again when it decides.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bridge.config import Config
from bridge.core.capabilities import KnowsMembers
from bridge.core.events import Author, ThreadRef
from bridge.core.store.rows import Database

# Membership answers kept at most (a bound, not a policy).
_CACHE_LIMIT = 10_000


@dataclass(frozen=True)
class Viewer:
    author: Author
    platform: str
    admin: bool
    approver: bool

    @property
    def id(self) -> str:
        return self.author.id


class Access:
    def __init__(
        self,
        config: Config,
        members: Mapping[str, object],
        db: Database,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        # The adapters that know members, by platform.
        self._members = {
            name: chat for name, chat in members.items() if isinstance(chat, KnowsMembers)
        }
        self._db = db
        self._clock = clock
        self._cache: dict[tuple[str, str, str], tuple[float, bool]] = {}

    def viewer(self, author: Author, platform: str) -> Viewer | None:
        """The person as the console treats them; None when their chat would not serve them."""
        admin = author.id in self._config.web.admins
        if not admin and not self._listed(platform, author.id):
            return None
        approvers = self._config.approvals.approvers
        return Viewer(author, platform, admin, not approvers or author.id in approvers)

    def _listed(self, platform: str, user_id: str) -> bool:
        section = getattr(self._config, platform, None)
        allowed = getattr(section, "allowed_users", None)
        return not allowed or user_id in allowed

    async def sees(self, viewer: Viewer, thread: ThreadRef) -> bool:
        if viewer.admin:
            return True
        if thread.platform != viewer.platform:
            return False
        chat = self._members.get(thread.platform)
        if chat is None:
            return await self._wrote_in(viewer, thread)
        return await self._member(chat, thread.channel, viewer.id)

    async def seen_keys(self, viewer: Viewer, keys: Sequence[str]) -> list[str]:
        """Those of the thread ``keys`` whose threads ``viewer`` sees, in order: :meth:`sees`
        for each, with the chat asked (or its cached answer looked up) once per channel."""
        if viewer.admin:
            return list(keys)
        answers: dict[str, bool] = {}
        seen = []
        for key in keys:
            platform, channel, _ = key.split("|", 2)
            if platform != viewer.platform:
                continue
            chat = self._members.get(platform)
            if chat is None:
                if await self._wrote_in(viewer, ThreadRef.from_key(key)):
                    seen.append(key)
                continue
            answer = answers.get(channel)
            if answer is None:
                answer = answers[channel] = await self._member(chat, channel, viewer.id)
            if answer:
                seen.append(key)
        return seen

    async def may_act(self, viewer: Viewer, thread: ThreadRef) -> bool:
        """Approve, deny, stop: an approver who sees the thread."""
        return viewer.approver and await self.sees(viewer, thread)

    async def _member(self, chat: KnowsMembers, channel: str, user_id: str) -> bool:
        key = (chat_platform(chat), channel, user_id)
        now = self._clock()
        known = self._cache.get(key)
        if known is not None and known[0] > now:
            return known[1]
        answer = await chat.is_member(channel, user_id)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = (now + self._config.web.membership_seconds, answer)
        return answer

    async def _wrote_in(self, viewer: Viewer, thread: ThreadRef) -> bool:
        rows = await self._db.fetch(
            "SELECT author_json FROM inbox WHERE thread_key = ? ORDER BY id DESC LIMIT 500",
            (thread.key,),
        )
        return any(_author_id(str(row["author_json"])) == viewer.id for row in rows)


def _author_id(author_json: str) -> str:
    try:
        author = json.loads(author_json)
    except ValueError:
        return ""
    return str(author.get("id", "")) if isinstance(author, dict) else ""


def chat_platform(chat: object) -> str:
    return str(getattr(chat, "platform", ""))

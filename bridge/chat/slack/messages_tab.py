"""Slack's agent messaging experience (``agent_view``): the app's Messages tab.

Slack's "Migrating to the Agent messaging experience" guide replaces the assistant container's
events (:mod:`bridge.chat.slack.assistant`, still served for ``assistant_view`` apps):
- ``app_home_opened`` with ``tab == "messages"``: a person opened the app's DM. The suggested
  prompts (``[slack] suggested_prompts``) go to the top of the tab with
  ``assistant.threads.setSuggestedPrompts`` and ``channel_id`` alone: with a ``thread_ts`` the
  call silently does nothing for an agent app. The event comes at every visit; as the event's
  page asks, the greeting (``[slack] greeting``) is posted only at the first interaction: when
  the DM holds no message yet.
- there is no Slack-made root any more: a person's top-level DM message is the root of its own
  thread (:func:`bridge.chat.slack.events.parse_event` already makes it one), answered there
  under the same access rules as any message.
- ``app_context_changed``: what the person looks at (:mod:`bridge.chat.slack.context`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.lru import LRUMap
from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.assistant import prompts
from bridge.chat.slack.client import CALL_ERRORS, describe
from bridge.chat.slack.context import ChannelReader, PersonContexts, channel_of, person_of
from bridge.chat.slack.events import BotIdentity, Candidate
from bridge.chat.slack.format import neutralise_broadcasts
from bridge.chat.slack.users import UserDirectory
from bridge.config import SlackSection
from bridge.core.command_text import is_command

log = logging.getLogger(__name__)


class HomeOpened(BaseModel):
    """``app_home_opened``: who opened which tab of the app, in which DM channel."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    user: str = ""
    channel: str = ""
    tab: str = ""


def home_opened(event: dict[str, Any]) -> HomeOpened | None:
    try:
        opened = HomeOpened.model_validate(event)
    except ValidationError:
        return None
    return opened if opened.user else None


class MessagesTab:
    """The adapter's side of the Messages tab: prompts, a first greeting, the context."""

    def __init__(
        self,
        config: SlackSection,
        client: AsyncWebClient,
        access: AccessPolicy,
        users: UserDirectory,
        *,
        spawn: Callable[..., None],
        refuse: Callable[[str, str, str], None],
    ) -> None:
        self._config = config
        self._client = client
        self._access = access
        self._spawn = spawn
        self._refuse = refuse
        self._contexts = PersonContexts()
        self._reader = ChannelReader(client, users, access)
        # DMs greeted during this run: two quick visits must not both find the DM empty.
        self._greeted: LRUMap[str, None] = LRUMap(10_000)

    # ----- events -------------------------------------------------------------------------

    def opened(self, opened: HomeOpened) -> None:
        """``app_home_opened`` with ``tab == "messages"`` (answered at once; the calls run
        beside)."""
        if opened.channel:
            self._spawn(self._welcome, opened.user, opened.channel)

    async def on_context_changed(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        person = person_of(body)
        if person is None:
            log.info("Slack: app_context_changed without a person in its authorizations")
            return
        self._contexts.seen(person, channel_of(event))

    # ----- a person's DM message -----------------------------------------------------------

    async def text_for_agent(self, candidate: Candidate, text: str, bot: BotIdentity) -> str:
        """A DM message's text with what its author looked at since their last message, once
        (never on a ``!command``)."""
        if not candidate.is_dm or is_command(text):
            return text
        channel = self._contexts.take(candidate.user)
        if channel is None:
            return text
        shared = await self._reader.share(candidate.user, channel, bot)
        return f"{text}\n\n{shared.note()}"

    # ----- the welcome ----------------------------------------------------------------------

    async def _welcome(self, user: str, dm: str) -> None:
        if not self._access.allows(user, dm):
            self._refuse(user, dm, "")
            return
        suggested = prompts(self._config.suggested_prompts)
        try:
            if suggested:
                # No thread_ts: for an agent app it would make Slack ignore the call.
                await self._client.assistant_threads_setSuggestedPrompts(
                    channel_id=dm, prompts=suggested
                )
            if self._config.greeting.strip() and await self._first_visit(dm):
                if not self._greeted.add(dm, None):
                    return
                await self._client.chat_postMessage(
                    channel=dm, markdown_text=neutralise_broadcasts(self._config.greeting)
                )
        except CALL_ERRORS as exc:
            log.info("Slack: no welcome in %s: %s", dm, describe(exc))

    async def _first_visit(self, dm: str) -> bool:
        """Whether the DM holds no message yet (Slack sends app_home_opened at every visit)."""
        response = await self._client.conversations_history(channel=dm, limit=1)
        return not response.get("messages")

"""Slack's assistant container (the agent's DM pane): ``assistant_thread_started`` and
``assistant_thread_context_changed``.

When a person opens a new thread there, the bridge posts a short greeting (``[slack]
greeting``) and up to four suggested prompts (``[slack] suggested_prompts``,
``assistant.threads.setSuggestedPrompts``). Slack also says which channel the person is looking
at (the thread's *context*, again whenever it changes): the bridge keeps the latest and hands it
to the agent with the next message in that thread, as a line after the person's text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.lru import LRUMap
from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.bound import ThreadCalls
from bridge.chat.slack.client import CALL_ERRORS, describe
from bridge.chat.slack.events import PLATFORM
from bridge.chat.slack.format import neutralise_broadcasts, one_line
from bridge.config import SlackSection
from bridge.core.command_text import is_command
from bridge.core.events import ThreadRef

log = logging.getLogger(__name__)

MAX_PROMPTS = 4
# Slack shows a prompt's title on a small button.
_TITLE_LIMIT = 75


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class ThreadContext(_Tolerant):
    channel_id: str | None = None
    team_id: str | None = None
    enterprise_id: str | None = None


class AssistantThread(_Tolerant):
    user_id: str = ""
    channel_id: str = ""
    thread_ts: str = ""
    context: ThreadContext = Field(default_factory=ThreadContext)


def assistant_thread(event: dict[str, Any]) -> AssistantThread | None:
    """The ``assistant_thread`` of a container event, or None when it lacks what we need."""
    try:
        thread = AssistantThread.model_validate(event.get("assistant_thread") or {})
    except ValidationError:
        return None
    if not (thread.user_id and thread.channel_id and thread.thread_ts):
        return None
    return thread


def prompts(texts: list[str]) -> list[dict[str, str]]:
    """``assistant.threads.setSuggestedPrompts``'s prompts: a short title, the whole message."""
    return [
        {"title": one_line(text, _TITLE_LIMIT), "message": text}
        for text in texts[:MAX_PROMPTS]
        if text.strip()
    ]


class Contexts:
    """The channel each container thread's person looks at, until the next message takes it."""

    def __init__(self) -> None:
        self._latest: LRUMap[tuple[str, str], str] = LRUMap(4096)

    def seen(self, thread: AssistantThread) -> None:
        if thread.context.channel_id:
            self._latest.put((thread.channel_id, thread.thread_ts), thread.context.channel_id)

    def take(self, channel: str, thread_ts: str) -> str | None:
        """The context not yet given to the agent for this thread, once."""
        return self._latest.pop((channel, thread_ts))


def with_context(text: str, context_channel: str) -> str:
    """The person's text and, on a line of its own, the channel they are looking at."""
    return f"{text}\n\n[Slack: the person is looking at channel {context_channel}]"


class AssistantPane:
    """The adapter's side of the container: greet new threads, keep and hand on the context."""

    def __init__(
        self,
        config: SlackSection,
        client: AsyncWebClient,
        access: AccessPolicy,
        *,
        calls: Callable[[ThreadRef], ThreadCalls],
        spawn: Callable[..., None],
        refuse: Callable[[str, str, str], None],
    ) -> None:
        self._config = config
        self._client = client
        self._access = access
        self._calls = calls
        self._spawn = spawn
        self._refuse = refuse
        self._contexts = Contexts()

    async def on_started(self, event: dict[str, Any]) -> None:
        thread = assistant_thread(event)
        if thread is not None:
            self._contexts.seen(thread)
            self._spawn(self._greet, thread)

    async def on_context_changed(self, event: dict[str, Any]) -> None:
        thread = assistant_thread(event)
        if thread is not None:
            self._contexts.seen(thread)

    def text_for_agent(self, channel: str, thread_ts: str, text: str) -> str:
        """A message's text with the channel its author looks at, if that is news (never on
        a ``!command``)."""
        if is_command(text):
            return text
        context = self._contexts.take(channel, thread_ts)
        return with_context(text, context) if context is not None else text

    async def _greet(self, started: AssistantThread) -> None:
        """A new thread: the greeting and the suggested prompts (for people the agent serves
        there; others get the one notice)."""
        channel, thread_ts = started.channel_id, started.thread_ts
        if not self._access.allows(started.user_id, channel):
            self._refuse(started.user_id, channel, thread_ts)
            return
        thread = ThreadRef(platform=PLATFORM, channel=channel, thread=thread_ts)
        try:
            if self._config.greeting.strip():
                await self._calls(thread).say(
                    "greeting", markdown_text=neutralise_broadcasts(self._config.greeting)
                )
            suggested = prompts(self._config.suggested_prompts)
            if suggested:
                await self._client.assistant_threads_setSuggestedPrompts(
                    channel_id=channel, thread_ts=thread_ts, prompts=suggested
                )
        except CALL_ERRORS as exc:
            log.info("Slack: no greeting in %s: %s", thread.key, describe(exc))

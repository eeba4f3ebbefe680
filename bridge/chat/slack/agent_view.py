"""Slack's agent messaging experience beside the messages themselves, in one place for the
adapter: the Messages tab (:mod:`messages_tab`, with what a person looks at), a person's titles
for threads (:mod:`titles`), and the App Home tab (:mod:`home`).

The adapter registers the experience's events here, hands each incoming message through
:meth:`AgentExperience.text_for_agent`, and says when what the Home pages show may have
changed (:meth:`AgentExperience.changed`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.events import BotIdentity, Candidate
from bridge.chat.slack.home import REFRESH_INTERVAL, AppHome
from bridge.chat.slack.messages_tab import MessagesTab, home_opened
from bridge.chat.slack.session import Sessions
from bridge.chat.slack.titles import SessionTitles
from bridge.chat.slack.users import UserDirectory
from bridge.config import SlackSection
from bridge.core.events import Inbound, ThreadRef
from bridge.core.home import HomeSources


class AgentExperience:
    def __init__(
        self,
        config: SlackSection,
        client: AsyncWebClient,
        access: AccessPolicy,
        users: UserDirectory,
        sessions: Sessions,
        *,
        spawn: Callable[..., None],
        refuse: Callable[[str, str, str], None],
        home_interval: float = REFRESH_INTERVAL,
    ) -> None:
        self._access = access
        self._sessions = sessions
        self.tab = MessagesTab(config, client, access, users, spawn=spawn, refuse=refuse)
        # The Home tab: each person's threads and approvals, refreshed as they change.
        self.home = AppHome(client, config.admins, spawn=spawn, interval=home_interval)
        self.titles = SessionTitles(access, users, renamed=self._renamed)

    def register(self, app: AsyncApp, inbound: Inbound) -> None:
        self.titles.inbound = inbound
        app.event("app_home_opened")(self._on_home_opened)
        app.event("app_context_changed")(self.tab.on_context_changed)
        app.event("agent_session_title_changed")(self.titles.on_changed)

    def serve_home(self, sources: HomeSources) -> None:
        self.home.sources = sources

    async def text_for_agent(self, candidate: Candidate, text: str, bot: BotIdentity) -> str:
        return await self.tab.text_for_agent(candidate, text, bot)

    def changed(self, *, after: float = 0.0) -> None:
        """What the Home pages show may have changed (a turn, an approval)."""
        self.home.changed(after=after)

    async def _on_home_opened(self, event: dict[str, Any]) -> None:
        """``app_home_opened``: the Messages tab (agent_view) or the Home tab."""
        opened = home_opened(event)
        if opened is None:
            return
        if opened.tab == "messages":
            self.tab.opened(opened)
        elif opened.tab == "home" and self._access.serves_somewhere(opened.user):
            self.home.opened(opened.user)

    def _renamed(self, thread: ThreadRef) -> None:
        """A person named the thread's session: the bridge titles it no more, and the pages
        list it by its new name."""
        self._sessions.named_by_person(thread)
        self.home.changed(after=1.0)

"""The app's Home tab (``views.publish``): a person's own page in Slack.

Published for a person when they open the tab (``app_home_opened`` with ``tab == "home"``),
and again whenever what it shows may have changed (a turn starts or ends, an approval is asked
or answered) for everyone who opened it in the last :data:`VIEWER_HOURS` hours. Each person's
page is published at most once per :data:`REFRESH_INTERVAL` seconds: changes inside that time
make one publish at its end; a page that would look the same is not published at all. A
publish is *optional* in the app's rate budget (:mod:`bridge.chat.slack.budget`): with no
``views.publish`` to spare it waits for the next token instead of taking one an answer needs.

It shows the person's active threads (links into Slack), what waits for their approval, and,
only where a provider of the data is wired (:class:`bridge.core.home.HomeSources`), their
usage against their budgets and the schedules they see; admins (``[slack] admins``) also see
the bridge's health. A Home tab that is off in the app's settings (``not_enabled``) is noted
once and not asked again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

import anyio
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.lru import LRUMap
from bridge.chat.slack.budget import Deferred, RateBudget
from bridge.chat.slack.client import CALL_ERRORS, api_error, describe
from bridge.chat.slack.format import mrkdwn_escape, one_line
from bridge.core.events import ThreadRef
from bridge.core.home import HomeSources, ScheduleLine, ThreadLine, UsageLine, WaitingLine

log = logging.getLogger(__name__)

REFRESH_INTERVAL = 10.0
# A page is kept current for this long after its person last opened it.
VIEWER_HOURS = 8.0
# A section's text stays under Slack's 3,000 characters.
_SECTION_LIMIT = 2900
_LABEL_LIMIT = 80


def _section(text: str) -> dict[str, Any]:
    if len(text) > _SECTION_LIMIT:
        text = text[: _SECTION_LIMIT - 1].rsplit("\n", 1)[0] + "\n…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _heading(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": text}}


def _note(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def _where(thread: ThreadRef) -> str:
    return "a DM with the agent" if thread.channel.startswith("D") else f"<#{thread.channel}>"


def _link(url: str | None, label: str) -> str:
    label = mrkdwn_escape(one_line(label, _LABEL_LIMIT)).replace("|", "¦")
    return f"<{url}|{label}>" if url else f"*{label}*"


class HomeView:
    """One person's page as Block Kit blocks (no I/O but the permalinks it is handed)."""

    def __init__(self, links: dict[ThreadRef, str | None]) -> None:
        self._links = links

    def threads(self, lines: list[ThreadLine]) -> list[dict[str, Any]]:
        blocks = [_heading("Your threads")]
        if not lines:
            return [
                *blocks,
                _note("No active threads this week: write to the agent here, or mention it."),
            ]
        rows = []
        for line in lines:
            state = "  ·  _working now_" if line.working else ""
            link = _link(self._links.get(line.thread), line.title)
            rows.append(f"• {link} in {_where(line.thread)}{state}")
        return [*blocks, _section("\n".join(rows))]

    def waiting(self, lines: list[WaitingLine]) -> list[dict[str, Any]]:
        blocks = [_heading("Waiting for your approval")]
        if not lines:
            return [*blocks, _note("Nothing waits for your approval.")]
        rows = []
        for line in lines:
            what = mrkdwn_escape(one_line(line.summary, 150)).replace("`", "'")
            asked = f", asked by {mrkdwn_escape(line.requested_by)}" if line.requested_by else ""
            link = _link(self._links.get(line.thread), "open the thread")
            rows.append(f"• `{what}` ({mrkdwn_escape(line.tool)}) in {link}{asked}")
        return [*blocks, _section("\n".join(rows))]

    @staticmethod
    def usage(lines: list[UsageLine]) -> list[dict[str, Any]]:
        rows = []
        for line in lines:
            label = mrkdwn_escape(line.label)
            if line.budget:
                share = math.floor(100 * line.used / line.budget)
                rows.append(f"• {label}: {line.used:,} of {line.budget:,} ({share}%)")
            else:
                rows.append(f"• {label}: {line.used:,} (no budget)")
        body = _section("\n".join(rows)) if rows else _note("Nothing used this period.")
        return [_heading("Your usage"), body]

    def schedules(self, lines: list[ScheduleLine]) -> list[dict[str, Any]]:
        rows = []
        for line in lines:
            where = f" in {_where(line.thread)}" if line.thread is not None else ""
            what = mrkdwn_escape(one_line(line.what, 150))
            rows.append(f"• {mrkdwn_escape(line.when)}{where}: {what}")
        body = _section("\n".join(rows)) if rows else _note("No schedules.")
        return [_heading("Schedules"), body]

    @staticmethod
    def health(lines: list[str]) -> list[dict[str, Any]]:
        text = "\n".join(f"• {mrkdwn_escape(line.lstrip('• '))}" for line in lines)
        return [_heading("Bridge health (admins)"), _section(text or "No data.")]


class AppHome:
    def __init__(
        self,
        client: AsyncWebClient,
        admins: Iterable[str],
        *,
        spawn: Callable[..., None],
        interval: float = REFRESH_INTERVAL,
    ) -> None:
        self._client = client
        self._admins = frozenset(admins)
        self._spawn = spawn
        self._interval = interval
        self.sources: HomeSources | None = None
        self._enabled = True
        # The people who opened the tab lately (when), and what each was last shown.
        self._viewers: LRUMap[str, float] = LRUMap(1000)
        self._shown: dict[str, list[dict[str, Any]]] = {}
        self._last: dict[str, float] = {}
        self._scheduled: set[str] = set()
        self._links: LRUMap[ThreadRef, str] = LRUMap(4096)

    def opened(self, user: str) -> None:
        self._viewers.put(user, anyio.current_time())
        self.refresh(user)

    def changed(self, *, after: float = 0.0) -> None:
        """Something a page may show changed: refresh every page opened lately (not before
        ``after`` seconds)."""
        since = anyio.current_time() - VIEWER_HOURS * 3600
        for gone in [user for user in self._shown if user not in self._viewers]:
            del self._shown[gone]  # dropped from the bounded map of viewers
        for user in self._viewers:
            if (self._viewers.peek(user) or -math.inf) < since:
                self._viewers.pop(user)
                self._shown.pop(user, None)
            else:
                self.refresh(user, after=after)

    def refresh(self, user: str, *, after: float = 0.0) -> None:
        if not self._enabled or self.sources is None or user in self._scheduled:
            return
        now = anyio.current_time()
        wait = max(after, self._last.get(user, -math.inf) + self._interval - now)
        self._scheduled.add(user)
        self._spawn(self._publish_later, user, wait)

    async def _publish_later(self, user: str, wait: float) -> None:
        try:
            await anyio.sleep(wait)
        finally:
            self._scheduled.discard(user)
        self._last[user] = anyio.current_time()
        try:
            await self._publish(user)
        except Deferred as deferred:
            # No views.publish to spare now: the page stays due, and comes when one is.
            self.refresh(user, after=deferred.wait)
        except Exception:
            log.exception("Slack: the Home tab of %s could not be built", user)

    async def _publish(self, user: str) -> None:
        blocks = await self._blocks(user)
        if blocks is None or blocks == self._shown.get(user):
            return
        try:
            with RateBudget.optional():
                await self._client.views_publish(
                    user_id=user, view={"type": "home", "blocks": blocks}
                )
        except CALL_ERRORS as exc:
            if api_error(exc) == "not_enabled":
                self._enabled = False
                log.warning(
                    "Slack: the app's Home tab is off (enable it in the app's settings, App "
                    "Home, or with deploy/slack-manifest.yaml): no Home pages are published"
                )
            else:
                log.info("Slack: the Home tab of %s not published: %s", user, describe(exc))
            return
        self._shown[user] = blocks

    async def _blocks(self, user: str) -> list[dict[str, Any]] | None:
        sources = self.sources
        if sources is None:
            return None
        platform = "slack"
        threads = await sources.facts.active_threads(platform, user)
        waiting = await sources.facts.waiting_for(platform, user)
        places = [line.thread for line in threads] + [line.thread for line in waiting]
        links = {thread: await self._link(thread) for thread in places}
        view = HomeView(links)
        blocks = [*view.threads(threads), {"type": "divider"}, *view.waiting(waiting)]
        if sources.usage is not None:
            used = await sources.usage.usage_for(platform, user)
            blocks += [{"type": "divider"}, *view.usage(used)]
        if sources.schedules is not None:
            found = await sources.schedules.schedules_for(platform, user)
            blocks += [{"type": "divider"}, *view.schedules(found)]
        if sources.health is not None and user in self._admins:
            blocks += [{"type": "divider"}, *view.health(await sources.health.health())]
        return blocks

    async def _link(self, thread: ThreadRef) -> str | None:
        """The thread's permalink (its root message), asked once and kept."""
        known = self._links.get(thread)
        if known is not None or not thread.thread:
            return known
        try:
            response = await self._client.chat_getPermalink(
                channel=thread.channel, message_ts=thread.thread
            )
        except CALL_ERRORS as exc:
            log.info("Slack: no link to %s: %s", thread.key, describe(exc))
            return None
        link = str(response.get("permalink") or "")
        if link:
            self._links.put(thread, link)
        return link or None

"""The fake Slack's agent messaging experience (``agent_view``) and App Home, kept apart from
the rest of the fake so other work on it does not collide with this part.

As Slack documents it (docs.slack.dev "Migrating to the Agent messaging experience", the event
and method reference pages):
- opening the app's DM sends ``app_home_opened`` with ``tab == "messages"`` (instead of the
  assistant container's ``assistant_thread_started``); opening the Home tab sends it with
  ``tab == "home"`` and, once a view was published, that ``view``;
- ``app_context_changed`` says what the person looks at: ``context.entities`` (ordered by
  relevance; ``{}`` when nothing), and names the person only in the envelope's
  ``authorizations`` (``is_bot: false``); Slack sends it only to ``agent_view`` apps;
- ``assistant.threads.setSuggestedPrompts`` sets the prompts at the top of the Messages tab
  for ``channel_id``; a call that also passes ``thread_ts`` answers ``ok`` and silently does
  nothing (the method's page: "Including it in a call for an agent app will cause the call to
  silently fail");
- ``agent_session_title_changed`` when a person renames a session (``previous_title`` left out
  when the session had none);
- ``views.publish``: a ``home`` view of at most 100 blocks and 250 kB, refused with
  ``not_enabled`` when the app's Home tab is off, ``hash_conflict`` when a ``hash`` is stale;
- channel membership for reads: ``conversations.info`` / ``conversations.members``, and
  ``conversations.history`` answers ``not_in_channel`` where the bot is no member.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.chat.slack.fake_slack import FakeSlack

EXPERIENCES = ("assistant_view", "agent_view")
HOME_BLOCK_TYPES = frozenset(
    {"section", "header", "divider", "context", "actions", "image", "rich_text", "markdown"}
)
MAX_HOME_BLOCKS = 100
MAX_VIEW_BYTES = 250_000


@dataclass
class PublishedView:
    user: str
    view: dict[str, Any]
    hash: str
    published: int = 1

    @property
    def blocks(self) -> list[dict[str, Any]]:
        return list(self.view.get("blocks") or [])

    @property
    def text(self) -> str:
        """The view's text as a person reads it (every block's text, one per line)."""
        lines: list[str] = []
        for block in self.blocks:
            lines.extend(_texts(block))
        return "\n".join(line for line in lines if line)


def _texts(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = []
        if value.get("type") in ("mrkdwn", "plain_text") and "text" in value:
            found.append(str(value["text"]))
        elif value.get("type") == "markdown" and isinstance(value.get("text"), str):
            found.append(value["text"])
        for key, inner in value.items():
            if key != "text" or isinstance(inner, dict):
                found.extend(_texts(inner))
        return found
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    return []


@dataclass
class AgentView:
    fake: FakeSlack
    # The DM channel each person's Messages tab is (Slack opens one per person).
    dms: dict[str, str] = field(default_factory=dict)
    # Prompts at the top of each DM's Messages tab: (prompts, title).
    tab_prompts: dict[str, tuple[list[dict[str, Any]], str | None]] = field(default_factory=dict)
    # setSuggestedPrompts calls Slack took and silently ignored (a thread_ts under agent_view).
    ignored_prompts: list[dict[str, Any]] = field(default_factory=list)
    home_tab_enabled: bool = False
    views: dict[str, PublishedView] = field(default_factory=dict)
    # channel -> its members; channels not listed here are readable by everyone.
    members: dict[str, set[str]] = field(default_factory=dict)
    private: set[str] = field(default_factory=set)
    names: dict[str, str] = field(default_factory=dict)

    # ----- people doing things -----------------------------------------------------------

    async def open_messages_tab(self, user: str, dm: str) -> str:
        """A person opens the app's DM (its Messages tab): ``app_home_opened``, tab messages."""
        self._require_agent_view("app_home_opened (tab messages)")
        self.dms[user] = dm
        event = {
            "type": "app_home_opened",
            "user": user,
            "channel": dm,
            "tab": "messages",
            "event_ts": self.fake.next_ts(),
        }
        return await self.fake.push_event(event)

    async def open_home_tab(self, user: str, dm: str) -> str:
        event: dict[str, Any] = {
            "type": "app_home_opened",
            "user": user,
            "channel": dm,
            "tab": "home",
            "event_ts": self.fake.next_ts(),
        }
        shown = self.views.get(user)
        if shown is not None:
            event["view"] = {**shown.view, "id": f"V{user}", "hash": shown.hash}
        return await self.fake.push_event(event)

    async def look_at(self, user: str, channel: str | None, *, entity: str | None = None) -> str:
        """The person looks at ``channel`` (None: at nothing Slack can name): the event names
        the channel among the context's entities and the person in ``authorizations`` only."""
        self._require_agent_view("app_context_changed")
        context: dict[str, Any] = {}
        if channel is not None:
            entities = [
                {"type": entity or "slack#/types/channel_id", "value": channel, "team_id": "T0"}
            ]
            context = {"entities": entities}
        event = {"type": "app_context_changed", "context": context}
        person = {
            "team_id": self.fake_team,
            "user_id": user,
            "is_bot": False,
            "is_enterprise_install": False,
        }
        return await self.fake.push_event(event, authorizations=[person])

    async def rename(self, channel: str, thread_ts: str, user: str, title: str) -> str:
        """A person renames the thread's agent session in Slack."""
        session = self.fake.sessions.by_thread.get((channel, thread_ts))
        assert session is not None, "no agent session in that thread to rename"
        previous = session.title
        session.title = title
        event: dict[str, Any] = {
            "type": "agent_session_title_changed",
            "channel": channel,
            "thread_ts": thread_ts,
            "title": title,
            "user": user,
            "team_id": self.fake_team,
            "event_ts": self.fake.next_ts(),
        }
        if previous:
            event["previous_title"] = previous
        return await self.fake.push_event(event)

    @property
    def fake_team(self) -> str:
        from tests.chat.slack.fake_slack import TEAM

        return TEAM

    def _require_agent_view(self, what: str) -> None:
        assert self.fake.experience == "agent_view", f"Slack sends {what} to agent_view apps only"

    # ----- methods --------------------------------------------------------------------------

    def set_prompts(self, args: dict[str, Any]) -> dict[str, Any]:
        from tests.chat.slack.fake_slack import _CHANNEL_ID, SlackApiFail, _json_list

        channel = str(args.get("channel_id") or "")
        if not _CHANNEL_ID.match(channel) or channel in self.fake.missing_channels:
            raise SlackApiFail("channel_not_found")
        prompts = _json_list(args.get("prompts")) or []
        if not prompts or len(prompts) > 4:
            raise SlackApiFail("invalid_arguments")
        if any(not p.get("title") or not p.get("message") for p in prompts):
            raise SlackApiFail("invalid_arguments")
        if args.get("thread_ts"):
            self.ignored_prompts.append(dict(args))
            return {}  # "silently fail"
        self.tab_prompts[channel] = (prompts, args.get("title"))
        return {}

    def publish(self, args: dict[str, Any]) -> dict[str, Any]:
        from tests.chat.slack.fake_slack import SlackApiFail, _check_blocks

        user = str(args.get("user_id") or "")
        raw = args.get("view")
        if not user or raw is None:
            raise SlackApiFail("invalid_arguments")
        text = raw if isinstance(raw, str) else json.dumps(raw)
        view = json.loads(text)
        if not isinstance(view, dict) or view.get("type") != "home":
            raise SlackApiFail("invalid_arguments")
        if not self.home_tab_enabled:
            raise SlackApiFail("not_enabled")
        if len(text.encode()) > MAX_VIEW_BYTES:
            raise SlackApiFail("view_too_large")
        blocks = view.get("blocks")
        if not isinstance(blocks, list) or len(blocks) > MAX_HOME_BLOCKS:
            raise SlackApiFail("invalid_arguments")
        if any(not isinstance(b, dict) or b.get("type") not in HOME_BLOCK_TYPES for b in blocks):
            raise SlackApiFail("invalid_blocks")
        _check_blocks([b for b in blocks if b.get("type") == "section"][:50])
        shown = self.views.get(user)
        wanted = args.get("hash")
        if wanted and shown is not None and wanted != shown.hash:
            raise SlackApiFail("hash_conflict")
        digest = hashlib.sha1(f"{text}{self.fake.next_ts()}".encode()).hexdigest()[:16]
        if shown is None:
            shown = PublishedView(user, view, digest, published=0)
            self.views[user] = shown
        shown.view, shown.hash = view, digest
        shown.published += 1
        return {"view": {**view, "id": f"V{user}", "hash": digest}}

    def permalink(self, args: dict[str, Any]) -> dict[str, Any]:
        from tests.chat.slack.fake_slack import _CHANNEL_ID, _TS, SlackApiFail

        channel, ts = str(args.get("channel") or ""), str(args.get("message_ts") or "")
        if not _CHANNEL_ID.match(channel) or channel in self.fake.missing_channels:
            raise SlackApiFail("channel_not_found")
        if not _TS.match(ts):
            raise SlackApiFail("message_not_found")
        link = f"https://fake.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        return {"channel": channel, "permalink": link}

    def info(self, args: dict[str, Any]) -> dict[str, Any]:
        from tests.chat.slack.fake_slack import BOT_USER, SlackApiFail

        channel = str(args.get("channel") or "")
        if channel in self.fake.missing_channels or not channel:
            raise SlackApiFail("channel_not_found")
        members = self.members.get(channel)
        private = channel in self.private
        if private and (members is None or BOT_USER not in members):
            raise SlackApiFail("channel_not_found")  # a private channel the bot is not in
        return {
            "channel": {
                "id": channel,
                "name": self.names.get(channel, channel.lower()),
                "is_private": private,
                "is_channel": not private,
                "is_member": members is None or BOT_USER in members,
            }
        }

    def list_members(self, args: dict[str, Any]) -> dict[str, Any]:
        from tests.chat.slack.fake_slack import SlackApiFail

        channel = str(args.get("channel") or "")
        self.info(args)
        members = self.members.get(channel)
        if members is None:
            raise SlackApiFail("channel_not_found")
        return {"members": sorted(members), "response_metadata": {"next_cursor": ""}}

    def check_history(self, channel: str) -> None:
        from tests.chat.slack.fake_slack import BOT_USER, SlackApiFail

        members = self.members.get(channel)
        if members is not None and BOT_USER not in members:
            raise SlackApiFail("channel_not_found" if channel in self.private else "not_in_channel")

"""Slack's message events into the core: what was written, by whom, whether it concerns the
agent and whether they may ask it; edits and deletions; and what a lost connection missed
(read back through the same path, see :mod:`bridge.chat.slack.catch_up`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bridge.chat.slack.access import AccessPolicy, Refusals
from bridge.chat.slack.agent_view import AgentExperience
from bridge.chat.slack.assistant import AssistantPane
from bridge.chat.slack.catch_up import CatchUp
from bridge.chat.slack.changes import is_change, parse_change
from bridge.chat.slack.events import BotIdentity, Candidate, parse_event, ts_to_datetime
from bridge.chat.slack.identity import Identity
from bridge.chat.slack.recipients import Recipient, Recipients
from bridge.chat.slack.session import Sessions
from bridge.chat.slack.spawn import TaskSlot
from bridge.chat.slack.users import UserDirectory
from bridge.core.events import Inbound, IncomingMessage, MessageChange

log = logging.getLogger(__name__)


class Intake:
    def __init__(
        self,
        *,
        identity: Identity,
        access: AccessPolicy,
        allowed_bots: frozenset[str],
        users: UserDirectory,
        recipients: Recipients,
        sessions: Sessions,
        pane: AssistantPane,
        agent_x: AgentExperience,
        refusals: Refusals,
        catch_up: CatchUp,
        tasks: TaskSlot,
    ) -> None:
        self._identity = identity
        self._access = access
        self._allowed_bots = allowed_bots
        self._users = users
        self._recipients = recipients
        self._sessions = sessions
        self._pane = pane
        self._agent_x = agent_x
        self._refusals = refusals
        self._catch_up = catch_up
        self._tasks = tasks
        self._catch_up_wanted = False
        self._catching_up = False

    async def on_event(self, inbound: Inbound, event: dict[str, Any], body: dict[str, Any]) -> None:
        bot = self._identity.bot
        if bot is None:
            return
        if is_change(event):
            await self._on_change(inbound, event, bot)
            return
        candidate = parse_event(
            event,
            bot,
            allowed_bots=self._allowed_bots,
            enterprise_id=body.get("enterprise_id") or None,
        )
        if candidate is None or not await self._concerns_agent(inbound, candidate):
            return
        channel = candidate.thread.channel
        if not self._access.allows(candidate.user, channel):
            log.info("Slack: %s in %s is not allowed", candidate.user, channel)
            self._refusals.refuse(candidate.user, channel, candidate.thread.thread)
            return
        team = candidate.org or body.get("team_id") or bot.team_id
        self._recipients.saw(channel, candidate.ts, Recipient(user_id=candidate.user, team_id=team))
        self._sessions.note_title(candidate)
        text = self._pane.text_for_agent(channel, candidate.thread.thread, candidate.text)
        text = await self._agent_x.text_for_agent(candidate, text, bot)
        message = IncomingMessage(
            thread=candidate.thread,
            event_id=candidate.event_id,
            message_id=candidate.ts,
            # With the author's organisation: the core keeps it with the message, so a reply
            # after a restart can still address its stream to the author.
            author=(await self._users.author(candidate.user)).model_copy(update={"org": team}),
            text=text,
            attachments=candidate.attachments,
            sent_at=ts_to_datetime(candidate.ts),
        )
        await inbound.submit(message)

    async def _on_change(self, inbound: Inbound, event: dict[str, Any], bot: BotIdentity) -> None:
        """An edit or a deletion: the core revises, withdraws or tells the agent."""
        change = parse_change(event, bot)
        if change is None or not self._access.allows(change.user, change.thread.channel):
            return
        await inbound.change(
            MessageChange(
                thread=change.thread,
                event_id=change.change_id,
                message_id=change.ts,
                author=await self._users.author(change.user),
                text=change.text,
            )
        )

    async def _concerns_agent(self, inbound: Inbound, candidate: Candidate) -> bool:
        """DMs always; in channels a mention, or a reply in a thread that is a conversation."""
        if candidate.is_dm or candidate.mentioned:
            return True
        return candidate.in_thread and await inbound.is_conversation(candidate.thread)

    # ----- what a connection missed -----------------------------------------------------------

    def started_http(self, started: Callable[[], None], inbound: Inbound) -> None:
        """The HTTP transport listens: events sent while the bridge was down are read back."""
        started()
        self.catch_up_soon(inbound)

    def catch_up_soon(self, inbound: Inbound) -> None:
        """Read back what a connection missed: one catch-up at a time, and one more when a
        connection came while it ran."""
        self._catch_up_wanted = True
        if not self._tasks.running or self._catching_up:
            return
        self._catching_up = True
        self._tasks.spawn(self._catch_up_while_wanted, inbound)

    async def _catch_up_while_wanted(self, inbound: Inbound) -> None:
        async def on_message(event: dict[str, Any]) -> None:
            await self.on_event(inbound, event, {})

        try:
            while self._catch_up_wanted:
                self._catch_up_wanted = False
                await self._catch_up.run(inbound, on_message)
        except Exception:
            log.exception("Slack: catch-up failed; it runs again at the next connection")
        finally:
            self._catching_up = False

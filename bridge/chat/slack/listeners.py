"""The Bolt app of the adapter: which Slack events and clicks go to which part."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.agent_view import AgentExperience
from bridge.chat.slack.approvals import ACTION_CHOICES, SlackApprovals
from bridge.chat.slack.assistant import AssistantPane
from bridge.chat.slack.control import STOP_ACTION_ID
from bridge.chat.slack.feedback import FEEDBACK_ACTION_ID, FeedbackClicks
from bridge.chat.slack.intake import Intake
from bridge.chat.slack.retry import RETRY_ACTION_ID, RetryClicks
from bridge.chat.slack.spawn import TaskSlot
from bridge.chat.slack.stops import Stops
from bridge.config import SlackSection
from bridge.core.events import Inbound


@dataclass(frozen=True)
class Listeners:
    """The parts that answer Slack: messages, stops, clicks, the assistant and agent views."""

    intake: Intake
    stops: Stops
    feedback: FeedbackClicks
    retry_clicks: RetryClicks
    approvals: SlackApprovals
    pane: AssistantPane
    agent_x: AgentExperience
    tasks: TaskSlot

    def app(self, config: SlackSection, client: AsyncWebClient, inbound: Inbound) -> AsyncApp:
        secret = config.signing_secret
        app = AsyncApp(
            client=client,
            signing_secret=secret.get_secret_value() if secret is not None else "",
            # Acknowledge an event only once the core has stored it: a crash in between makes
            # Slack redeliver it (and the core drops what it already has, by event id). This
            # also keeps Bolt from spawning listener tasks of its own.
            process_before_response=True,
            logger=logging.getLogger("bridge.chat.slack.bolt"),
            # Named: without a name Bolt takes its caller's file name from inspect.stack(),
            # which reads the source of every frame: over 0.1 s of CPU at every start.
            name="agy-bridge",
        )
        spawn = self.tasks.spawn

        async def on_event(event: dict[str, Any], body: dict[str, Any]) -> None:
            await self.intake.on_event(inbound, event, body)

        async def on_stop(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            # Interrupting can take a moment; Slack wants the click acknowledged within 3 s.
            spawn(self.stops.on_button, inbound, body, action)

        async def on_session_stopped(event: dict[str, Any]) -> None:
            spawn(self.stops.on_session_stopped, inbound, event)

        async def on_feedback(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            spawn(self.feedback.on_click, body, action)

        async def on_retry(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            spawn(self.retry_clicks.on_click, inbound, body, action)

        async def on_approval(ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
            await ack()
            spawn(self.approvals.on_action, inbound, body, action)

        app.event("app_mention")(on_event)
        app.event("message")(on_event)
        app.event("agent_session_stopped")(on_session_stopped)
        app.event("assistant_thread_started")(self.pane.on_started)
        app.event("assistant_thread_context_changed")(self.pane.on_context_changed)
        self.agent_x.register(app, inbound)
        app.action(STOP_ACTION_ID)(on_stop)
        for action_id in ACTION_CHOICES:
            app.action(action_id)(on_approval)
        app.action(FEEDBACK_ACTION_ID)(on_feedback)
        app.action(RETRY_ACTION_ID)(on_retry)
        return app

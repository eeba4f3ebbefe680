"""Who the bot is in the workspace: asked of Slack (``auth.test``) when the adapter starts."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.bound import Retries
from bridge.chat.slack.client import api_error
from bridge.chat.slack.events import BotIdentity
from bridge.chat.slack.transport import SlackStartError

log = logging.getLogger(__name__)


class Identity:
    def __init__(self, client: AsyncWebClient, retries: Retries) -> None:
        self._client = client
        self._retries = retries
        # None until :meth:`sign_in`: events before it are not the bot's to read.
        self.bot: BotIdentity | None = None

    async def sign_in(self) -> BotIdentity:
        """Ask Slack who the bot token is; a refused token stops the bridge here, with a
        message naming the setting."""
        try:
            response = await self._retries.run(
                self._client.auth_test, what="auth.test", thread_key="-"
            )
        except SlackApiError as exc:
            raise SlackStartError(
                f"Slack refused the bot token ({api_error(exc)}): check slack.bot_token "
                "(SLACK_BOT_TOKEN, starting with xoxb-)"
            ) from None
        bot = BotIdentity(
            user_id=str(response.get("user_id") or ""),
            bot_id=str(response.get("bot_id") or ""),
            team_id=str(response.get("team_id") or ""),
            name=str(response.get("user") or ""),
        )
        log.info("Slack: signed in as %s (%s) in team %s", bot.name, bot.user_id, bot.team_id)
        self.bot = bot
        return bot

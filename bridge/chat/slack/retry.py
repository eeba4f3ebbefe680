"""The Retry button under a notice that a turn was cut off (a bridge restart or failover).

A click is the thread's ``!retry``, written by whoever clicked: the adapter submits it as a
command message (one event per click), and the core sends the interrupted request again, once
(bridge/core/retry.py): a second click, or a click after a typed ``!retry``, sends nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.users import UserDirectory
from bridge.core.events import Inbound, IncomingMessage, ThreadRef

log = logging.getLogger(__name__)

PLATFORM = "slack"
RETRY_ACTION_ID = "agy_bridge_retry"
RETRY_COMMAND = "!retry"
# A ``markdown`` block holds at most 12,000 characters; a longer notice goes without a button.
MARKDOWN_BLOCK_LIMIT = 11_000


def retry_blocks(thread: ThreadRef, text: str) -> list[dict[str, Any]] | None:
    """The notice as Markdown with a Retry button under it; None when it is too long."""
    if len(text) > MARKDOWN_BLOCK_LIMIT:
        return None
    return [
        {"type": "markdown", "text": text},
        {
            "type": "actions",
            "block_id": "agy_bridge_retry",
            "elements": [
                {
                    "type": "button",
                    "action_id": RETRY_ACTION_ID,
                    "text": {"type": "plain_text", "text": "Retry"},
                    "value": thread.key,
                }
            ],
        },
    ]


class RetryClicks:
    def __init__(
        self,
        access: AccessPolicy,
        users: UserDirectory,
        refuse: Callable[[str, str, str], None],
    ) -> None:
        self._access = access
        self._users = users
        self._refuse = refuse

    async def on_click(
        self, inbound: Inbound, body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        """The button's value names the thread, which must be the one clicked in."""
        user = str((body.get("user") or {}).get("id") or "")
        container = body.get("container") or {}
        channel = str((body.get("channel") or {}).get("id") or container.get("channel_id") or "")
        try:
            thread = ThreadRef.from_key(str(action.get("value") or ""))
        except ValueError:
            return
        if thread.platform != PLATFORM or thread.channel != channel or not user:
            log.warning("Slack: a Retry button for another thread was ignored")
            return
        if not self._access.allows(user, channel):
            self._refuse(user, channel, thread.thread)
            return
        notice = str(container.get("message_ts") or (body.get("message") or {}).get("ts") or "")
        click = str(action.get("action_ts") or body.get("trigger_id") or uuid.uuid4().hex)
        try:
            await inbound.submit(
                IncomingMessage(
                    thread=thread,
                    event_id=f"retry-click:{notice}:{user}:{click}",
                    message_id=notice or click,
                    author=await self._users.author(user),
                    text=RETRY_COMMAND,
                )
            )
        except Exception:
            # A task of the adapter's group: a failure here must not stop the adapter.
            log.exception("Slack: a Retry click in %s failed", thread.key)

"""Feedback buttons under the agent's final answer: Slack's ``context_actions`` block with a
``feedback_buttons`` element (👍/👎), the convention for agents' answers (``[slack] feedback``).

A click arrives as a ``block_actions`` payload with :data:`FEEDBACK_ACTION_ID` and the value of
the button clicked; the adapter passes it on, under the same access rules as the Stop button,
to whatever records it (the store, the metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from bridge.chat.slack.access import AccessPolicy
from bridge.chat.slack.events import PLATFORM, ts_to_datetime
from bridge.chat.slack.users import UserDirectory
from bridge.core.events import Author, ThreadRef

log = logging.getLogger(__name__)

FEEDBACK_ACTION_ID = "agy_bridge_feedback"
POSITIVE = "positive"
NEGATIVE = "negative"

# Records a click on an answer's feedback buttons: (thread, answer message id, who, positive,
# when the answer was sent, as a Unix time).
FeedbackSink = Callable[[ThreadRef, str, Author, bool, float | None], Awaitable[None]]


def feedback_block() -> dict[str, Any]:
    return {
        "type": "context_actions",
        "block_id": "agy_bridge_feedback",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION_ID,
                "positive_button": {
                    "text": {"type": "plain_text", "text": "Good answer"},
                    "accessibility_label": "This answer was good",
                    "value": POSITIVE,
                },
                "negative_button": {
                    "text": {"type": "plain_text", "text": "Bad answer"},
                    "accessibility_label": "This answer was not good",
                    "value": NEGATIVE,
                },
            }
        ],
    }


class FeedbackClicks:
    """Clicks on the feedback buttons, checked and handed to the sink the app wired in."""

    def __init__(
        self,
        access: AccessPolicy,
        users: UserDirectory,
        *,
        refuse: Callable[[str, str, str], None],
    ) -> None:
        self._access = access
        self._users = users
        self._refuse = refuse
        self.sink: FeedbackSink | None = None

    async def on_click(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        user = str((body.get("user") or {}).get("id") or "")
        container = body.get("container") or {}
        message = body.get("message") or {}
        channel = str(container.get("channel_id") or (body.get("channel") or {}).get("id") or "")
        answer = str(container.get("message_ts") or message.get("ts") or "")
        root = str(message.get("thread_ts") or container.get("thread_ts") or answer)
        value = str(action.get("value") or "")
        if not (user and channel and answer) or value not in (POSITIVE, NEGATIVE):
            return
        thread = ThreadRef(platform=PLATFORM, channel=channel, thread=root)
        if not self._access.allows(user, channel):
            self._refuse(user, channel, root)
            return
        if self.sink is None:
            return
        try:
            who = await self._users.author(user)
            sent = ts_to_datetime(answer)
            sent_at = sent.timestamp() if sent is not None else None
            await self.sink(thread, answer, who, value == POSITIVE, sent_at)
        except Exception:
            # A task of the adapter's group: a failure here must not stop the adapter.
            log.exception("Slack: feedback in %s not recorded", thread.key)

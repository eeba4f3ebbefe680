"""Feedback buttons under the agent's final answer: Slack's ``context_actions`` block with a
``feedback_buttons`` element (👍/👎), the convention for agents' answers (``[slack] feedback``).

A click arrives as a ``block_actions`` payload with :data:`FEEDBACK_ACTION_ID` and the value of
the button clicked; the adapter passes it on, under the same access rules as the Stop button,
to whatever records it (the store, the metrics).
"""

from __future__ import annotations

from typing import Any

FEEDBACK_ACTION_ID = "agy_bridge_feedback"
POSITIVE = "positive"
NEGATIVE = "negative"


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


def answer_blocks(markdown: str) -> list[dict[str, Any]]:
    """A final answer posted or edited with its feedback buttons: ``markdown_text`` takes no
    blocks beside it, so the text goes in a ``markdown`` block."""
    return [{"type": "markdown", "text": markdown}, feedback_block()]

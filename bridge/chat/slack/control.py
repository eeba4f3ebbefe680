"""The control message of a running turn: "Working…", the latest tool lines, a Stop button.

Where the answer streams, the tool calls are the stream's tasks instead (reply.py), and where
Slack shows an agent session it has its own stop button: each part is left out then.

It goes up only once a turn has run a moment (a short answer needs no Stop button), shows the
tool calls as they happen, and at the end keeps only the tool log, or goes away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.bound import ThreadCalls
from bridge.chat.slack.format import mrkdwn_escape, tool_line
from bridge.core.events import ThreadRef, ToolActivity

STOP_ACTION_ID = "agy_bridge_stop"
# Tool lines shown while the agent works, and kept in the log at the end.
LIVE_TOOL_LINES = 8
FINAL_TOOL_LINES = 10
# A section block's text may hold 3,000 characters.
_SECTION_LIMIT = 2_900


@dataclass
class ToolLog:
    lines: list[str] = field(default_factory=list)
    keys: list[tuple[str, str]] = field(default_factory=list)

    def record(self, activity: ToolActivity) -> None:
        # Cut before escaping (tool_line), escaped for the mrkdwn section it goes into.
        line = mrkdwn_escape(tool_line(activity))
        key = (activity.name, activity.summary)
        if activity.state != "ACTIVE" and key in self.keys[-LIVE_TOOL_LINES:]:
            # The end of a call shown as ACTIVE: update its line in place.
            index = len(self.keys) - 1 - self.keys[::-1].index(key)
            self.lines[index] = line
            return
        self.lines.append(line)
        self.keys.append(key)

    def tail(self, count: int) -> list[str]:
        hidden = len(self.lines) - count
        shown = self.lines[-count:] if count else []
        return ([f"_… {hidden} earlier_"] if hidden > 0 else []) + shown


class ControlMessage:
    """Posted by :meth:`post`, refreshed by :meth:`update`, closed by :meth:`finish`."""

    def __init__(
        self,
        client: AsyncWebClient,
        thread: ThreadRef,
        tools: ToolLog,
        *,
        show_tools: Callable[[], bool] = lambda: True,
        with_stop: Callable[[], bool] = lambda: True,
    ) -> None:
        self._client = client
        self._thread = thread
        self._tools = tools
        # Asked each time: no tool lines while the answer's stream carries them as tasks, no
        # Stop button where Slack shows its own (an agent session).
        self._show_tools = show_tools
        self._with_stop = with_stop
        self.ts: str | None = None
        self._shown: str | None = None

    def text(self, *, live: bool) -> str:
        count = LIVE_TOOL_LINES if live else FINAL_TOOL_LINES
        while True:
            lines = self._tools.tail(count) if self._show_tools() else []
            if live:
                lines = ["_Working…_", *lines]
            text = "\n".join(lines)
            if len(text) <= _SECTION_LIMIT or count <= 1:
                return text[:_SECTION_LIMIT]
            count -= 1

    def blocks(self, *, live: bool) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": {"type": "mrkdwn", "text": self.text(live=live)}}
        ]
        if live and self._with_stop():
            blocks.append(
                {
                    "type": "actions",
                    "block_id": "agy_bridge_controls",
                    "elements": [
                        {
                            "type": "button",
                            "action_id": STOP_ACTION_ID,
                            "text": {"type": "plain_text", "text": "Stop"},
                            "style": "danger",
                            "value": self._thread.key,
                        }
                    ],
                }
            )
        return blocks

    async def post(self) -> None:
        # What is posted now: tool lines recorded during the call are news for update().
        shown = self.text(live=True)
        response = await self._client.chat_postMessage(
            channel=self._thread.channel,
            thread_ts=self._thread.thread or None,
            text="Working…",
            blocks=self.blocks(live=True),
        )
        value = response.get("ts")
        self.ts = str(value) if value else None
        self._shown = shown

    async def update(self) -> None:
        """Show the latest tool lines (when the message is up and they changed)."""
        if self.ts is None:
            return
        wanted = self.text(live=True)
        if wanted == self._shown:
            return
        blocks = self.blocks(live=True)
        await self._client.chat_update(
            channel=self._thread.channel,
            ts=self.ts,
            text="Working…",
            blocks=blocks,
        )
        self._shown = wanted

    async def finish(self, calls: ThreadCalls) -> None:
        """The Stop button goes away: keep the tool log, or delete a message with nothing in it."""
        if self.ts is None:
            return
        ts, self.ts = self.ts, None
        if self._tools.lines and self._show_tools():
            await calls.edit("tool log", ts, text="Tool activity", blocks=self.blocks(live=False))
        else:
            await calls.delete("control message removal", ts)

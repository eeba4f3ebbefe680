"""One turn's reply in a Slack thread: a control message, a streamed answer, a final rewrite.

While the agent works the thread shows:
- a *control message* (posted first): "Working…", the latest tool lines and a Stop button;
- the *answer*, streamed with the SDK's ``chat_stream`` or, where streaming is refused or
  disabled, one message edited about once a second. Long answers and expired streams
  (``message_not_in_streaming_state``) roll over to a new message, so a long turn keeps its
  whole text;
- a status: ``assistant.threads.setStatus`` where Slack offers it, else a reaction on the
  user's message.

At the end the whole final text replaces what streamed (split over as many messages as it
needs), the control message keeps only the tool log (or goes away), and the status is cleared.

Network calls happen in the reply's :class:`FlushPump`, a task of the adapter's task group, so
``append`` and ``tool`` never wait for Slack: a slow or rate-limited API cannot stall the turn.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import anyio
from anyio.abc import TaskGroup
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.markdown import cut_point, slice_for_display
from bridge.chat.common.pump import FlushPump
from bridge.chat.slack.client import CALL_ERRORS, api_error, describe, with_retries
from bridge.chat.slack.format import SPLIT_LIMIT, split_message, tool_line
from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome
from bridge.core.outcome import render_outcome

log = logging.getLogger(__name__)

T = TypeVar("T")

STOP_ACTION_ID = "agy_bridge_stop"
STATUS_TEXT = "is working…"
STATUS_REACTION = "hourglass_flowing_sand"
EXPIRED = "message_not_in_streaming_state"
# Tool lines shown while the agent works, and kept in the log at the end.
LIVE_TOOL_LINES = 8
FINAL_TOOL_LINES = 10
# A section block's text may hold 3,000 characters.
_SECTION_LIMIT = 2_900
# Room left in a live piece for a fence line added when it is cut inside a code block.
_FENCE_ROOM = 64


@dataclass(frozen=True)
class Recipient:
    """Whom a stream in a channel is for: Slack requires both ids outside DMs."""

    user_id: str | None = None
    team_id: str | None = None


@dataclass(frozen=True)
class ReplySettings:
    streaming: bool = True
    # At most one edit (or stream append) per interval: Slack's chat.update is rate limited.
    interval: float = 1.0
    attempts: int = 4
    backoff: float = 0.5


# The first text waits this long (or for this much text) before a message is started.
FIRST_TEXT_DELAY = 0.4
FIRST_TEXT_CHARS = 256


@dataclass
class _Segment:
    """One message of the answer: the text from ``start`` up to the next segment's start."""

    start: int
    ts: str | None = None
    stream: AsyncChatStream | None = None
    given: int = 0  # streaming: how far the answer text has been handed to the stream
    shown: str | None = None  # editing: what the message shows now


def _mrkdwn_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass
class _ToolLog:
    lines: list[str] = field(default_factory=list)
    keys: list[tuple[str, str]] = field(default_factory=list)

    def record(self, activity: ToolActivity) -> None:
        line = _mrkdwn_escape(tool_line(activity))
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


class SlackLiveReply:
    """A :class:`bridge.core.events.LiveReply` for Slack. Start with :meth:`begin`, run
    its pump in a task group (:meth:`start`), then ``append``/``tool`` and finally ``finish``."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        thread: ThreadRef,
        reply_to: str | None,
        recipient: Recipient,
        settings: ReplySettings,
        no_status: set[str] | None = None,
    ) -> None:
        self._client = client
        # Channels where Slack refused assistant.threads.setStatus (shared by the adapter's
        # replies): asking again every turn only costs a round trip.
        self._no_status = no_status if no_status is not None else set()
        self._thread = thread
        self._reply_to = reply_to
        self._recipient = recipient
        self._settings = settings
        self._streaming = settings.streaming
        self._text = ""
        self._tools = _ToolLog()
        self._segments: list[_Segment] = []
        self._control_ts: str | None = None
        self._control_shown: str | None = None
        self._status: Literal["none", "assistant", "reaction"] = "none"
        self._finished = False
        self._pump = FlushPump(self._flush, lambda: settings.interval, name=thread.key)
        self._begun = anyio.Event()
        self._begin_scheduled = False
        self._first_text_at: float | None = None

    @property
    def thread(self) -> ThreadRef:
        return self._thread

    @property
    def streaming(self) -> bool:
        """Whether the answer is (still) streamed rather than edited."""
        return self._streaming

    # ----- the LiveReply protocol -------------------------------------------------------------

    async def append(self, text: str) -> None:
        if self._finished or not text:
            return
        if self._first_text_at is None:
            self._first_text_at = anyio.current_time()
        self._text += text
        self._pump.poke()

    async def tool(self, activity: ToolActivity) -> None:
        if self._finished:
            return
        self._tools.record(activity)
        self._pump.poke()

    async def finish(self, outcome: TurnOutcome) -> None:
        if self._finished:
            return
        self._finished = True
        await self._pump.stop()
        try:
            await self._render_final(render_outcome(outcome, self._text))
        finally:
            # Whatever happened to the answer, the Stop button and the status go away (once
            # begin(), which runs beside the turn, has put them up).
            if self._begin_scheduled:
                await self._begun.wait()
            await self._finish_control()
            await self._clear_status()

    async def close(self) -> None:
        """Leaving the reply without an answer (the turn was cancelled): clear what is shown."""
        if not self._finished:
            await self.finish(
                TurnOutcome(error="the turn ended before the agent answered", interrupted=True)
            )

    # ----- start and the background pump ------------------------------------------------------

    def start(self, task_group: TaskGroup) -> None:
        """Put up the control message and status, and run the pump, beside the turn."""
        self._begin_scheduled = True
        task_group.start_soon(self.begin)
        task_group.start_soon(self._pump.run)

    async def ready(self) -> None:
        """Until begin() has put up the control message and the status."""
        await self._begun.wait()

    async def begin(self) -> None:
        """Post the control message (with the Stop button), then show the status.

        The status comes second: Slack clears an assistant thread's status when the app posts.
        Failures here are logged, never raised: the turn runs even if Slack hiccups now.
        """
        try:
            await self._begin()
        finally:
            self._begun.set()

    async def _begin(self) -> None:
        try:
            response = await self._retrying(
                "control message",
                functools.partial(
                    self._client.chat_postMessage,
                    channel=self._thread.channel,
                    thread_ts=self._thread.thread or None,
                    text="Working…",
                    blocks=self._control_blocks(live=True),
                ),
            )
            self._control_ts = _ts(response)
            self._control_shown = self._control_text(live=True)
        except CALL_ERRORS:
            pass  # logged by _retrying; the answer still comes, only without a Stop button
        await self._set_status()

    def _first_delay(self) -> float:
        return min(self._settings.interval, FIRST_TEXT_DELAY)

    def _hold_first_text(self) -> bool:
        """Hold the answer's first message back a moment: a short answer that finishes
        meanwhile is posted once (one call) instead of as a stream started, stopped and
        rewritten. Slack shows nothing of a stream before 256 characters anyway."""
        if self._segments or len(self._text) >= FIRST_TEXT_CHARS or self._first_text_at is None:
            return False
        return anyio.current_time() - self._first_text_at < self._first_delay()

    async def _flush(self) -> float | None:
        """Show what is new; the seconds until the next flush when the first text was held
        back (the pump then comes back without a poke)."""
        try:
            await self._flush_control()
        except CALL_ERRORS as exc:
            # Tool lines are a nicety: try again next time, and carry on with the answer.
            log.info("tool lines not updated in %s: %s", self._thread.key, describe(exc))
        if not self._text.strip():
            return None
        if self._hold_first_text():
            return self._first_delay()
        if self._streaming:
            await self._flush_stream()
        else:
            await self._flush_edit()
        return None

    # ----- the control message ----------------------------------------------------------------

    def _control_text(self, *, live: bool) -> str:
        count = LIVE_TOOL_LINES if live else FINAL_TOOL_LINES
        while True:
            lines = self._tools.tail(count)
            if live:
                lines = ["_Working…_", *lines]
            text = "\n".join(lines)
            if len(text) <= _SECTION_LIMIT or count <= 1:
                return text[:_SECTION_LIMIT]
            count -= 1

    def _control_blocks(self, *, live: bool) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": {"type": "mrkdwn", "text": self._control_text(live=live)}}
        ]
        if live:
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

    async def _flush_control(self) -> None:
        if self._control_ts is None:
            return
        wanted = self._control_text(live=True)
        if wanted == self._control_shown:
            return
        await self._client.chat_update(
            channel=self._thread.channel,
            ts=self._control_ts,
            text="Working…",
            blocks=self._control_blocks(live=True),
        )
        self._control_shown = wanted

    async def _finish_control(self) -> None:
        """The Stop button goes away: keep the tool log, or delete a message with nothing in it."""
        if self._control_ts is None:
            return
        ts = self._control_ts
        try:
            if self._tools.lines:
                await self._retrying(
                    "tool log",
                    functools.partial(
                        self._client.chat_update,
                        channel=self._thread.channel,
                        ts=ts,
                        text="Tool activity",
                        blocks=self._control_blocks(live=False),
                    ),
                )
            else:
                await self._retrying(
                    "control message removal",
                    functools.partial(
                        self._client.chat_delete, channel=self._thread.channel, ts=ts
                    ),
                )
        except CALL_ERRORS:
            pass  # logged with the thread key by _retrying

    # ----- status -----------------------------------------------------------------------------

    async def _set_status(self) -> None:
        if self._thread.channel not in self._no_status:
            try:
                await self._client.assistant_threads_setStatus(
                    channel_id=self._thread.channel,
                    thread_ts=self._thread.thread,
                    status=STATUS_TEXT,
                )
                self._status = "assistant"
                return
            except CALL_ERRORS as exc:
                # Outside assistant threads Slack refuses: fall back to a reaction.
                log.debug("no assistant status for %s: %s", self._thread.key, describe(exc))
                if api_error(exc):
                    self._no_status.add(self._thread.channel)
        if not self._reply_to:
            return
        try:
            await self._client.reactions_add(
                channel=self._thread.channel, timestamp=self._reply_to, name=STATUS_REACTION
            )
            self._status = "reaction"
        except CALL_ERRORS as exc:
            if api_error(exc) == "already_reacted":
                self._status = "reaction"
            else:
                log.info("no status reaction for %s: %s", self._thread.key, describe(exc))

    async def _clear_status(self) -> None:
        try:
            if self._status == "assistant":
                await self._client.assistant_threads_setStatus(
                    channel_id=self._thread.channel, thread_ts=self._thread.thread, status=""
                )
            elif self._status == "reaction" and self._reply_to:
                await self._client.reactions_remove(
                    channel=self._thread.channel, timestamp=self._reply_to, name=STATUS_REACTION
                )
        except CALL_ERRORS as exc:
            log.info("could not clear the status of %s: %s", self._thread.key, describe(exc))
        self._status = "none"

    # ----- the answer, edited -----------------------------------------------------------------

    def _current(self) -> _Segment:
        if not self._segments:
            self._segments.append(_Segment(start=0))
        return self._segments[-1]

    async def _flush_edit(self) -> None:
        text = self._text
        segment = self._current()
        while len(text) - segment.start > SPLIT_LIMIT:
            cut = cut_point(text, segment.start, SPLIT_LIMIT - _FENCE_ROOM)
            await self._show(segment, slice_for_display(text, segment.start, cut))
            segment = _Segment(start=cut, given=cut)
            self._segments.append(segment)
        await self._show(segment, slice_for_display(text, segment.start, len(text)))

    async def _show(self, segment: _Segment, content: str) -> None:
        if not content.strip() or content == segment.shown:
            return
        if segment.ts is None:
            response = await self._client.chat_postMessage(
                channel=self._thread.channel,
                thread_ts=self._thread.thread or None,
                markdown_text=content,
            )
            segment.ts = _ts(response)
        else:
            await self._client.chat_update(
                channel=self._thread.channel, ts=segment.ts, markdown_text=content
            )
        segment.shown = content

    # ----- the answer, streamed ---------------------------------------------------------------

    async def _open_stream(self, start: int) -> _Segment:
        stream = await self._client.chat_stream(
            channel=self._thread.channel,
            thread_ts=self._thread.thread,
            recipient_user_id=self._recipient.user_id,
            recipient_team_id=self._recipient.team_id,
            # Our pump already coalesces text once per interval: every append is sent.
            buffer_size=1,
        )
        segment = _Segment(start=start, stream=stream, given=start)
        self._segments.append(segment)
        return segment

    async def _flush_stream(self) -> None:
        text = self._text
        segment = self._segments[-1] if self._segments else await self._open_stream(0)
        while segment.given < len(text):
            if segment.stream is None:
                segment = await self._open_stream(segment.given)
            # A message that would grow past the limit ends at a paragraph or line boundary.
            full = len(text) - segment.start > SPLIT_LIMIT
            end = len(text)
            if full:
                end = max(segment.given, cut_point(text, segment.start, SPLIT_LIMIT - _FENCE_ROOM))
            if end == segment.given:
                segment = await self._roll_over(segment, stop=True)
                continue
            piece = text[segment.given : end]
            # Handed over even if the call fails: the SDK keeps unsent text in its buffer and
            # sends it with the next append (and the final rewrite covers everything anyway).
            segment.given = end
            stream = segment.stream
            assert stream is not None
            try:
                await stream.append(markdown_text=piece)
            except SlackApiError as exc:
                if api_error(exc) == EXPIRED and segment.ts is not None:
                    log.info("stream expired in %s; continuing in a new message", self._thread.key)
                    segment = await self._roll_over(segment, stop=False)
                    continue
                if stream.ts is None:
                    log.info(
                        "streaming unavailable in %s (%s); editing a message instead",
                        self._thread.key,
                        describe(exc),
                    )
                    self._streaming = False
                    segment.stream = None
                    await self._flush_edit()
                    return
                raise
            segment.ts = stream.ts
            if full:
                segment = await self._roll_over(segment, stop=True)

    async def _roll_over(self, segment: _Segment, *, stop: bool) -> _Segment:
        """End ``segment`` (stop its stream, rewrite it with its whole part of the text) and
        continue the answer in a new stream."""
        stream, segment.stream = segment.stream, None
        following = await self._open_stream(segment.given)
        if stop and stream is not None and stream.ts is not None:
            await self._stop_stream(stream)
        if segment.ts is not None:
            content = slice_for_display(self._text, segment.start, segment.given)
            try:
                await self._client.chat_update(
                    channel=self._thread.channel, ts=segment.ts, markdown_text=content
                )
                segment.shown = content
            except CALL_ERRORS as exc:
                # The final rewrite fixes this message; keep streaming meanwhile.
                log.warning(
                    "could not close a streamed message in %s: %s", self._thread.key, describe(exc)
                )
        return following

    async def _stop_stream(self, stream: AsyncChatStream) -> None:
        try:
            await stream.stop()
        except CALL_ERRORS as exc:
            if api_error(exc) != EXPIRED:
                log.info("stopping a stream in %s failed: %s", self._thread.key, describe(exc))

    # ----- the final rewrite ------------------------------------------------------------------

    async def _render_final(self, final: str) -> None:
        """The whole final text over the answer's messages: rewrite, add or delete messages."""
        for segment in self._segments:
            stream, segment.stream = segment.stream, None
            if stream is not None and stream.ts is not None:
                await self._stop_stream(stream)
        targets = [segment for segment in self._segments if segment.ts is not None]
        chunks = split_message(final)
        for index, chunk in enumerate(chunks):
            if index < len(targets):
                await self._rewrite(targets[index], chunk)
            else:
                await self._post_final(chunk)
        for segment in targets[len(chunks) :]:
            ts = segment.ts
            assert ts is not None
            try:
                await self._retrying(
                    "surplus message removal",
                    functools.partial(
                        self._client.chat_delete, channel=self._thread.channel, ts=ts
                    ),
                )
            except CALL_ERRORS:
                pass  # logged; an outdated piece stays above the final answer

    async def _rewrite(self, segment: _Segment, chunk: str) -> None:
        if segment.shown == chunk:
            return
        ts = segment.ts
        assert ts is not None
        try:
            await self._retrying(
                "final edit",
                functools.partial(
                    self._client.chat_update,
                    channel=self._thread.channel,
                    ts=ts,
                    markdown_text=chunk,
                ),
            )
            segment.shown = chunk
        except CALL_ERRORS:
            # The message cannot be edited (deleted, too old ...): post the text anew.
            await self._post_final(chunk)

    async def _post_final(self, chunk: str) -> None:
        try:
            await self._retrying(
                "final message",
                functools.partial(
                    self._client.chat_postMessage,
                    channel=self._thread.channel,
                    thread_ts=self._thread.thread or None,
                    markdown_text=chunk,
                ),
            )
        except CALL_ERRORS:
            log.error(
                "the final answer of %s could not be posted (%d characters lost)",
                self._thread.key,
                len(chunk),
            )

    async def _retrying(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        return await with_retries(
            operation,
            what=what,
            thread_key=self._thread.key,
            attempts=self._settings.attempts,
            backoff=self._settings.backoff,
        )


def _ts(response: Any) -> str | None:
    value = response.get("ts") if response is not None else None
    return str(value) if value else None

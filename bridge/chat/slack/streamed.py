"""The half of a reply's answer that streams (``chat.startStream`` / ``appendStream`` /
``stopStream``).

A stream only takes appends, and when it rolls over depends on the clock and on what Slack
confirmed, so this half is a sequence of steps rather than a list to match: long answers,
streams near Slack's five-minute end and streams that ended anyway roll over to a new message,
so a long turn keeps its whole text. A first ``chat.startStream`` Slack refuses (no streaming
for this app, or a recipient it will not take) turns the answer into an edited one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.markdown import cut_point, slice_for_display
from bridge.chat.slack.answer import (
    FENCE_ROOM,
    Answer,
    EditedAnswer,
    Segment,
    answer_pieces,
    closing_blocks,
)
from bridge.chat.slack.budget import Deferred
from bridge.chat.slack.client import CALL_ERRORS, api_error, describe, is_transient, retry_after
from bridge.chat.slack.format import SPLIT_LIMIT
from bridge.chat.slack.keeper import TurnKeeper
from bridge.chat.slack.recipients import Recipient
from bridge.chat.slack.tasks import TaskBoard

log = logging.getLogger(__name__)

EXPIRED = "message_not_in_streaming_state"
# A person stopped the stream in Slack: no further appends are accepted.
STOPPED_BY_USER = "stopped_by_user"
# A first chat.startStream failing transiently (429, 5xx) is tried this often in all before
# the answer is edited instead.
START_ATTEMPTS = 3


class StreamedAnswer:
    def __init__(
        self,
        client: AsyncWebClient,
        answer: Answer,
        *,
        recipient: Recipient,
        stream_max_age: float,
        backoff: float,
        tasks: TaskBoard,
        keeper: TurnKeeper,
        edited: EditedAnswer,
        on_user_stop: Callable[[], None] | None,
    ) -> None:
        self._client = client
        self._answer = answer
        self._thread = answer.thread
        self._recipient = recipient
        self._stream_max_age = stream_max_age
        self._backoff = backoff
        self._tasks = tasks
        self._keeper = keeper
        # Where Slack refuses the first stream, the answer is edited instead.
        self._edited = edited
        # Told once when a person stopped the answer's stream in Slack (the adapter stops the
        # turn as theirs); the reply then streams nothing more.
        self._on_user_stop = on_user_stop
        self._start_failures = 0

    def streams_stopped(self, stopped: list[str]) -> None:
        """Slack's stop button was clicked (``agent_session_stopped``): Slack stopped these
        streams. Nothing more is streamed."""
        self._answer.user_stopped = True
        for segment in self._answer.segments:
            if segment.ts in stopped and segment.stream is not None:
                segment.stream = None
                segment.given = segment.sent
                segment.shown = None

    async def _open_stream(self, start: int) -> Segment:
        complete = self._recipient.complete
        stream = await self._client.chat_stream(
            channel=self._thread.channel,
            thread_ts=self._thread.thread,
            # Both or neither: Slack refuses half a pair.
            recipient_user_id=self._recipient.user_id if complete else None,
            recipient_team_id=self._recipient.team_id if complete else None,
            # Our pump already coalesces text once per interval: every append is sent.
            buffer_size=1,
            task_display_mode=self._tasks.mode,
        )
        segment = Segment(start=start, stream=stream, given=start, sent=start)
        self._answer.segments.append(segment)
        return segment

    def _too_old(self, segment: Segment) -> bool:
        age = anyio.current_time() - segment.opened_at
        return segment.stream is not None and age >= self._stream_max_age

    async def flush(self) -> float | None:
        """Stream what is new; the seconds until the next try when the first
        ``chat.startStream`` failed transiently (then it is tried again, a few times, before the
        answer falls back to an edited message)."""
        text = self._answer.text
        segment = self._answer.segments[-1] if self._answer.segments else await self._open_stream(0)
        if self._too_old(segment) and (segment.given < len(text) or self._tasks.dirty):
            # Slack would end this stream soon (also after a long quiet tool phase).
            segment = await self._roll_over(segment, stop=True)
        while segment.given < len(text) or segment.sent < segment.given or self._tasks.dirty:
            if segment.stream is None:
                segment = await self._open_stream(segment.given)
            # A message that would grow past the limit ends at a paragraph or line boundary.
            full = len(text) - segment.start > SPLIT_LIMIT
            end = len(text)
            if full:
                end = max(segment.given, cut_point(text, segment.start, SPLIT_LIMIT - FENCE_ROOM))
            if full and end == segment.given and segment.sent == segment.given:
                segment = await self._roll_over(segment, stop=True)
                continue
            stream = segment.stream
            assert stream is not None
            starting = stream.ts is None
            # Handed to the SDK: a call that fails (or is deferred) keeps the text in the
            # stream's buffer, and the next append (an empty one if need be) sends it.
            piece, segment.given = text[segment.given : end], end
            # The tool calls' tasks the stream lacks ride along.
            chunks, versions = self._tasks.pending()
            try:
                await stream.append(markdown_text=piece, chunks=chunks or None)
            except SlackApiError as exc:
                if api_error(exc) == STOPPED_BY_USER:
                    self._stopped_by_user(segment)
                    return None
                if api_error(exc) == EXPIRED and segment.ts is not None:
                    log.info("stream expired in %s; continuing in a new message", self._thread.key)
                    segment.given = segment.sent  # its buffer ends with it
                    segment = await self._roll_over(segment, stop=False)
                    continue
                if stream.ts is None and not self._answer.segments[:-1]:
                    if is_transient(exc) and self._start_failures < START_ATTEMPTS - 1:
                        # A 429 or a 5xx: Slack can stream, just not this moment.
                        self._start_failures += 1
                        wait = retry_after(exc)
                        if wait is None:
                            wait = self._backoff * 2 ** (self._start_failures - 1)
                        log.info(
                            "starting the stream in %s failed (%s); trying again in %.1f s",
                            self._thread.key,
                            describe(exc),
                            wait,
                        )
                        return wait
                    log.info(
                        "streaming unavailable in %s (%s); editing a message instead",
                        self._thread.key,
                        describe(exc),
                    )
                    self._answer.streaming = False
                    self._answer.segments.clear()
                    await self._edited.flush(answer_pieces(self._answer.text))
                    return None
                raise
            segment.sent = segment.given
            self._tasks.sent(versions)
            segment.ts = stream.ts
            if starting:
                segment.opened_at = anyio.current_time()
                self._keeper.after_post()
            if full and segment.given == end:
                segment = await self._roll_over(segment, stop=True)
        return None

    def _stopped_by_user(self, segment: Segment) -> None:
        """Slack refused an append with ``stopped_by_user``: the person stopped the stream.
        Nothing more is streamed; the final rewrite edits the message; the turn is stopped."""
        segment.stream = None
        segment.given = segment.sent
        segment.shown = None  # what Slack kept of it is not known exactly
        if self._answer.user_stopped:
            return
        self._answer.user_stopped = True
        log.info("the stream of %s was stopped in Slack", self._thread.key)
        # With a session, Slack's stop button sends agent_session_stopped naming who clicked:
        # that decides (the adapter checks them); without one, only the recipient could.
        if self._on_user_stop is not None and not self._keeper.native:
            self._on_user_stop()

    async def _roll_over(self, segment: Segment, *, stop: bool) -> Segment:
        """Continue the answer in a new stream; end ``segment``'s own (stop it, or leave it to
        the final rewrite when that cannot be done now) and show it with its fences closed."""
        following = await self._open_stream(segment.given)
        if stop and segment.stream is not None and segment.stream.ts is not None:
            stopped = await self.stop(segment)
            self._tasks.new_stream()
            if not stopped:
                return following  # still streaming: the final rewrite stops it
        else:
            self._tasks.new_stream()
        segment.stream = None
        content = slice_for_display(self._answer.text, segment.start, segment.given)
        if segment.ts is not None and content != segment.shown:
            try:
                await self._client.chat_update(
                    channel=self._thread.channel, ts=segment.ts, markdown_text=content
                )
                segment.shown = content
            except (*CALL_ERRORS, Deferred) as exc:
                # The final rewrite fixes this message; keep streaming meanwhile.
                log.info("a streamed message in %s not closed yet: %s", self._thread.key, exc)
        return following

    async def stop(
        self,
        segment: Segment,
        *,
        final: bool = False,
        rest: str | None = None,
        feedback: bool = False,
        summary: dict[str, Any] | None = None,
    ) -> bool:
        """Stop ``segment``'s stream; True when it no longer streams (stopped, or expired).

        ``chat.stopStream`` also sets the thread's session (``active`` unless told): a stream
        rolled over keeps it ``processing``; the final stop ends it. The stop carries the tasks
        the stream lacks, and ``rest``: the end of the final text this message should show."""
        stream = segment.stream
        if stream is None or stream.ts is None:
            segment.stream = None
            return True
        native = self._keeper.native
        chunks, versions = self._tasks.pending()
        session_status = ("active" if final else "processing") if native else None
        try:
            await stream.stop(
                markdown_text=rest or None,
                chunks=chunks or None,
                session_status=session_status,
                blocks=closing_blocks(summary, feedback) or None,
            )
        except (*CALL_ERRORS, Deferred) as exc:
            if api_error(exc) not in (EXPIRED, STOPPED_BY_USER):
                log.info("stopping a stream in %s failed: %s", self._thread.key, describe(exc))
                return False
            segment.shown = None  # ended by Slack: what it shows is not known exactly
        else:
            self._tasks.sent(versions)
            segment.shown = self._answer.text[segment.start : segment.given] + (rest or "")
            segment.feedback = feedback
            segment.summary = summary
            session = self._keeper.session
            if native and final and session is not None:
                session.ended_by_stream()
        segment.stream = None
        return True

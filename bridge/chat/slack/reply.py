"""One turn's reply in a Slack thread: a status line, a streamed answer, a final rewrite.

While the agent works the thread shows:
- the *status line* "is working…" (``assistant.threads.setStatus``), set when the turn starts
  and kept up (Slack clears it after two minutes, and whenever the app posts);
- once the turn has run past ``control_delay``, a *control message* with the latest tool lines
  and a Stop button (:mod:`bridge.chat.slack.control`): a short answer needs neither;
- the *answer*, streamed with the SDK's ``chat_stream`` or, where streaming is refused or
  disabled, one message edited about once a second. Long answers, streams near Slack's
  five-minute end and streams that ended anyway roll over to a new message, so a long turn
  keeps its whole text.

At the end the whole final text replaces what streamed (split over as many messages as it
needs); the control message keeps only the tool log (or goes away), and the status is cleared
unless the final post already did. A one-line answer costs two Web API calls: the status and
the post.

Every update while the turn runs is *optional* in the app's rate budget
(:mod:`bridge.chat.slack.budget`): with no token to spare it is skipped and the pump rests
until one is due, and a reply's flushes slow down as the buckets run low. The final answer is
*urgent*: it waits for its tokens and may use the reserve the updates leave alone.

Edited, the reply has the shape of the Matrix one: :func:`answer_pieces` computes the messages
that should exist (no I/O) and ``_flush`` makes Slack match them. Streamed, it cannot: a
stream only takes appends, and when it rolls over depends on the clock and on what Slack
confirmed, so that half stays a sequence of steps; the final rewrite again matches a list
(``split_message`` of the final text).

Network calls happen in the reply's :class:`FlushPump` and its keeper task, both in the
adapter's task group, so ``append`` and ``tool`` never wait for Slack.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.markdown import cut_point, slice_for_display
from bridge.chat.common.outcome import render_outcome
from bridge.chat.common.pump import FlushPump
from bridge.chat.slack.bound import Retries, ThreadCalls
from bridge.chat.slack.budget import Deferred, RateBudget
from bridge.chat.slack.client import CALL_ERRORS, api_error, describe, is_transient, retry_after
from bridge.chat.slack.control import ToolLog
from bridge.chat.slack.events import is_dm_channel
from bridge.chat.slack.feedback import feedback_block
from bridge.chat.slack.format import (
    SPLIT_LIMIT,
    BroadcastGuard,
    neutralise_broadcasts,
    split_message,
)
from bridge.chat.slack.keeper import TurnKeeper
from bridge.chat.slack.recipients import Recipient
from bridge.chat.slack.session import AgentSession
from bridge.chat.slack.summary import summary_block
from bridge.chat.slack.tasks import TaskBoard, TaskDisplay
from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome

log = logging.getLogger(__name__)


EXPIRED = "message_not_in_streaming_state"
# A person stopped the stream in Slack: no further appends are accepted.
STOPPED_BY_USER = "stopped_by_user"
CONFLICT = "streaming_state_conflict"
# Room left in a live piece for a fence line added when it is cut inside a code block.
_FENCE_ROOM = 64
# The first text waits this long (or for this much text) before a message is started.
FIRST_TEXT_DELAY = 0.4
FIRST_TEXT_CHARS = 256
# A first chat.startStream failing transiently (429, 5xx) is tried this often in all before
# the answer is edited instead.
START_ATTEMPTS = 3
# The most of the final text a stream's last stop carries (chat.stopStream: 12,000 at most).
_REST_LIMIT = 11_000


@dataclass(frozen=True)
class ReplySettings:
    streaming: bool = True
    # At most one edit (or stream append) per interval, longer as the rate budget runs low.
    interval: float = 1.0
    attempts: int = 4
    backoff: float = 0.5
    # The Stop control goes up once a turn has run this long (short answers never show it).
    control_delay: float = 2.0
    # Slack clears a status two minutes after it was set: set it again well before.
    status_refresh: float = 90.0
    # Slack ends a stream about five minutes after it started, text flowing or not: continue
    # in a new message before that.
    stream_max_age: float = 240.0
    # Feedback buttons (👍/👎) under each final answer ([slack] feedback).
    feedback: bool = False
    # How a streamed answer shows the agent's tool calls ([slack] task_display): together as
    # its plan, or as cards between the text.
    task_display: TaskDisplay = "plan"


@dataclass(frozen=True)
class Piece:
    """One message of an edited answer: where it starts in the answer, and what it shows."""

    start: int
    content: str


def answer_pieces(text: str) -> list[Piece]:
    """The messages an edited (not streamed) answer should show for ``text``, without I/O.

    A message that would grow past ``SPLIT_LIMIT`` ends at a paragraph or line boundary, and
    each renders on its own (a code fence cut in two is closed and reopened). The answer only
    grows and a cut depends only on the text before it, so a full piece stays as it was.
    """
    pieces: list[Piece] = []
    start = 0
    while len(text) - start > SPLIT_LIMIT:
        cut = cut_point(text, start, SPLIT_LIMIT - _FENCE_ROOM)
        pieces.append(Piece(start, slice_for_display(text, start, cut)))
        start = cut
    pieces.append(Piece(start, slice_for_display(text, start, len(text))))
    return pieces


@dataclass
class _Segment:
    """One message of the answer: the text from ``start`` up to the next segment's start."""

    start: int
    ts: str | None = None
    stream: AsyncChatStream | None = None
    opened_at: float = math.inf  # when its stream started (Slack ends it some minutes later)
    given: int = 0  # streaming: how far the answer text has been handed to the stream
    sent: int = 0  # streaming: how far Slack has confirmed it
    shown: str | None = None  # what the message shows now, when known
    feedback: bool = False  # whether it carries the feedback buttons
    summary: dict[str, Any] | None = None  # the turn's summary block it carries


class SlackLiveReply:
    """A :class:`bridge.core.events.LiveReply` for Slack. :meth:`start` runs its tasks in a
    task group; ``append``/``tool`` feed it; ``finish`` (or :meth:`close`) ends it."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        thread: ThreadRef,
        reply_to: str | None,
        recipient: Recipient,
        settings: ReplySettings,
        budget: RateBudget,
        no_status: set[str] | None = None,
        on_user_stop: Callable[[], None] | None = None,
        session: AgentSession | None = None,
    ) -> None:
        self._client = client
        # Told once when a person stopped the answer's stream in Slack (the adapter stops the
        # turn as theirs); the reply then streams nothing more.
        self._on_user_stop = on_user_stop
        self._user_stopped = False
        self._thread = thread
        self._reply_to = reply_to
        self._recipient = recipient
        self._settings = settings
        self._budget = budget
        # Outside DMs Slack streams only to a known recipient (user and team together).
        self._streaming = settings.streaming and (
            recipient.complete or is_dm_channel(thread.channel)
        )
        self._text = ""
        # The agent's text never pings the whole channel (see bridge.chat.slack.format).
        self._guard = BroadcastGuard()
        self._tools = ToolLog()
        # The same calls as the stream's tasks, where the answer streams.
        self._tasks = TaskBoard(mode=settings.task_display)
        # The calls that must not be lost: the final answer and the clean-up after it.
        self._calls = ThreadCalls(
            client, thread, Retries(attempts=settings.attempts, backoff=settings.backoff)
        )
        # The session, or the status line and the control message, beside the answer.
        self._keeper = TurnKeeper(
            client,
            thread,
            self._tools,
            control_delay=settings.control_delay,
            status_refresh=settings.status_refresh,
            no_status=no_status if no_status is not None else set(),
            session=session,
            streaming=lambda: self._streaming,
            control_posted=self._pump_poke,
        )
        self._segments: list[_Segment] = []
        self._start_failures = 0
        self._finished = False
        self._pump = FlushPump(self._stream_flush, self._interval, name=thread.key)
        self._first_text_at: float | None = None

    @property
    def thread(self) -> ThreadRef:
        return self._thread

    @property
    def native(self) -> bool:
        """Whether Slack shows this turn as a processing agent session (its own stop)."""
        return self._keeper.native

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
        self._text += self._guard.feed(text)
        self._pump.poke()

    async def tool(self, activity: ToolActivity) -> None:
        if self._finished:
            return
        self._tools.record(activity)
        self._tasks.record(activity)
        self._pump.poke()

    async def finish(self, outcome: TurnOutcome) -> None:
        if self._finished:
            return
        self._finished = True
        # Nothing optional runs any more (and no status call lands after the final post).
        await self._pump.stop()
        await self._keeper.stop()
        try:
            self._text += self._guard.flush()
            await self._render_final(
                neutralise_broadcasts(render_outcome(outcome, self._text)),
                final_failed=bool(outcome.error or outcome.interrupted),
                summary=summary_block(outcome),
            )
        finally:
            await self._keeper.finish(self._calls)

    def streams_stopped(self, stopped: list[str]) -> None:
        """Slack's stop button was clicked (``agent_session_stopped``): Slack stopped these
        streams. Nothing more is streamed; whether the turn stops is the adapter's call (the
        clicker must be allowed)."""
        self._user_stopped = True
        for segment in self._segments:
            if segment.ts in stopped and segment.stream is not None:
                segment.stream = None
                segment.given = segment.sent
                segment.shown = None

    async def close(self) -> None:
        """Leaving the reply without an answer (the turn was cancelled): clear what is shown."""
        if not self._finished:
            await self.finish(
                TurnOutcome(error="the turn ended before the agent answered", interrupted=True)
            )

    def posted_elsewhere(self) -> None:
        """Something else of ours was posted in the thread (a notice): Slack took the status
        down, so put it up again."""
        self._keeper.after_post()

    # ----- tasks ------------------------------------------------------------------------------

    def start(self, task_group: TaskGroup) -> None:
        """Run the pump and the keeper (session, status line, control message) beside the
        turn."""
        task_group.start_soon(self._pump.run)
        self._keeper.start(task_group)

    def _pump_poke(self) -> None:
        self._pump.poke()

    # ----- the pump ---------------------------------------------------------------------------

    def _interval(self) -> float:
        # Paced by what carries the answer; tool-line edits just wait for spare chat.update.
        method = "chat.appendStream" if self._streaming else "chat.update"
        return self._budget.interval(self._settings.interval, [(method, None)])

    def _first_delay(self) -> float:
        return min(self._settings.interval, FIRST_TEXT_DELAY)

    def _hold_first_text(self) -> bool:
        """Hold the answer's first message back a moment: a short answer that finishes
        meanwhile is posted once (one call) instead of as a stream started, stopped and
        rewritten. Slack shows nothing of a stream before 256 characters anyway."""
        if self._segments or len(self._text) >= FIRST_TEXT_CHARS or self._first_text_at is None:
            return False
        return anyio.current_time() - self._first_text_at < self._first_delay()

    async def _stream_flush(self) -> float | None:
        """Show what is new (optional calls only). The seconds until the next flush when it
        should come without a poke: the first text held back, or the budget empty."""
        with RateBudget.optional():
            try:
                return await self._flush_now()
            except Deferred as deferred:
                return deferred.wait

    async def _flush_now(self) -> float | None:
        try:
            await self._keeper.update()
        except Deferred:
            pass  # no chat.update to spare now: the tool lines wait, the answer does not
        except CALL_ERRORS as exc:
            # Tool lines are a nicety: try again next time, and carry on with the answer.
            log.info("tool lines not updated in %s: %s", self._thread.key, describe(exc))
        if self._user_stopped:
            return None
        if self._streaming and self._tasks.dirty:
            # Tool progress goes into the stream at once (and may start it).
            return await self._flush_stream()
        if not self._text.strip():
            return None
        if self._hold_first_text():
            return self._first_delay()
        if self._streaming:
            return await self._flush_stream()
        await self._flush(answer_pieces(self._text))
        return None

    # ----- the answer, edited -----------------------------------------------------------------

    async def _flush(self, desired: list[Piece]) -> None:
        """Make the answer's messages show ``desired`` (:func:`answer_pieces`), in order: edit
        what changed, post what is missing. A full piece no longer changes, so it costs no call
        once shown; a call that fails or is deferred ends the round, and the next one resumes
        there."""
        for index, piece in enumerate(desired):
            if index == len(self._segments):
                self._segments.append(
                    _Segment(start=piece.start, given=piece.start, sent=piece.start)
                )
            await self._show(self._segments[index], piece.content)

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
            self._keeper.after_post()
        else:
            await self._client.chat_update(
                channel=self._thread.channel, ts=segment.ts, markdown_text=content
            )
        segment.shown = content

    # ----- the answer, streamed ---------------------------------------------------------------

    async def _open_stream(self, start: int) -> _Segment:
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
        segment = _Segment(start=start, stream=stream, given=start, sent=start)
        self._segments.append(segment)
        return segment

    def _too_old(self, segment: _Segment) -> bool:
        age = anyio.current_time() - segment.opened_at
        return segment.stream is not None and age >= self._settings.stream_max_age

    async def _flush_stream(self) -> float | None:
        """Stream what is new; the seconds until the next try when the first
        ``chat.startStream`` failed transiently (then it is tried again, a few times, before the
        answer falls back to an edited message)."""
        text = self._text
        segment = self._segments[-1] if self._segments else await self._open_stream(0)
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
                end = max(segment.given, cut_point(text, segment.start, SPLIT_LIMIT - _FENCE_ROOM))
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
                if stream.ts is None and not self._segments[:-1]:
                    if is_transient(exc) and self._start_failures < START_ATTEMPTS - 1:
                        # A 429 or a 5xx: Slack can stream, just not this moment.
                        self._start_failures += 1
                        wait = retry_after(exc)
                        if wait is None:
                            wait = self._settings.backoff * 2 ** (self._start_failures - 1)
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
                    self._streaming = False
                    self._segments.clear()
                    await self._flush(answer_pieces(self._text))
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

    def _stopped_by_user(self, segment: _Segment) -> None:
        """Slack refused an append with ``stopped_by_user``: the person stopped the stream.
        Nothing more is streamed; the final rewrite edits the message; the turn is stopped."""
        segment.stream = None
        segment.given = segment.sent
        segment.shown = None  # what Slack kept of it is not known exactly
        if self._user_stopped:
            return
        self._user_stopped = True
        log.info("the stream of %s was stopped in Slack", self._thread.key)
        # With a session, Slack's stop button sends agent_session_stopped naming who clicked:
        # that decides (the adapter checks them); without one, only the recipient could.
        if self._on_user_stop is not None and not self.native:
            self._on_user_stop()

    async def _roll_over(self, segment: _Segment, *, stop: bool) -> _Segment:
        """Continue the answer in a new stream; end ``segment``'s own (stop it, or leave it to
        the final rewrite when that cannot be done now) and show it with its fences closed."""
        following = await self._open_stream(segment.given)
        if stop and segment.stream is not None and segment.stream.ts is not None:
            stopped = await self._stop_stream(segment)
            self._tasks.new_stream()
            if not stopped:
                return following  # still streaming: the final rewrite stops it
        else:
            self._tasks.new_stream()
        segment.stream = None
        content = slice_for_display(self._text, segment.start, segment.given)
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

    async def _stop_stream(
        self,
        segment: _Segment,
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
        native = self.native
        chunks, versions = self._tasks.pending()
        session_status = ("active" if final else "processing") if native else None
        try:
            await stream.stop(
                markdown_text=rest or None,
                chunks=chunks or None,
                session_status=session_status,
                blocks=_closing_blocks(summary, feedback) or None,
            )
        except (*CALL_ERRORS, Deferred) as exc:
            if api_error(exc) not in (EXPIRED, STOPPED_BY_USER):
                log.info("stopping a stream in %s failed: %s", self._thread.key, describe(exc))
                return False
            segment.shown = None  # ended by Slack: what it shows is not known exactly
        else:
            self._tasks.sent(versions)
            segment.shown = self._text[segment.start : segment.given] + (rest or "")
            segment.feedback = feedback
            segment.summary = summary
            session = self._keeper.session
            if native and final and session is not None:
                session.ended_by_stream()
        segment.stream = None
        return True

    # ----- the final rewrite ------------------------------------------------------------------

    async def _render_final(
        self, final: str, *, final_failed: bool = False, summary: dict[str, Any] | None = None
    ) -> None:
        """The whole final text over the answer's messages: rewrite, add or delete messages;
        the last one carries the turn's ``summary`` (and the feedback buttons)."""
        chunks = split_message(final)
        last = len(chunks) - 1
        # Feedback buttons under the last message of an answer (not under an error).
        feedback = self._settings.feedback and not final_failed and bool(final.strip())
        self._tasks.end(failed=final_failed)
        for segment in self._segments:
            if segment.stream is not None:
                rest = self._rest_of(segment, chunks)
                closing = rest is not None and self._index_of(segment) == last
                await self._stop_stream(
                    segment,
                    final=True,
                    rest=rest,
                    feedback=feedback and closing,
                    summary=summary if closing else None,
                )
        targets = [segment for segment in self._segments if segment.ts is not None]
        for index, chunk in enumerate(chunks):
            buttons = feedback and index == last
            below = summary if index == last else None
            if index < len(targets):
                await self._rewrite(targets[index], chunk, feedback=buttons, summary=below)
            else:
                await self._post_final(chunk, feedback=buttons, summary=below)
        for segment in targets[len(chunks) :]:
            await self._delete(segment)

    def _index_of(self, segment: _Segment) -> int:
        """Which message of the answer ``segment`` is (among those posted)."""
        return [s for s in self._segments if s.ts is not None].index(segment)

    def _rest_of(self, segment: _Segment, chunks: list[str]) -> str | None:
        """When the last message streams the start of its final chunk, the rest of it: the
        final stop then carries it, and no edit is needed (an edit would drop the stream's
        tasks)."""
        if segment is not self._segments[-1] or segment.ts is None:
            return None
        index = self._index_of(segment)
        if index >= len(chunks):
            return None
        streamed = self._text[segment.start : segment.given]
        chunk = chunks[index]
        if not chunk.startswith(streamed) or len(chunk) - len(streamed) > _REST_LIMIT:
            return None
        return chunk[len(streamed) :]

    async def _rewrite(
        self,
        segment: _Segment,
        chunk: str,
        *,
        feedback: bool = False,
        summary: dict[str, Any] | None = None,
    ) -> None:
        if (
            segment.shown == chunk
            and segment.stream is None
            and segment.feedback == feedback
            and segment.summary == summary
        ):
            return
        ts = segment.ts
        assert ts is not None
        fields = _final_fields(chunk, feedback, summary)
        for attempt in range(2):
            try:
                await self._calls.edit("final edit", ts, **fields)
                segment.shown, segment.feedback, segment.summary = chunk, feedback, summary
                return
            except CALL_ERRORS as exc:
                # Still streaming (its stop failed earlier): stop it, then edit once more.
                if attempt == 0 and api_error(exc) == CONFLICT and segment.stream is not None:
                    await self._stop_stream(segment, final=True)
                    continue
                break
        # The message cannot be edited (deleted, too old, stuck streaming): post the text anew
        # and take the old one away, so no partial copy stays above the answer.
        await self._post_final(chunk, feedback=feedback, summary=summary)
        await self._delete(segment)

    async def _delete(self, segment: _Segment) -> None:
        ts = segment.ts
        assert ts is not None
        try:
            await self._calls.delete("surplus message removal", ts)
        except CALL_ERRORS:
            pass  # logged; an outdated piece stays above the final answer

    async def _post_final(
        self, chunk: str, *, feedback: bool = False, summary: dict[str, Any] | None = None
    ) -> None:
        try:
            await self._calls.say("final message", **_final_fields(chunk, feedback, summary))
            self._keeper.cleared_by_post()
        except CALL_ERRORS:
            log.error(
                "the final answer of %s could not be posted (%d characters lost)",
                self._thread.key,
                len(chunk),
            )


def _final_fields(
    chunk: str, feedback: bool, summary: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A final message's fields: its Markdown, in a block beside the summary and the feedback
    buttons where it carries them (``markdown_text`` takes no blocks beside it)."""
    if feedback or summary is not None:
        blocks = [{"type": "markdown", "text": chunk}, *_closing_blocks(summary, feedback)]
        return {"text": chunk, "blocks": blocks}
    return {"markdown_text": chunk}


def _closing_blocks(summary: dict[str, Any] | None, feedback: bool) -> list[dict[str, Any]]:
    """What closes an answer: the turn's summary, then the feedback buttons."""
    return [*([summary] if summary is not None else []), *([feedback_block()] if feedback else [])]


def _ts(response: Any) -> str | None:
    value = response.get("ts") if response is not None else None
    return str(value) if value else None

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

The reply holds the pump and the turn's state; its halves are modules of their own: the answer
edited (:mod:`~bridge.chat.slack.answer`), streamed (:mod:`~bridge.chat.slack.streamed`) and
rewritten at the end (:mod:`~bridge.chat.slack.final`); the session, status line and control
message beside it (:mod:`~bridge.chat.slack.keeper`).

Network calls happen in the reply's :class:`FlushPump` and its keeper task, both in the
adapter's task group, so ``append`` and ``tool`` never wait for Slack.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.outcome import render_outcome
from bridge.chat.common.pump import FlushPump
from bridge.chat.slack.answer import Answer, EditedAnswer, Piece, answer_pieces
from bridge.chat.slack.bound import Retries, RetryObserver, ThreadCalls, no_observer
from bridge.chat.slack.budget import Deferred, RateBudget
from bridge.chat.slack.client import CALL_ERRORS, describe
from bridge.chat.slack.control import ToolLog
from bridge.chat.slack.events import is_dm_channel
from bridge.chat.slack.final import FinalRewrite
from bridge.chat.slack.format import BroadcastGuard, neutralise_broadcasts
from bridge.chat.slack.keeper import TurnKeeper
from bridge.chat.slack.recipients import Recipient
from bridge.chat.slack.session import AgentSession
from bridge.chat.slack.streamed import StreamedAnswer
from bridge.chat.slack.summary import summary_block
from bridge.chat.slack.tasks import TaskBoard, TaskDisplay
from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome

__all__ = ["Piece", "Recipient", "ReplySettings", "SlackLiveReply", "answer_pieces"]

log = logging.getLogger(__name__)

# The first text waits this long (or for this much text) before a message is started.
FIRST_TEXT_DELAY = 0.4
FIRST_TEXT_CHARS = 256


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
    # Who counts the final answer's retries (the adapter's metrics observer, asked at each call).
    retry_observer: Callable[[], RetryObserver | None] = no_observer


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
        self._settings = settings
        self._budget = budget
        # Outside DMs Slack streams only to a known recipient (user and team together).
        self._answer = Answer(
            thread,
            streaming=settings.streaming and (recipient.complete or is_dm_channel(thread.channel)),
        )
        # The agent's text never pings the whole channel (see bridge.chat.slack.format).
        self._guard = BroadcastGuard()
        self._tools = ToolLog()
        # The same calls as the stream's tasks, where the answer streams.
        self._tasks = TaskBoard(mode=settings.task_display)
        # The calls that must not be lost: the final answer and the clean-up after it.
        self._calls = ThreadCalls(
            client,
            thread,
            Retries(
                attempts=settings.attempts,
                backoff=settings.backoff,
                observer=settings.retry_observer,
            ),
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
            streaming=self._answer.streams,
            control_posted=self._pump_poke,
        )
        self._edited = EditedAnswer(client, self._answer, self._keeper)
        self._streamed = StreamedAnswer(
            client,
            self._answer,
            recipient=recipient,
            stream_max_age=settings.stream_max_age,
            backoff=settings.backoff,
            tasks=self._tasks,
            keeper=self._keeper,
            edited=self._edited,
            on_user_stop=on_user_stop,
        )
        self._final = FinalRewrite(
            self._answer,
            calls=self._calls,
            tasks=self._tasks,
            keeper=self._keeper,
            streamed=self._streamed,
            feedback=settings.feedback,
        )
        self._finished = False
        self._pump = FlushPump(self._stream_flush, self._interval, name=thread.key)
        self._first_text_at: float | None = None

    @property
    def thread(self) -> ThreadRef:
        return self._answer.thread

    @property
    def native(self) -> bool:
        """Whether Slack shows this turn as a processing agent session (its own stop)."""
        return self._keeper.native

    @property
    def streaming(self) -> bool:
        """Whether the answer is (still) streamed rather than edited."""
        return self._answer.streaming

    # ----- the LiveReply protocol -------------------------------------------------------------

    async def append(self, text: str) -> None:
        if self._finished or not text:
            return
        if self._first_text_at is None:
            self._first_text_at = anyio.current_time()
        self._answer.text += self._guard.feed(text)
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
            self._answer.text += self._guard.flush()
            await self._final.render(
                neutralise_broadcasts(render_outcome(outcome, self._answer.text)),
                final_failed=bool(outcome.error or outcome.interrupted),
                summary=summary_block(outcome),
            )
        finally:
            await self._keeper.finish(self._calls)

    def streams_stopped(self, stopped: list[str]) -> None:
        """Slack's stop button was clicked (``agent_session_stopped``): Slack stopped these
        streams. Nothing more is streamed; whether the turn stops is the adapter's call (the
        clicker must be allowed)."""
        self._streamed.streams_stopped(stopped)

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
        method = "chat.appendStream" if self._answer.streaming else "chat.update"
        return self._budget.interval(self._settings.interval, [(method, None)])

    def _first_delay(self) -> float:
        return min(self._settings.interval, FIRST_TEXT_DELAY)

    def _hold_first_text(self) -> bool:
        """Hold the answer's first message back a moment: a short answer that finishes
        meanwhile is posted once (one call) instead of as a stream started, stopped and
        rewritten. Slack shows nothing of a stream before 256 characters anyway."""
        answer = self._answer
        if answer.segments or len(answer.text) >= FIRST_TEXT_CHARS or self._first_text_at is None:
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
            log.info("tool lines not updated in %s: %s", self.thread.key, describe(exc))
        answer = self._answer
        if answer.user_stopped:
            return None
        if answer.streaming and self._tasks.dirty:
            # Tool progress goes into the stream at once (and may start it).
            return await self._streamed.flush()
        if not answer.text.strip():
            return None
        if self._hold_first_text():
            return self._first_delay()
        if answer.streaming:
            return await self._streamed.flush()
        await self._edited.flush(answer_pieces(answer.text))
        return None

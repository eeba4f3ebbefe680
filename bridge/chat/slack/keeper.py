"""What shows, beside a turn's answer, that the agent works: the thread's agent session
(Slack's own indicator and stop button), else the status line ("is working…") and, once the
turn has run a moment, the control message (its Stop button, and the tool lines where the
answer does not stream them as tasks).

The :class:`TurnKeeper` runs as one task beside the reply's pump: it starts the session (an
optional call: with no token to spare the status line shows meanwhile and the session is tried
again once the turn has run a while, and a turn that ends first goes without one), keeps the
status line up (Slack clears it after two minutes and whenever the app posts) and posts the
control message when it is due. At the end it closes the control message, moves the session
off ``processing`` (unless the answer's last ``chat.stopStream`` did) and takes the status
down.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.bound import ThreadCalls
from bridge.chat.slack.budget import Deferred, RateBudget
from bridge.chat.slack.client import CALL_ERRORS, describe
from bridge.chat.slack.control import ControlMessage, ToolLog
from bridge.chat.slack.session import AgentSession
from bridge.chat.slack.status import StatusLine
from bridge.core.events import ThreadRef

log = logging.getLogger(__name__)


class TurnKeeper:
    def __init__(
        self,
        client: AsyncWebClient,
        thread: ThreadRef,
        tools: ToolLog,
        *,
        control_delay: float,
        status_refresh: float,
        no_status: set[str],
        session: AgentSession | None,
        streaming: Callable[[], bool],
        control_posted: Callable[[], None],
    ) -> None:
        self._thread = thread
        # The thread's agent session: while Slack shows it (``processing``), its stop button
        # and indicator replace the status line and the control message.
        self._session = session
        # Starting the session is optional in the rate budget (Tier 3, two calls a turn): with
        # no token to spare the turn shows the status line meanwhile and tries again later,
        # and a turn that ends first goes without a session (one call less).
        self._session_tried = session is None
        self._session_due = -math.inf
        # Whether the answer (still) streams: then its stream carries the tool calls.
        self._streaming = streaming
        # Told when the control message went up (tool lines may have come meanwhile).
        self._control_posted = control_posted
        self._status_refresh = status_refresh
        # The control message: tool lines where the stream does not carry them as tasks, and
        # the Stop button where Slack shows none of its own.
        self._control = ControlMessage(
            client,
            thread,
            tools,
            show_tools=lambda: not self._streaming(),
            with_stop=lambda: not self.native,
        )
        self._status = StatusLine(client, thread, no_status)
        now = anyio.current_time()
        self._status_due = now
        self._control_due = now + control_delay
        # From when on the turn counts as long (its Stop control would go up).
        self._long_turn = now + control_delay
        self._keeper_wake = anyio.Event()
        self._keeper_stopping = False
        self._keeper_started = False
        self._keeper_done = anyio.Event()

    @property
    def native(self) -> bool:
        """Whether Slack shows this turn as a processing agent session (its own stop)."""
        return self._session is not None and self._session.on

    @property
    def session(self) -> AgentSession | None:
        return self._session

    def start(self, task_group: TaskGroup) -> None:
        self._keeper_started = True
        task_group.start_soon(self._keep)

    async def update(self) -> None:
        """Show the latest tool lines in the control message (an optional call)."""
        await self._control.update()

    def after_post(self) -> None:
        """We posted in the thread: Slack took the status down, so put it up again."""
        if self.native:
            return  # no status line to put back
        self._status.cleared_by_post()
        self._status_due = anyio.current_time()
        self._keeper_wake.set()

    def cleared_by_post(self) -> None:
        """The final answer was posted: Slack took the status down (no call needed)."""
        self._status.cleared_by_post()

    async def stop(self) -> None:
        """No call of the keeper's after this one (before the final answer goes up)."""
        self._keeper_stopping = True
        self._keeper_wake.set()
        if self._keeper_started:
            await self._keeper_done.wait()

    async def finish(self, calls: ThreadCalls) -> None:
        """After the final answer: close the control message, end the session, clear the
        status."""
        try:
            await self._control.finish(calls)
        except CALL_ERRORS:
            pass  # logged with the thread key by with_retries
        await self._end_session()
        await self._status.clear()

    async def _end_session(self) -> None:
        """Move the session off ``processing`` (Slack never does): ``active``, unless the
        answer's ``chat.stopStream`` already did."""
        if self._session is None or not self._session.on:
            return
        with anyio.move_on_after(10.0):
            await self._session.set("active")

    async def _keep(self) -> None:
        """Keep the status up and post the control message once the turn has run a moment."""
        try:
            while not self._keeper_stopping:
                try:
                    await self._keep_once()
                except Exception:
                    # A task of the adapter's group: never let it take the adapter down.
                    log.exception("status or Stop control of %s failed", self._thread.key)
                    self._status_due = self._control_due = math.inf
                    self._session_tried = True
                due = min(self._status_due, self._control_due)
                if not self._session_tried:
                    due = min(due, self._session_due)
                with anyio.move_on_after(max(due - anyio.current_time(), 0.0)):
                    await self._keeper_wake.wait()
                self._keeper_wake = anyio.Event()
        finally:
            self._keeper_done.set()

    async def _keep_once(self) -> None:
        if not self._session_tried and anyio.current_time() >= self._session_due:
            assert self._session is not None
            try:
                with RateBudget.optional():
                    started = await self._session.set("processing")
            except Deferred as deferred:
                # Not before the turn has run a while: a short answer then costs the status
                # and the post (a session started late would add two calls to it).
                self._session_due = max(anyio.current_time() + deferred.wait, self._long_turn)
                started = False
            else:
                self._session_tried = True
            if started:
                # Slack shows the turn with its own indicator and stop button; tool lines
                # need a message of ours only where the answer cannot stream its tasks.
                self._status_due = math.inf
                if self._streaming():
                    self._control_due = math.inf
                return
        now = anyio.current_time()
        if now >= self._status_due:
            retry = await self._status.show()
            if retry is not None:
                self._status_due = now + retry
            elif self._status.wanted:
                self._status_due = now + self._status_refresh
            else:
                self._status_due = math.inf
        if self._keeper_stopping:
            return
        if self._control.ts is None and now >= self._control_due:
            await self._post_control(now)

    async def _post_control(self, now: float) -> None:
        try:
            with RateBudget.optional():
                await self._control.post()
        except Deferred as deferred:
            self._control_due = now + deferred.wait
            return
        except CALL_ERRORS as exc:
            log.info("no Stop control in %s: %s", self._thread.key, describe(exc))
            self._control_due = math.inf
            return
        self._control_due = math.inf
        self.after_post()
        self._control_posted()

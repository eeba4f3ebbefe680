"""One turn's live reply: a message edited (``m.replace``) as the answer streams.

Edits are coalesced: a background pump sends at most one round of edits per ``edit_interval``
and at most ``max_edits`` edits per message, after which the message waits for the final
edit. Text beyond one message's share continues in a new message (the earlier ones stay put:
:func:`split_markdown` never moves a full piece). A typing notice is kept up until the end.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome
from bridge.core.outcome import code_span, render_outcome

from .format import Limits, Renderer, plain_excerpt, with_relation

log = logging.getLogger(__name__)

_TOOL_MARKS = {"ACTIVE": "⏳", "DONE": "✅", "ERROR": "❌"}
# Tool lines share the live message with the answer: keep room for them.
_TOOL_RESERVE = 1_200


class SendFailed(Exception):
    """A message could not be sent; the text is safe to log."""


class Outbox(Protocol):
    """What a live reply needs from the adapter (the Matrix calls, per room, rate-limited)."""

    async def send(self, room_id: str, content: dict[str, Any]) -> str:
        """Send an ``m.room.message``; return its event id. Raise :class:`SendFailed`."""

    async def edit(self, room_id: str, event_id: str, new_content: dict[str, Any]) -> None:
        """Replace the content of ``event_id``. Raise :class:`SendFailed`."""

    async def redact(self, room_id: str, event_id: str) -> None:
        """Remove an event (best effort)."""

    async def typing(self, room_id: str, busy: bool, timeout_ms: int) -> None:
        """Show or clear the typing notice (best effort)."""


@dataclass(frozen=True)
class ReplyTuning:
    edit_interval: float = 1.0
    max_edits: int = 60
    typing_timeout_ms: int = 30_000
    typing_refresh: float = 20.0
    # A reply that is never finished stops typing after this long.
    max_tool_lines: int = 5
    limits: Limits = field(default_factory=Limits)


@dataclass
class _Sent:
    event_id: str
    content: dict[str, Any]
    edits: int = 0


def tool_line(activity: ToolActivity) -> str:
    mark = _TOOL_MARKS.get(activity.state.upper(), "•")
    line = f"🔧 {code_span(plain_excerpt(activity.name, 60))}"
    if activity.summary.strip():
        line += f" {code_span(plain_excerpt(activity.summary, 120))}"
    line += f" {mark}"
    if activity.error:
        line += f" {plain_excerpt(activity.error, 160)}"
    return line


class MatrixLiveReply:
    """Implements :class:`bridge.core.events.LiveReply` for one turn in one room or thread."""

    def __init__(
        self,
        outbox: Outbox,
        renderer: Renderer,
        thread: ThreadRef,
        reply_to: str | None,
        *,
        tuning: ReplyTuning | None = None,
        on_sent: Callable[[str], None] | None = None,
    ) -> None:
        self._outbox = outbox
        self._renderer = renderer
        self._thread = thread
        self._reply_to = reply_to
        self._tuning = tuning or ReplyTuning()
        self._on_sent = on_sent
        self._answer = ""
        self._tools: list[tuple[str, str, str]] = []  # (name, summary, line)
        self._hidden_tools = 0
        self._messages: list[_Sent] = []
        self._dirty = anyio.Event()
        self._flush_lock = anyio.Lock()
        self._scope = anyio.CancelScope()
        self._last_flush = -math.inf
        self._closed = False

    @property
    def room_id(self) -> str:
        return self._thread.channel

    @property
    def event_ids(self) -> list[str]:
        return [m.event_id for m in self._messages]

    async def start(self, task_group: TaskGroup) -> None:
        await self._outbox.typing(self.room_id, True, self._tuning.typing_timeout_ms)
        task_group.start_soon(self._background)

    async def append(self, text: str) -> None:
        if self._closed or not text:
            return
        self._answer += text
        self._dirty.set()

    async def tool(self, activity: ToolActivity) -> None:
        if self._closed:
            return
        key = (activity.name, activity.summary)
        line = tool_line(activity)
        last = self._tools[-1] if self._tools else None
        if last is not None and (last[0], last[1]) == key:
            # The same call changing state (ACTIVE -> DONE) updates its line.
            self._tools[-1] = (*key, line)
        else:
            self._tools.append((*key, line))
        overflow = len(self._tools) - self._tuning.max_tool_lines
        if overflow > 0:
            self._hidden_tools += overflow
            del self._tools[:overflow]
        self._dirty.set()

    async def finish(self, outcome: TurnOutcome) -> None:
        if self._closed:
            return
        self._closed = True
        final = render_outcome(outcome, self._answer)
        try:
            # Wait for an edit in flight, then stop the pump and the typing refresh.
            async with self._flush_lock:
                self._scope.cancel()
                await self._flush(self._pieces(final, tools=False), final=True)
        except SendFailed as exc:
            log.warning("the final reply in %s could not be sent: %s", self.room_id, exc)
        finally:
            await self._outbox.typing(self.room_id, False, 0)

    async def close(self) -> None:
        """Leaving the reply without an answer (the turn was cancelled): stop typing."""
        if not self._closed:
            await self.finish(
                TurnOutcome(error="the turn ended before the agent answered", interrupted=True)
            )

    # -- internals ------------------------------------------------------------------------

    async def _background(self) -> None:
        with self._scope:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._pump)
                tasks.start_soon(self._keep_typing)

    async def _keep_typing(self) -> None:
        # Until finish() cancels the scope: the reply is open only while its turn runs.
        tuning = self._tuning
        while True:
            await anyio.sleep(tuning.typing_refresh)
            await self._outbox.typing(self.room_id, True, tuning.typing_timeout_ms)

    async def _pump(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            delay = self._last_flush + self._tuning.edit_interval - anyio.current_time()
            if delay > 0:
                await anyio.sleep(delay)
            async with self._flush_lock:
                if self._closed:
                    return
                try:
                    await self._flush(self._pieces(self._answer, tools=True), final=False)
                except SendFailed as exc:
                    log.warning("a streamed edit in %s failed: %s", self.room_id, exc)
            self._last_flush = anyio.current_time()

    def _tool_block(self) -> str:
        lines = [line for _, _, line in self._tools]
        if self._hidden_tools:
            lines.insert(0, f"… {self._hidden_tools} earlier")
        return "\n".join(lines)

    def _pieces(self, answer: str, *, tools: bool) -> list[dict[str, Any]]:
        """The content of every message this reply should show now."""
        limits = self._tuning.limits
        # The same share with or without tool lines, so that the final split of the answer
        # is the one that streamed and full messages keep their place.
        reserve = min(_TOOL_RESERVE, limits.text_bytes // 4)
        limits = Limits(limits.text_bytes - reserve, limits.content_bytes)
        pieces = self._renderer.pieces(answer, limits) if answer.strip() else []
        block = self._tool_block() if tools else ""
        if block:
            last = pieces.pop()["body"] + "\n\n" if pieces else ""
            pieces.append(self._renderer.content(last + block))
        return pieces

    async def _flush(self, desired: list[dict[str, Any]], *, final: bool) -> None:
        tuning = self._tuning
        for index, content in enumerate(desired):
            if index < len(self._messages):
                sent = self._messages[index]
                if sent.content == content:
                    continue
                # A full (sealed) piece changes once more when the next message starts.
                sealed = index < len(desired) - 1
                if not final and not sealed and sent.edits >= tuning.max_edits:
                    continue
                await self._outbox.edit(self.room_id, sent.event_id, content)
                sent.content = content
                sent.edits += 1
            else:
                event_id = await self._outbox.send(self.room_id, self._new_message(content, index))
                self._messages.append(_Sent(event_id, content))
                if self._on_sent is not None:
                    self._on_sent(event_id)
        if final:
            # The final answer may be shorter than what streamed.
            for sent in self._messages[len(desired) :]:
                await self._outbox.redact(self.room_id, sent.event_id)
            del self._messages[len(desired) :]

    def _new_message(self, content: dict[str, Any], index: int) -> dict[str, Any]:
        return with_relation(
            dict(content),
            thread_root=self._thread.thread,
            reply_to=self._reply_to if index == 0 else None,
        )

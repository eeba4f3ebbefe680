"""One turn's live reply: a message edited (``m.replace``) as the answer streams.

Edits are coalesced by a :class:`FlushPump`: at most one round of edits per interval, and the
interval grows when the account is rate-limited and several replies stream at once (the
account's :class:`AccountPacer`); at most ``max_edits`` edits per message, after which the
message waits for the final edit. Text beyond one message's share continues in a new message
(the earlier ones stay put: the splitter never moves a full piece). Pieces are measured as they
are sent (encrypted where the room is). The final state is sent with priority and patience;
if it still cannot be sent, the room is told once the homeserver allows it. A typing notice is
kept up while the reply is open.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from bridge.chat.common.outcome import code_span, render_outcome
from bridge.chat.common.pump import FlushPump
from bridge.core.events import ThreadRef, ToolActivity, TurnOutcome

from .format import Limits, Renderer, plain_excerpt, with_mentions, with_relation
from .pacing import AccountPacer, Priority

log = logging.getLogger(__name__)

_TOOL_MARKS = {"ACTIVE": "⏳", "DONE": "✅", "ERROR": "❌"}
# Tool lines share the live message with the answer: keep room for them.
_TOOL_RESERVE = 1_500
LOST_ANSWER_NOTICE = (
    "⚠️ The end of this answer could not be sent: the homeserver kept refusing messages "
    "(rate limit). Ask again, or ask for the rest."
)


class SendFailed(Exception):
    """A message could not be sent; the text is safe to log."""


class RateLimited(SendFailed):
    """The homeserver refused the send with a rate limit (429) after the tries it was given."""


class Outbox(Protocol):
    """What a live reply needs from the adapter (the Matrix calls, per room, rate-limited)."""

    def encrypts(self, room_id: str) -> bool:
        """Whether events sent to the room are encrypted (they are measured as such)."""

    async def send(
        self, room_id: str, content: dict[str, Any], priority: Priority = Priority.ORDINARY
    ) -> str:
        """Send an ``m.room.message``; return its event id. Raise :class:`SendFailed`."""

    async def edit(
        self,
        room_id: str,
        event_id: str,
        new_content: dict[str, Any],
        priority: Priority = Priority.ORDINARY,
    ) -> None:
        """Replace the content of ``event_id``. Raise :class:`SendFailed`."""

    async def redact(
        self, room_id: str, event_id: str, priority: Priority = Priority.ORDINARY
    ) -> None:
        """Remove an event (best effort)."""

    async def typing(self, room_id: str, busy: bool, timeout_ms: int) -> None:
        """Show or clear the typing notice (best effort)."""

    async def notice(self, room_id: str, text: str, thread_root: str = "") -> None:
        """A short bridge notice (best effort, patient)."""


@dataclass(frozen=True)
class ReplyTuning:
    edit_interval: float = 1.0
    max_edits: int = 60
    typing_timeout_ms: int = 30_000
    typing_refresh: float = 20.0
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
    """Implements :class:`bridge.core.events.LiveReply` for one turn in one room or thread.

    ``thread_root`` is the Matrix thread the pieces go to: the conversation's thread, or with
    ``threads = false`` the Element thread the message came from. ``mention`` is whom the
    first piece notifies (the author of the message it answers).
    """

    def __init__(
        self,
        outbox: Outbox,
        renderer: Renderer,
        thread: ThreadRef,
        reply_to: str | None,
        *,
        thread_root: str | None = None,
        mention: Sequence[str] = (),
        pacer: AccountPacer | None = None,
        tuning: ReplyTuning | None = None,
        on_sent: Callable[[str], None] | None = None,
    ) -> None:
        self._outbox = outbox
        self._renderer = renderer
        self._thread = thread
        self._reply_to = reply_to
        self._thread_root = thread.thread if thread_root is None else thread_root
        self._mention = list(mention)
        self._tuning = tuning or ReplyTuning()
        self._pacer = pacer or AccountPacer()
        self._on_sent = on_sent
        self._encrypted = outbox.encrypts(thread.channel)
        self._answer = ""
        self._tools: list[tuple[str, str, str]] = []  # (name, summary, line)
        self._hidden_tools = 0
        self._messages: list[_Sent] = []
        self._flush_lock = anyio.Lock()
        self._pump = FlushPump(self._stream_flush, self._pacer.edit_interval, name=thread.key)
        self._scope = anyio.CancelScope()
        self._closed = False
        self._task_group: TaskGroup | None = None

    @property
    def room_id(self) -> str:
        return self._thread.channel

    async def start(self, task_group: TaskGroup) -> None:
        self._task_group = task_group
        await self._outbox.typing(self.room_id, True, self._tuning.typing_timeout_ms)
        task_group.start_soon(self._background)

    async def append(self, text: str) -> None:
        if self._closed or not text:
            return
        self._answer += text
        self._pump.poke()

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
        self._pump.poke()

    async def finish(self, outcome: TurnOutcome) -> None:
        if self._closed:
            return
        self._closed = True
        final = render_outcome(outcome, self._answer)
        try:
            # Let an edit in flight end, then stop the pump and the typing refresh.
            await self._pump.stop()
            self._scope.cancel()
            with self._pacer.final():
                async with self._flush_lock:
                    await self._flush(self._pieces(final, tools=False), Priority.FINAL)
        except SendFailed as exc:
            log.warning("the final reply in %s could not be sent: %s", self.room_id, exc)
            # Said once the homeserver lets a message through again (the notice is patient).
            if self._task_group is not None:
                self._task_group.start_soon(
                    self._outbox.notice, self.room_id, LOST_ANSWER_NOTICE, self._thread_root
                )
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
        with self._scope, self._pacer.stream():
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._pump.run)
                tasks.start_soon(self._keep_typing)

    async def _keep_typing(self) -> None:
        # Until finish() cancels the scope: the reply is open only while its turn runs.
        tuning = self._tuning
        while True:
            await anyio.sleep(tuning.typing_refresh)
            await self._outbox.typing(self.room_id, True, tuning.typing_timeout_ms)

    async def _stream_flush(self) -> float | None:
        """One round of streamed edits; the seconds to wait first when the account is busy."""
        wait = self._pacer.intermediate_wait()
        if wait > 0:
            return wait
        async with self._flush_lock:
            if self._closed:
                return None
            try:
                await self._flush(self._pieces(self._answer, tools=True), Priority.INTERMEDIATE)
            except RateLimited:
                # Dropped, not retried: the next round carries the text, once there is room.
                return max(self._pacer.intermediate_wait(), self._pacer.edit_interval())
            except SendFailed as exc:
                log.warning("a streamed edit in %s failed: %s", self.room_id, exc)
        return None

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
        limits = Limits(limits.text_bytes - reserve, limits.event_bytes)
        render = self._renderer
        pieces = render.pieces(answer, limits, encrypted=self._encrypted) if answer.strip() else []
        block = self._tool_block() if tools else ""
        if block:
            last = pieces.pop()["body"] + "\n\n" if pieces else ""
            pieces.append(render.content(last + block))
        for index, piece in enumerate(pieces):
            # Only the first piece notifies the person it answers; m.new_content keeps it.
            with_mentions(piece, self._mention if index == 0 else ())
        return pieces

    async def _flush(self, desired: list[dict[str, Any]], priority: Priority) -> None:
        tuning = self._tuning
        final = priority is Priority.FINAL
        for index, content in enumerate(desired):
            if index < len(self._messages):
                sent = self._messages[index]
                if sent.content == content:
                    continue
                # A full (sealed) piece changes once more when the next message starts.
                sealed = index < len(desired) - 1
                if not final and not sealed and sent.edits >= tuning.max_edits:
                    continue
                await self._outbox.edit(self.room_id, sent.event_id, content, priority)
                sent.content = content
                sent.edits += 1
            else:
                message = self._new_message(content, index)
                event_id = await self._outbox.send(self.room_id, message, priority)
                self._messages.append(_Sent(event_id, content))
                if self._on_sent is not None:
                    self._on_sent(event_id)
        if final:
            # The final answer may be shorter than what streamed.
            for sent in self._messages[len(desired) :]:
                await self._outbox.redact(self.room_id, sent.event_id, priority)
            del self._messages[len(desired) :]

    def _new_message(self, content: dict[str, Any], index: int) -> dict[str, Any]:
        if index == 0:
            return with_relation(
                dict(content), thread_root=self._thread_root, reply_to=self._reply_to
            )
        # A continuation follows the previous piece (in a thread: the thread's latest message).
        return with_relation(
            dict(content),
            thread_root=self._thread_root,
            latest=self._messages[index - 1].event_id,
        )

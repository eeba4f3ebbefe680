"""One turn of one thread, and the hand-off of messages into it.

:class:`TurnRunner` takes everything pending in the thread's inbox as one turn (one store
transaction), sends it to agy, streams what :class:`bridge.agy.turn.TurnReader` reads into the
thread's live reply, and records how the turn ended. While the turn runs, agy's
``PreInvocation`` hook calls :meth:`TurnRunner.on_hook`, which takes the messages that arrived
meanwhile (again one transaction) into agy's next model call. Either way a message leaves
``pending`` exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from bridge.agy import turn as agy_turn
from bridge.agy.process import AgyHandle, AgyOutput
from bridge.agy.session import AgySession
from bridge.agy.turn import TextDelta, ToolUpdate, TurnEnd, TurnReader, TurnStatus
from bridge.core import turn_verdicts as verdicts
from bridge.core.approvals.policy import WRITE_TOOLS
from bridge.core.disk import DiskSpace
from bridge.core.events import Author, ChatAdapter, LiveReply, Reaction, ThreadRef, ToolActivity
from bridge.core.marks import Marks
from bridge.core.outcome import (
    Classified,
    classify,
    stopped_by_shutdown,
    stored_usage,
    summarised,
)
from bridge.core.prompt import injected_text, turn_blocks
from bridge.core.scrub import Scrubber, StreamScrubber
from bridge.core.store.ports import TurnStore
from bridge.core.store.rows import MessageState, StoredMessage, StoreError, TurnState, Usage
from bridge.core.team.controls import TeamControls
from bridge.core.team.hooks import TeamHooks
from bridge.core.thread.turn_policy import GO, Ask, Go, Verdict
from bridge.core.turn_limits import TurnLimits
from bridge.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TurnResult:
    """How a turn ended, for the worker that decides what the process does next."""

    state: TurnState
    # How long to let agy exit on its own before the next turn (0: the process carries on).
    exit_wait: float = 0.0
    # agy died before reading the turn: its messages went back to the inbox.
    requeued: bool = False


@dataclass
class RunningTurn:
    id: int
    conversation_id: str
    reader: TurnReader
    replies: AsyncExitStack
    open_reply: Callable[[], Awaitable[LiveReply]]
    # The streamed answer's scrubber (a secret may straddle two pieces).
    text_scrub: StreamScrubber
    started: float = field(default_factory=time.monotonic)
    stopped_by: str | None = None
    # The turn's messages have gone to agy (before that, a Stop keeps them from it).
    sent: bool = False
    timed_out: bool = False
    # Inbox ids injected by hook calls whose reply agy has not yet shown it read.
    unconfirmed: list[int] = field(default_factory=list)
    # Those of the latest hook call.
    last_injection: list[int] = field(default_factory=list)
    author: Author | None = None  # who asked for this turn (its last message's author)
    # Each tool call agy finished or failed, for the audit trail.
    on_tool: Callable[[ToolUpdate], Awaitable[object]] | None = None
    # The files the turn wrote, in order (for the summary under the answer), and the
    # conversation's usage before it (agy's totals: the turn's own is the difference).
    files: list[str] = field(default_factory=list)
    usage_before: Usage | None = None
    # Why the disk watch stopped it (the thread is told).
    disk_stopped: str = ""
    _reply: LiveReply | None = None

    async def reply(self) -> LiveReply:
        """The thread's live reply, opened on agy's first sign of work (a turn agy never read
        leaves no trace in the thread)."""
        if self._reply is None:
            self._reply = await self.open_reply()
        return self._reply

    async def show(self, batch: list[AgyOutput], scrub: Scrubber) -> TurnEnd | None:
        """Everything agy printed since the last look: its text deltas go to the reply as one
        piece (one scrub, one chat update), tool lines in their place between them."""
        events = self.reader.read(batch)
        # agy went on after a hook call: it read that call's reply. Anything it printed counts
        # but the turn's end, which comes only last in a batch (see AgyProcess.next_batch).
        if len(batch) > 1 or not (events and isinstance(events[-1], TurnEnd)):
            self.unconfirmed.clear()
        for event in events:
            if isinstance(event, TextDelta):
                await self._show_text(event.text)
            elif isinstance(event, ToolUpdate):
                if event.state == "DONE" and event.name in WRITE_TOOLS and event.summary:
                    written = scrub(event.summary)
                    if written not in self.files:
                        self.files.append(written)
                await self._show_text("")
                if self.on_tool is not None and event.state != "ACTIVE":
                    await self.on_tool(event)
                await (await self.reply()).tool(
                    ToolActivity(
                        name=event.name,
                        summary=scrub(event.summary),
                        state=event.state,
                        error=scrub(event.error) if event.error is not None else None,
                    )
                )
            else:
                await self._show_text("")
                return event
        await self._show_text("")
        return None

    async def _show_text(self, text: str) -> None:
        if not text and not self.reader.acknowledged:
            return  # agy has not taken the turn: the thread shows nothing yet
        # The reply opens on agy's first sign of work, text or not: the thread sees it began.
        reply = await self.reply()
        shown = self.text_scrub.feed(text) if text else ""
        if shown:
            await reply.append(shown)


class TurnRunner:
    def __init__(
        self,
        ref: ThreadRef,
        adapter: ChatAdapter,
        store: TurnStore,
        metrics: Metrics,
        session: AgySession,
        marks: Marks,
        *,
        turn_timeout: float,
        owner: str,
        save: Callable[[StoredMessage], Awaitable[StoredMessage]],
        began: Callable[[Ask], None] = lambda ask: None,
        ask_inject: Callable[[Ask], None] = lambda ask: None,
        finishing: Callable[[], None] = lambda: None,
        requeued: Callable[[], None] = lambda: None,
        scrub: Scrubber | None = None,
        team: TeamControls | None = None,
        settle: Callable[[], Awaitable[list[str]]] | None = None,
        disk: DiskSpace | None = None,
        workdir: Path | None = None,
    ):
        self.ref = ref
        self.team = TeamHooks(team, ref, adapter.post_message)
        self.key = ref.key
        self.adapter = adapter
        self.store = store
        self.metrics = metrics
        self.session = session
        self.marks = marks
        self.turn_timeout = turn_timeout
        self.owner = owner
        self.scrub = scrub or Scrubber(())
        self._save = save
        # Tell the thread that its turn runs, and that messages wait again (put back).
        self._began = began
        self._ask_inject = ask_inject
        # The turn policy's answer to the last ask (set by the thread's machine through
        # :meth:`answer`, synchronously inside ``began`` / ``ask_inject``).
        self._verdict: Verdict | None = None
        # The thread's conversation so far, as agy last reported it (shown to the policy).
        self.usage: Usage | None = None
        self._finishing = finishing
        self._wake = requeued
        # What must be done before the answer is posted (a worktree thread's branch brought
        # home, so answer and repository agree); its notes (a one-line stat) end the answer.
        self._settle = settle
        self._proc: AgyHandle | None = None
        self._requeued_last = False
        self.current: RunningTurn | None = None
        # The turn before, for a hook answer that turns out undelivered after its turn ended.
        self._previous: RunningTurn | None = None
        # Blocks sent ahead of the next turn's messages, once (a thread's history on a handover).
        self.context: list[str] = []
        self.limits = TurnLimits(
            self.key, disk, workdir, lambda text: adapter.post_message(ref, text)
        )

    def requester(self) -> Author | None:
        """Who asked for the running turn (None when none runs)."""
        return self.current.author if self.current is not None else None

    def answer(self, verdict: Verdict) -> None:
        self._verdict = verdict

    def _ask(self, ask: Ask, via: Callable[[Ask], None]) -> Verdict:
        """The machine's verdict on ``ask`` (none given: it no longer runs this thread's turns,
        whose work is being cancelled; go on as before)."""
        self._verdict = None
        via(ask)
        verdict, self._verdict = self._verdict, None
        return verdict if verdict is not None else GO

    def _verdicts(self) -> verdicts.Parts:
        return verdicts.Parts(self.ref, self.store, self.marks, self.adapter, self.scrub)

    def interrupt(self, by: str) -> bool:
        """!stop / Stop button: SIGINT the running turn (or keep it from agy: see ``send``)."""
        turn, proc = self.current, self._proc
        if turn is None or proc is None:
            return False
        turn.stopped_by = by
        if not turn.sent:
            return True
        turn.reader.interrupt_sent()
        proc.interrupt()
        return True

    # --- one turn ---------------------------------------------------------------------------

    async def run(self, proc: AgyHandle) -> TurnResult | None:
        """Run one turn on everything pending; None when nothing was pending after all."""
        if not await self.limits.may_start():
            return None
        # What this turn takes needs no hook call; a message stored later raises the flag again.
        self.session.clear_pending()
        taken = await self.store.take_turn(self.key, proc.conversation_id, owner=self.owner)
        if taken is None:
            return None
        turn_id, messages = taken
        messages = [await self._save(m) for m in messages]
        last = messages[-1]
        ask = Ask("turn", tuple(m.author for m in messages), self.ref, self.usage, last.author)
        judged = await self.team.prepare(ask)
        async with AsyncExitStack() as replies:
            turn = RunningTurn(
                turn_id,
                proc.conversation_id,
                TurnReader(proc.conversation_id),
                replies,
                lambda: replies.enter_async_context(
                    self.adapter.open_reply(self.ref, last.message_id, last.author)
                ),
                self.scrub.stream(),
                author=last.author,
                on_tool=self.team.on_tool(turn_id),
                usage_before=await usage_so_far(self.store, self.key, proc.conversation_id),
            )
            self._proc = proc
            self.current = turn
            try:
                verdict = self._ask(ask, self._began)
                await self.team.judged(judged, verdict, messages, turn_id, proc.conversation_id)
                if not isinstance(verdict, Go):
                    self.current = None
                    self._finishing()
                    await verdicts.not_run(self._verdicts(), turn.id, messages, verdict)
                    return TurnResult(TurnState.ERROR)
                return await self._run(proc, turn, messages)
            finally:
                self.current = None
                self._previous = turn
                self._proc = None

    async def _run(
        self, proc: AgyHandle, turn: RunningTurn, messages: list[StoredMessage]
    ) -> TurnResult:
        self.metrics.turn_started(self.ref.platform)
        cancelled: BaseException | None = None
        end: TurnEnd | None = None
        try:
            baseline = await self.limits.baseline()
            if turn.stopped_by is not None:
                end = TurnEnd(TurnStatus.INTERRUPTED, "")  # stopped before agy had it
            else:
                context, self.context = self.context, []
                await send(proc, turn, [*context, *turn_blocks(messages)])
                end = await self._follow_watched(proc, turn, baseline)
        except anyio.get_cancelled_exc_class() as exc:
            # The bridge is stopping: the thread is told, the turn is recorded, then we go.
            cancelled = exc
        self.current = None  # from here on, hook calls take nothing into this turn
        self._finishing()
        with anyio.CancelScope(shield=True):
            if end is not None and await self._requeue_unread(proc, turn, end):
                return TurnResult(TurnState.ERROR, requeued=True)
            self._requeued_last = False
            if end is None:
                result = stopped_by_shutdown()
            else:
                await self._requeue_unconfirmed(turn, end)
                result = classify(
                    end,
                    scrub=self.scrub,
                    stopped_by=turn.stopped_by,
                    deadline_minutes=self.turn_timeout / 60 if turn.timed_out else None,
                )
                result = summarised(result, turn.files, turn.usage_before, end)
            result = await self.limits.noted(proc, result, turn.disk_stopped)
            count(self.metrics, self.ref.platform, proc, turn, result)
            if self._settle is not None:
                result = with_notes(result, await self._settle())
            # The answer goes to the thread first: a store that cannot be written must not
            # cost the team the agent's work.
            await self._deliver(turn, result)
            await self._record(turn, result, end)
        if cancelled is not None:
            raise cancelled
        assert end is not None
        return TurnResult(result.state, exit_wait=end.exit_wait if turn.sent else 0.0)

    async def _follow_watched(self, proc: AgyHandle, turn: RunningTurn, baseline: int) -> TurnEnd:
        """``follow``, with the disk watched beside it: a turn filling the disk is stopped."""

        def stop(reason: str) -> None:
            turn.disk_stopped = reason
            turn.reader.interrupt_sent()
            proc.interrupt()

        return await self.limits.follow(
            follow(proc, turn, self.scrub, self.turn_timeout), baseline, stop
        )

    async def _requeue_unread(self, proc: AgyHandle, turn: RunningTurn, end: TurnEnd) -> bool:
        """agy died before it read the turn (it was already on its way out): the messages go
        back to the inbox for the next process, once, instead of being lost."""
        if (
            end.status is not TurnStatus.EXITED
            or turn.reader.acknowledged
            or proc.alive
            or self._requeued_last
        ):
            return False
        self._requeued_last = True
        await self.store.requeue_turn(turn.id)
        self._wake()
        await self.store.finish_turn(turn.id, TurnState.ERROR, error="agy exited before the turn")
        log.info("agy exited before reading a turn; requeued", extra={"chat_thread": self.key})
        return True

    async def _requeue_unconfirmed(self, turn: RunningTurn, end: TurnEnd) -> None:
        """agy ended before its next step after a hook call: that reply was never read, so the
        messages it carried wait for the next turn instead of being lost."""
        if end.status is TurnStatus.EXITED and turn.unconfirmed:
            await self._put_back(turn.unconfirmed)
            turn.unconfirmed = []

    async def injection_lost(self) -> None:
        """The listener could not hand the last hook call's answer to agy (too late, or curl
        had gone): its messages go back to the inbox."""
        turn = self.current or self._previous
        if turn is None or not turn.last_injection:
            return
        ids, turn.last_injection = turn.last_injection, []
        turn.unconfirmed = [i for i in turn.unconfirmed if i not in ids]
        await self._put_back(ids)

    async def _put_back(self, ids: list[int]) -> None:
        try:
            await self.store.requeue_injected(ids)
        except StoreError as exc:
            log.error("could not requeue messages: %s", exc, extra={"chat_thread": self.key})
            return
        wanted = set(ids)
        for message in await self.store.pending(self.key):
            if message.id in wanted:
                self.marks.put(self.ref, message.message_id, Reaction.QUEUED)
        self.session.mark_pending()
        self._wake()
        log.info(
            "agy never read %d injected message(s); they wait for the next turn",
            len(ids),
            extra={"chat_thread": self.key},
        )

    async def _deliver(self, turn: RunningTurn, result: Classified) -> None:
        try:
            await (await turn.reply()).finish(result.outcome)
        except Exception:
            self.metrics.error("chat_post")
            log.exception("could not post the end of a turn", extra={"chat_thread": self.key})

    async def _record(self, turn: RunningTurn, result: Classified, end: TurnEnd | None) -> None:
        if end is not None and end.usage is not None:
            self.usage = Usage(
                input_tokens=end.usage.input_tokens,
                output_tokens=end.usage.output_tokens,
                total_tokens=end.usage.total_tokens,
            )
        await record_turn(self.store, self.metrics, self.adapter, self.ref, turn.id, result, end)
        await self.team.ended(turn.id, result.state, result.outcome.error)

    # --- the PreInvocation hook -----------------------------------------------------------

    async def take_injections(self, conversation_id: str) -> list[str]:
        """A model call of ``conversation_id`` is about to start: the messages that arrived
        mid-turn, as agy should read them (none when no turn runs or the call is a
        subagent's)."""
        turn = self.current
        if turn is None or conversation_id != turn.conversation_id:
            return []
        self.session.clear_pending()
        taken = await self.store.take_pending(
            self.key, MessageState.INJECTED, turn.id, ready_only=True
        )
        if not taken:
            return []
        others = [m for m in taken if turn.author is None or m.author.id != turn.author.id]
        if others:
            ask = Ask("inject", tuple(m.author for m in others), self.ref, self.usage, turn.author)
            judged = await self.team.prepare(ask)
            verdict = self._ask(ask, self._ask_inject)
            await self.team.judged(judged, verdict, others, turn.id)
            if not isinstance(verdict, Go):
                taken = await verdicts.set_aside(self._verdicts(), taken, others, verdict)
        if not taken:
            return []
        await self.team.injected(turn.id, taken)
        turn.unconfirmed.extend(m.id for m in taken)
        turn.last_injection = [m.id for m in taken]
        self.metrics.injected(self.ref.platform, len(taken))
        for message in taken:
            self.marks.put(self.ref, message.message_id, Reaction.INJECTED)
        log.info(
            "injected %d message(s) mid-turn",
            len(taken),
            extra={"chat_thread": self.key, "conversation": turn.conversation_id},
        )
        return [injected_text(m) for m in taken]


async def send(proc: AgyHandle, turn: RunningTurn, blocks: list[str]) -> None:
    """The turn to agy. A Stop before this point keeps the turn from agy altogether (a SIGINT
    would reach an agy with no turn, which exits, and the turn would go to a dying process);
    from here on a Stop is a SIGINT."""
    turn.sent = True
    try:
        await proc.send_turn(blocks)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # agy is gone: the exit event explains why


async def follow(
    proc: AgyHandle, turn: RunningTurn, scrub: Scrubber, turn_timeout: float
) -> TurnEnd:
    """Stream one turn's events into its reply until its end (or our own deadline)."""
    with anyio.move_on_after(turn_timeout):
        while True:
            end = await turn.show(await proc.next_batch(), scrub)
            if end is not None:
                return end
    # Past the bridge's own deadline: interrupt, and give agy a moment to answer.
    turn.timed_out = True
    turn.reader.interrupt_sent()
    proc.interrupt()
    with anyio.move_on_after(agy_turn.INTERRUPT_GRACE):
        while True:
            if isinstance(turn.reader.feed(await proc.next()), TurnEnd):
                break
    return turn.reader.ended or TurnEnd(TurnStatus.INTERRUPTED, turn.reader.streamed)


async def usage_so_far(store: TurnStore, key: str, conversation_id: str) -> Usage | None:
    """The conversation's usage before a turn (None for a new conversation)."""
    row = await store.thread(key)
    if row.conversation_id != conversation_id:
        return None
    return row.usage


def count(
    metrics: Metrics, platform: str, proc: AgyHandle, turn: RunningTurn, result: Classified
) -> None:
    metrics.turn_finished(platform, result.state, time.monotonic() - turn.started)
    if result.state is TurnState.ERROR:
        metrics.error("agy_exit" if not proc.alive else "agy_result")


async def record_turn(
    store: TurnStore,
    metrics: Metrics,
    adapter: ChatAdapter,
    ref: ThreadRef,
    turn_id: int,
    result: Classified,
    end: TurnEnd | None,
) -> None:
    """How the turn ended, in the store; the thread is told when that cannot be written."""
    outcome = result.outcome
    usage = stored_usage(end.usage) if end is not None else None
    try:
        await store.finish_turn(
            turn_id,
            result.state,
            error=outcome.error,
            response=outcome.final_text,
            usage=usage,  # the conversation's so far: also the thread's
        )
    except StoreError as exc:
        metrics.error("store")
        log.error("could not record a turn: %s", exc, extra={"chat_thread": ref.key})
        try:
            await adapter.post_message(
                ref,
                "⚠️ The bridge could not record this turn in its store (disk full or "
                "read-only?); the answer above is all there is of it.",
            )
        except Exception:
            log.exception("could not post a notice", extra={"chat_thread": ref.key})


def with_notes(result: Classified, notes: list[str]) -> Classified:
    """``result`` with ``notes`` at the end of its outcome's notes."""
    if not notes:
        return result
    outcome = result.outcome.model_copy(update={"notes": [*result.outcome.notes, *notes]})
    return Classified(outcome, result.state)

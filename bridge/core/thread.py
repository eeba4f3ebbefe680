"""The turn loop of one thread: its agy process, its turns, and injection into them.

One ``ThreadWorker`` per active thread runs in the core's task group and owns that thread's
agy process (a context manager held across turns). Messages wait in the store's inbox; the
worker takes them as turns, and the ``PreInvocation`` hook takes them into a running turn.
Each message leaves ``pending`` in exactly one transaction, so it reaches agy exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from bridge.agy import wire
from bridge.agy.listener import Registration
from bridge.agy.plugin import RuleTooLarge, lower_flag, raise_flag
from bridge.agy.process import AgyProcess, AgyStartError, ProcessExit, open_agy
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core import store as st
from bridge.core.attachments import save_attachments
from bridge.core.events import (
    ChatAdapter,
    LiveReply,
    Reaction,
    ThreadRef,
    ToolActivity,
    TurnOutcome,
)
from bridge.core.guidance import build_guidance
from bridge.core.prompt import injected_text, turn_blocks
from bridge.core.scrub import Scrubber, StreamScrubber
from bridge.core.slots import ProcessSlots
from bridge.core.store import Store, StoredMessage, StoreError
from bridge.core.workspaces import Place, place_for
from bridge.core.worktrees import WorktreeError, ensure_worktree, is_repository, remove_worktree
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

# How long agy may take to answer SIGINT with its result before the group is killed.
INTERRUPT_GRACE = 15.0


@dataclass
class CoreDeps:
    """What every worker shares: one of each per bridge."""

    config: Config
    store: Store
    runtime: AgyRuntime
    slots: ProcessSlots
    adapters: dict[str, ChatAdapter]
    task_group: TaskGroup
    metrics: Metrics
    mcp_servers: Callable[[ThreadWorker], dict[str, Any]] | None = None


@dataclass
class TurnState:
    turn_id: int
    # Opened on agy's first output for the turn, so a turn agy never read leaves no trace.
    opener: Callable[[], Awaitable[LiveReply]]
    live: LiveReply | None = None
    started: float = field(default_factory=time.monotonic)
    interrupted_by: str | None = None
    timed_out: bool = False
    denied: list[str] = field(default_factory=list)
    # agy printed something for this turn (its user_input step at least).
    acknowledged: bool = False
    # The streamed answer, scrubbed across delta boundaries.
    pieces: StreamScrubber = field(default_factory=lambda: StreamScrubber(Scrubber()))

    async def reply(self) -> LiveReply:
        if self.live is None:
            self.live = await self.opener()
        return self.live


def tool_summary(step: wire.StepUpdate) -> str:
    info = step.tool_info
    params = info.parameters if info else {}
    for key in ("CommandLine", "AbsolutePath", "TargetFile", "DirectoryPath", "Pattern", "Url"):
        value = params.get(key)
        if isinstance(value, str) and value:
            return value if len(value) <= 120 else value[:117] + "…"
    if "ToolName" in params:
        return f"{params.get('ServerName', '?')}/{params['ToolName']}"
    return ""


class ThreadWorker:
    def __init__(
        self, ref: ThreadRef, deps: CoreDeps, on_exit: Callable[[ThreadWorker, bool], None]
    ):
        self.ref = ref
        self.key = ref.key
        self.deps = deps
        self.adapter = deps.adapters[ref.platform]
        self._on_exit = on_exit
        self._wake = anyio.Event()
        self._woken = False
        self.proc: AgyProcess | None = None
        self.turn: TurnState | None = None
        self.place: Place | None = None
        self.restart_requested = False
        self.scrub = Scrubber(deps.config.secret_values())
        self._in_turn = False
        self._requeued = False

    # --- signals from the core ------------------------------------------------------------

    def notify(self) -> None:
        """New work may be waiting (a message, a command)."""
        self._woken = True
        self._wake.set()

    @property
    def busy(self) -> bool:
        return self._in_turn

    def interrupt(self, by: str) -> bool:
        """!stop / Stop button: SIGINT the running turn. False when nothing runs."""
        if self.turn is None or self.proc is None:
            return False
        self.turn.interrupted_by = by
        self.proc.interrupt()
        return True

    def request_restart(self) -> None:
        """Restart the process when idle (a model switch, a new conversation)."""
        self.restart_requested = True
        self.notify()

    # --- the worker -----------------------------------------------------------------------

    async def run(self) -> None:
        log.info("thread worker started", extra={"chat_thread": self.key})
        registration: Registration | None = None
        clean = False
        try:
            self.place = place_for(self.deps.config, self.ref)
            await self._prepare_workdir(self.place)
            registration = await self.deps.runtime.prepare(
                self.place.session_dir,
                hook=self.on_hook,
                mcp_servers=self.deps.mcp_servers(self) if self.deps.mcp_servers else None,
                guidance=build_guidance(self.deps.config.agy.guidance),
                notes=self.place.notes,
            )
            while True:
                self._woken = False
                if not await self.deps.store.pending(self.key):
                    if self._woken:
                        continue
                    break
                await self._serve()
            clean = True
        except WorktreeError as exc:
            await self._fail_pending(f"cannot set up this thread's git worktree: {exc}")
        except RuleTooLarge as exc:
            await self._fail_pending(f"the agent's rules are too long: {exc}")
        except OSError as exc:
            await self._fail_pending(f"cannot prepare the thread's directories: {exc}")
        except Exception:
            # One thread's failure must not take the bridge (and every other thread) down.
            log.exception("thread worker failed", extra={"chat_thread": self.key})
            with anyio.CancelScope(shield=True):
                await self._fail_pending(
                    "the bridge hit an internal error in this thread (see its log); "
                    "send your message again"
                )
        finally:
            with anyio.CancelScope(shield=True):
                if registration is not None:
                    await registration.close()
                await self._cleanup_workdir()
            # Only a worker that ran out of work may hand a late message to a successor; one
            # that was cancelled (shutdown) must not start another.
            self._on_exit(self, clean)
            log.info("thread worker stopped", extra={"chat_thread": self.key})

    async def _serve(self) -> None:
        """Hold a process slot and run turns until idle, evicted, or agy is gone."""
        async with self.deps.slots.hold(self.key, self._tell_queued) as slot:
            fresh_retry = True
            while True:
                try:
                    again = await self._with_process(slot.evict)
                except AgyStartError as exc:
                    if fresh_retry and await self._drop_conversation_after(exc):
                        fresh_retry = False
                        continue
                    text = self.scrub(self._start_error_text(exc))
                    if (
                        exc.kind == "error_result"
                        and (await self.deps.store.thread(self.ref)).model
                    ):
                        # A model agy refuses (a result before init) must not wedge the thread.
                        await self.deps.store.update_thread(self.key, model=None)
                        text += "\nThis thread's model was reset to the default."
                    await self._fail_pending(text)
                    return
                if not again:
                    return

    async def _with_process(self, evict: anyio.Event) -> bool:
        """One agy process. Returns True to start another at once (after !stop, a restart)."""
        assert self.place is not None
        thread = await self.deps.store.thread(self.ref)
        model = thread.model or self.deps.config.agy.model or None
        spec = self.deps.runtime.spec(
            self.place.session_dir,
            self.place.workdir,
            model=model,
            conversation=thread.conversation_id,
        )
        self.restart_requested = False
        async with open_agy(spec, self._bad_line) as proc:
            await self.deps.store.add_process(proc.pid, self.key, self.deps.runtime.run_marker)
            try:
                self.proc = proc
                if proc.conversation_id != thread.conversation_id:
                    await self.deps.store.update_thread(
                        self.key, conversation_id=proc.conversation_id
                    )
                log.info(
                    "agy ready",
                    extra={"chat_thread": self.key, "conversation": proc.conversation_id},
                )
                return await self._turns(proc, evict)
            finally:
                self.proc = None
                with anyio.CancelScope(shield=True):
                    await self.deps.store.remove_process(proc.pid)

    async def _turns(self, proc: AgyProcess, evict: anyio.Event) -> bool:
        idle_timeout = self.deps.config.agy.idle_timeout
        while True:
            if not proc.alive:
                return False
            if self.restart_requested:
                return True
            pending = await self.deps.store.pending(self.key)
            if pending:
                self.deps.slots.set_idle(self.key, False)
                self._woken = False
                self._in_turn = True
                try:
                    end = await self._turn(proc)
                finally:
                    self._in_turn = False
                if end == st.ERROR and proc.alive:
                    # Quota and login errors end with agy exiting: do not hand the next turn to
                    # a process that is on its way out.
                    with anyio.move_on_after(1.0):
                        while proc.alive and not isinstance(await proc.next(), ProcessExit):
                            pass
                if end == st.INTERRUPTED:
                    # agy exits after SIGINT: carry on with a new process, same conversation.
                    with anyio.move_on_after(INTERRUPT_GRACE):
                        while not isinstance(await proc.next(), ProcessExit):
                            pass
                    # One that ignored SIGINT is wedged: closing it ends its process group, and
                    # the next message gets a fresh process.
                    return not proc.alive
                continue
            self.deps.slots.set_idle(self.key, True)
            self._wake = anyio.Event()
            if self._woken:
                self._woken = False
                continue
            with anyio.move_on_after(idle_timeout) as idle:
                async with anyio.create_task_group() as tg:

                    async def _on_evict(scope: anyio.CancelScope = tg.cancel_scope) -> None:
                        await evict.wait()
                        scope.cancel()

                    tg.start_soon(_on_evict)
                    await self._wake.wait()
                    tg.cancel_scope.cancel()
            if idle.cancelled_caught or evict.is_set():
                log.info(
                    "closing idle agy" if not evict.is_set() else "closing agy for another thread",
                    extra={"chat_thread": self.key},
                )
                return False

    async def _turn(self, proc: AgyProcess) -> str:
        """Run one turn on everything pending. Returns how it ended."""
        store = self.deps.store
        if self.place is not None:
            # What this turn takes needs no hook call; a message stored later raises it again.
            lower_flag(self.place.session_dir)
        taken = await store.take_turn(self.key, proc.conversation_id)
        if taken is None:
            return "empty"
        turn_id, messages = taken
        messages = [await self._ensure_saved(m) for m in messages]
        reply_to = messages[-1].message_id
        self.turn = TurnState(
            turn_id,
            lambda: self.adapter.open_reply(self.ref, reply_to),
            pieces=StreamScrubber(self.scrub),
        )
        self.deps.metrics.turn_started(self.ref.platform)
        self._spawn(self.adapter.set_typing(self.ref, True))
        turn = self.turn
        cancelled: BaseException | None = None
        try:
            try:
                await proc.send_turn(turn_blocks(messages))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # agy is gone: the exit event explains why
            outcome, state, usage = await self._follow(proc, turn)
        except anyio.get_cancelled_exc_class() as exc:
            # The bridge is stopping: the thread is told, the turn is recorded, then we go.
            cancelled = exc
            outcome = TurnOutcome(
                error="the bridge stopped during this turn; send the message again later",
                interrupted=True,
            )
            state, usage = st.INTERRUPTED, None
        finally:
            self.turn = None
        if (
            state == st.ERROR
            and not turn.acknowledged
            and not proc.alive
            and not self._requeued
            and cancelled is None
        ):
            # agy died before it read the turn (it was already on its way out): the messages
            # go back to the inbox for the next process, once, instead of being lost.
            self._requeued = True
            with anyio.CancelScope(shield=True):
                await store.requeue_turn(turn_id)
                await store.finish_turn(turn_id, st.ERROR, error="agy exited before the turn")
            log.info("agy exited before reading a turn; requeued", extra={"chat_thread": self.key})
            return state
        self._requeued = False
        self.deps.metrics.turn_finished(
            self.ref.platform,
            state if state in (st.DONE, st.ERROR, st.INTERRUPTED) else st.ERROR,
            time.monotonic() - turn.started,
        )
        if state == st.ERROR:
            self.deps.metrics.error("agy_exit" if not proc.alive else "agy_result")
        with anyio.CancelScope(shield=True):
            # The answer goes to the thread first: a store that cannot be written must not
            # cost the team the agent's work.
            await self._deliver(turn, outcome)
            self._spawn(self.adapter.set_typing(self.ref, False))
            try:
                await store.finish_turn(
                    turn_id, state, error=outcome.error, response=outcome.final_text, usage=usage
                )
                if usage is not None:
                    await store.update_thread(self.key, usage_json=usage.model_dump_json())
            except StoreError as exc:
                self.deps.metrics.error("store")
                log.error("could not record a turn: %s", exc, extra={"chat_thread": self.key})
                await self._say(
                    "⚠️ The bridge could not record this turn in its store (disk full or "
                    "read-only?); the answer above is all there is of it."
                )
        if cancelled is not None:
            raise cancelled
        return state

    async def _follow(
        self, proc: AgyProcess, turn: TurnState
    ) -> tuple[TurnOutcome, str, wire.Usage | None]:
        """Stream one turn's events into its reply until its result (or agy's end)."""
        deadline = self.deps.config.agy.turn_timeout
        streamed: list[str] = []
        with anyio.move_on_after(deadline) as timer:
            while True:
                out = await proc.next()
                result = await self._handle(out, turn, streamed, proc)
                if result is not None:
                    return result
        # Past the bridge's own deadline: interrupt, and give agy a moment to answer.
        turn.timed_out = True
        await self._flush_stream(turn, streamed)
        proc.interrupt()
        with anyio.move_on_after(INTERRUPT_GRACE):
            while True:
                out = await proc.next()
                if isinstance(out, wire.ResultEvent | ProcessExit):
                    break
        assert timer.cancelled_caught
        minutes = deadline / 60
        text = f"the turn ran longer than {minutes:g} minutes and was stopped"
        return (
            TurnOutcome(final_text="".join(streamed), error=text, interrupted=True),
            st.INTERRUPTED,
            None,
        )

    async def _handle(
        self, out: wire.AgyEvent | ProcessExit, turn: TurnState, streamed: list[str], proc: Any
    ) -> tuple[TurnOutcome, str, wire.Usage | None] | None:
        if isinstance(out, wire.StepUpdateEvent):
            await self._step(out.step_update, turn, streamed, proc)
            return None
        if isinstance(out, wire.ResultEvent | ProcessExit):
            await self._flush_stream(turn, streamed)
        if isinstance(out, wire.ResultEvent):
            turn.acknowledged = True
            return self._outcome(out.result, turn, streamed)
        if isinstance(out, ProcessExit):
            text = self.scrub(f"agy stopped unexpectedly ({out.describe()})")
            if turn.interrupted_by is not None:
                return (
                    TurnOutcome(final_text="".join(streamed), interrupted=True, notes=[]),
                    st.INTERRUPTED,
                    None,
                )
            return (
                TurnOutcome(final_text="".join(streamed), error=text),
                st.ERROR,
                None,
            )
        return None  # init again, unknown events: nothing to show

    async def _step(
        self, step: wire.StepUpdate, turn: TurnState, streamed: list[str], proc: AgyProcess
    ) -> None:
        turn.acknowledged = True
        if step.conversation_id and step.conversation_id != proc.conversation_id:
            return  # a subagent's step
        reply = await turn.reply()  # agy took the turn: show the thread it is being worked on
        if step.step_type == "agent_response" and step.text_delta:
            delta = turn.pieces.feed(step.text_delta)
            if delta:
                streamed.append(delta)
                await reply.append(delta)
        elif step.step_type == "tool" or step.tool_name:
            name = step.tool_name or (step.tool_info.name if step.tool_info else None) or "tool"
            error = None
            if step.tool_info is not None and step.tool_info.error is not None:
                error = self.scrub(step.tool_info.error.message)
            if step.is_permission_denial:
                turn.denied.append(name)
            await reply.tool(
                ToolActivity(
                    name=name, summary=self.scrub(tool_summary(step)), state=step.state, error=error
                )
            )

    async def _flush_stream(self, turn: TurnState, streamed: list[str]) -> None:
        """The tail held back in case it was the start of a secret: it was not."""
        rest = turn.pieces.flush()
        if rest:
            streamed.append(rest)
            await (await turn.reply()).append(rest)

    def _outcome(
        self, result: wire.ResultInfo, turn: TurnState, streamed: list[str]
    ) -> tuple[TurnOutcome, str, wire.Usage | None]:
        denied = [a.display_name or a.action for a in result.denied_actions] or turn.denied
        final = self.scrub(result.response) if result.response else "".join(streamed)
        if result.ok:
            return TurnOutcome(final_text=final, denied=denied), st.DONE, result.usage
        interrupted = turn.interrupted_by is not None or result.error in (
            "interrupted",
            "context canceled",
        )
        if interrupted:
            notes = [f"Stopped by {turn.interrupted_by}."] if turn.interrupted_by else []
            outcome = TurnOutcome(final_text=final, interrupted=True, denied=denied, notes=notes)
            return outcome, st.INTERRUPTED, result.usage
        error = self.scrub(result.error or "agy reported an error without a message")
        return (
            TurnOutcome(final_text=final, error=error, denied=denied),
            st.ERROR,
            result.usage,
        )

    # --- the PreInvocation hook -----------------------------------------------------------

    async def on_hook(self, event: str, data: wire.HookInput) -> wire.HookReply:
        """Hand messages that arrived mid-turn to agy's next model call."""
        turn, proc = self.turn, self.proc
        if event != "PreInvocation" or turn is None or proc is None:
            return wire.EMPTY_HOOK_REPLY
        if data.conversation_id != proc.conversation_id:
            return wire.EMPTY_HOOK_REPLY  # a subagent's call: not ours to feed
        if self.place is not None:
            lower_flag(self.place.session_dir)
        taken = await self.deps.store.take_pending(
            self.key, st.INJECTED, turn.turn_id, ready_only=True
        )
        if not taken:
            return wire.EMPTY_HOOK_REPLY
        self.deps.metrics.injected(self.ref.platform, len(taken))
        for message in taken:
            self._spawn(self.adapter.react(self.ref, message.message_id, Reaction.INJECTED))
        log.info(
            "injected %d message(s) mid-turn",
            len(taken),
            extra={"chat_thread": self.key, "conversation": proc.conversation_id},
        )
        return wire.HookReply(
            inject_steps=[wire.InjectedStep(user_message=injected_text(m)) for m in taken]
        )

    # --- helpers ----------------------------------------------------------------------------

    async def _prepare_workdir(self, place: Place) -> None:
        if place.repo is None or place.branch is None:
            place.workdir.mkdir(parents=True, exist_ok=True)
            return
        if not await is_repository(place.repo):
            raise WorktreeError(f"{place.repo} is not a git repository (worktree = true)")
        if await ensure_worktree(place.repo, place.workdir, place.branch):
            await self._say(
                f"This thread works on its own branch `{place.branch}` (a git worktree of "
                f"`{place.repo}`), so other threads do not touch its files."
            )

    async def _cleanup_workdir(self) -> None:
        place = self.place
        if (
            place is None
            or place.repo is None
            or place.workspace is None
            or place.workspace.worktree_cleanup != "remove"
        ):
            return
        try:
            await remove_worktree(place.repo, place.workdir)
        except OSError:
            log.warning(
                "could not remove a worktree", exc_info=True, extra={"chat_thread": self.key}
            )

    async def fetch_in_background(self, message_id: int) -> None:
        """Save a busy thread's new attachments now, so the hook can inject the message."""
        pending = {m.id: m for m in await self.deps.store.pending(self.key)}
        message = pending.get(message_id)
        if message is not None and not message.ready:
            await self._ensure_saved(message)
            if self.place is not None:
                raise_flag(self.place.session_dir)  # now it can be injected

    async def _ensure_saved(self, message: StoredMessage) -> StoredMessage:
        if message.ready:
            return message
        assert self.place is not None
        saved = await save_attachments(
            self.adapter,
            message.attachments,
            self.place.session_dir / "attachments",
            f"{message.id:06d}",
            self.deps.config.bridge.max_attachment_bytes,
        )
        await self.deps.store.set_saved(message.id, saved)
        return message.model_copy(update={"saved": saved})

    async def _deliver(self, turn: TurnState, outcome: TurnOutcome) -> None:
        try:
            await (await turn.reply()).finish(outcome)
        except Exception:
            self.deps.metrics.error("chat_post")
            log.exception("could not post the end of a turn", extra={"chat_thread": self.key})

    async def _tell_queued(self, position: int) -> None:
        limit = self.deps.slots.limit
        await self._say(
            f"All {limit} agent slots are busy; this thread is number {position} in line and "
            "starts as soon as one is free."
        )

    async def _say(self, text: str) -> None:
        try:
            await self.adapter.post_message(self.ref, text)
        except Exception:
            log.exception("could not post a notice", extra={"chat_thread": self.key})

    def _spawn(self, coro: Any) -> None:
        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.warning("chat call failed", exc_info=True, extra={"chat_thread": self.key})

        self.deps.task_group.start_soon(guarded)

    def _bad_line(self, reason: str) -> None:
        self.deps.metrics.bad_line()
        log.warning("unreadable line from agy: %s", reason, extra={"chat_thread": self.key})

    async def _drop_conversation_after(self, exc: AgyStartError) -> bool:
        """agy exited before init on a resume: drop the id and start fresh (once)."""
        thread = await self.deps.store.thread(self.ref)
        if exc.kind != "exited" or not thread.conversation_id:
            return False
        await self.deps.store.update_thread(self.key, conversation_id=None)
        detail = self.scrub(exc.exit.stderr_tail.strip()) if exc.exit else ""
        await self._say(
            "⚠️ agy could not resume this thread's conversation"
            + (f" ({detail})" if detail else "")
            + ". Starting a fresh conversation; earlier context is not available to the agent."
        )
        return True

    @staticmethod
    def _start_error_text(exc: AgyStartError) -> str:
        if exc.kind == "error_result":
            return f"agy refused to start: {exc.message}"
        return exc.message

    async def _fail_pending(self, reason: str) -> None:
        """agy could not take these messages: say so, and leave the thread usable."""
        self.deps.metrics.error("agy_start")
        try:
            failed = await self.deps.store.take_pending(self.key, st.FAILED, None, ready_only=False)
        except StoreError as exc:
            log.error("could not mark messages failed: %s", exc, extra={"chat_thread": self.key})
            failed = []
        for message in failed:
            self._spawn(self.adapter.react(self.ref, message.message_id, Reaction.FAILED))
        await self._say(f"⚠️ {reason}")

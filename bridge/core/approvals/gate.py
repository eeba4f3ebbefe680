"""One thread's approvals: the policy first, then a request in the thread and its answer.

The :class:`ApprovalGate` answers agy's ``PreToolUse`` hook for one thread. Requests are asked
one at a time, in the order agy made the calls (a FIFO lock), and each is stored before it is
shown, so a restart finds it and marks it expired. While one waits the turn is paused inside
agy, but the thread stays open: a chat message is stored and injected at the next model call.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import anyio

from bridge.agy.session import ToolCall, ToolVerdict
from bridge.config import ApprovalsSection
from bridge.core.approvals import policy, texts
from bridge.core.approvals.reaction import ReactionClock
from bridge.core.approvals.replies import number_handle
from bridge.core.approvals.rules import CommandRule, RuleError, parse_rule, stored_row
from bridge.core.events import (
    ApprovalChoice,
    ApprovalRequest,
    ApprovalResult,
    Author,
    ChatAdapter,
    DecideOutcome,
    OutgoingFile,
    ThreadRef,
)
from bridge.core.store.ports import GateStore
from bridge.core.store.rows import ApprovalRow, ApprovalState, StoreError
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

ALLOWED = ToolVerdict(allow=True)
DENY_MODE = ToolVerdict(
    allow=False,
    reason="this bridge refuses tool calls that need approval (approvals mode is deny); ask "
    "the operator to allow the command, or do without it",
)
# How long a request must have been shown, with nothing else posted or decided in the thread,
# before a bare typed `approve` (with no number) may decide it: a person's reading time. In
# the race it guards against, a second approver's `approve` written for request A reached the
# thread 0.5 s after request B was posted. It is measured twice: by the bridge's clock when it
# handles the answer, and by the chat's clock when the person sent it (a loaded host, or
# another instance's answer through the store, can handle it seconds later).
REACTION_SECONDS = 2.0
# How long a request denied by a stop holds its deny back while agy acts on the SIGINT it was
# sent first (see ``after_stop``).
STOP_GRACE = 10.0


@dataclass
class _Waiting:
    request: ApprovalRequest
    pattern: str | None
    # When the window closes (``anyio.current_time()``): the hook call's arrival plus the
    # timeout, the moment the listener's own deadline counts from too.
    deadline: float = math.inf
    handle: str | None = None  # set once the request message is posted
    posted: anyio.Event = field(default_factory=anyio.Event)
    started: float = field(default_factory=time.monotonic)
    done: anyio.Event = field(default_factory=anyio.Event)
    turn_over: anyio.Event = field(default_factory=anyio.Event)  # agy is past this request
    state: ApprovalState | None = None
    by: Author | None = None
    reason: str = ""


def may_approve(approvers: list[str], who: Author) -> bool:
    return not approvers or who.id in approvers


class ApprovalGate:
    def __init__(
        self,
        ref: ThreadRef,
        adapter: ChatAdapter,
        store: GateStore,
        metrics: Metrics,
        section: ApprovalsSection,
        place: policy.Place,
        requested_by: Callable[[], Author | None],
        on_waiting: Callable[[bool], None] = lambda waiting: None,
    ):
        self.ref = ref
        self.key = ref.key
        self.adapter = adapter
        self.store = store
        self.metrics = metrics
        self.config = section
        self.place = place
        self._requested_by = requested_by
        # Tells the thread whether a request waits (a Stop then denies it with the turn).
        self._on_waiting = on_waiting
        # anyio's Lock wakes its waiters first come, first served: requests keep agy's order.
        self._lock = anyio.Lock()
        self._waiting: _Waiting | None = None
        # The thread's "always" list, read from the store once: this gate is its only writer
        # while the thread runs (``!approvals reset`` calls :meth:`forget_allow_list`).
        self._always: tuple[CommandRule, ...] | None = None
        self._told: set[str] = set()  # dropped stored rows the thread was told about
        # A bare typed answer within REACTION_SECONDS of a request event could mean another.
        self._reaction = ReactionClock()
        # One policy (and so one shell parser) for the gate's life.
        self._policy = policy.Policy(
            policy.Rules(
                section.allow_commands, section.deny_commands, section.allow_hosts, section.options
            )
        )

    @property
    def waiting(self) -> _Waiting | None:
        return self._waiting

    @waiting.setter
    def waiting(self, value: _Waiting | None) -> None:
        self._waiting = value
        self._on_waiting(value is not None)

    # --- agy asks ----------------------------------------------------------------------------

    async def decide(self, call: ToolCall) -> ToolVerdict:
        """The answer to one ``PreToolUse`` call: at once by policy, or after asking.

        The window for a person's answer counts from the hook call's arrival, not from the
        request's post: the listener answers agy's hook call a little after ``timeout`` from
        that arrival, whatever happens here, so a window counted from a slow post (a loaded
        host, a chat's rate limit) would still take answers after agy was told "denied"."""
        arrived = call.arrived if call.arrived is not None else anyio.current_time()
        deadline = arrived + self.config.timeout
        verdict = await self._judge(call)
        if isinstance(verdict, policy.Allow):
            self.metrics.approval("allowed_by_policy")
            return ALLOWED
        if isinstance(verdict, policy.Deny):
            self.metrics.approval("denied_by_policy")
            return ToolVerdict(allow=False, reason=verdict.reason)
        if self.config.mode == "deny":
            self.metrics.approval("denied_by_policy")
            return DENY_MODE
        async with self._lock:
            # An "always" given for an earlier request may cover this one now.
            verdict = await self._judge(call)
            if isinstance(verdict, policy.Allow):
                self.metrics.approval("allowed_by_policy")
                return ALLOWED
            if isinstance(verdict, policy.Deny):
                return ToolVerdict(allow=False, reason=verdict.reason)
            if anyio.current_time() >= deadline:
                # Earlier requests took its whole window: the listener is denying it anyway.
                self.metrics.approval(ApprovalState.TIMED_OUT.value)
                return ToolVerdict(allow=False, reason=texts.queued_too_long(self.config.timeout))
            return await self._ask(call, verdict, deadline)

    async def _judge(self, call: ToolCall) -> policy.Verdict:
        place = self.place
        if call.scratch:
            place = replace(place, scratch=Path(call.scratch))
        if self._always is None:
            await self.load()
        assert self._always is not None
        return self._policy.judge(call.name, call.args, place, self._always)

    async def load(self) -> None:
        """Read the thread's allow list now (the worker starts), so no hook call waits on it."""
        rules, dropped = self._policy.read_always(await self.store.allow_list(self.key))
        self._always = rules
        told = [text for text in dropped if text not in self._told]
        if told:
            self._told.update(told)
            await self._notice(texts.dropped_rules_text(told))

    async def _notice(self, text: str) -> None:
        try:
            await self.adapter.post_message(self.ref, text)
        except Exception:
            log.exception("could not post a notice", extra={"chat_thread": self.key})

    def forget_allow_list(self) -> None:
        """The stored list changed elsewhere (``!approvals reset``): read it again."""
        self._always = None

    async def _ask(self, call: ToolCall, ask: policy.Ask, deadline: float) -> ToolVerdict:
        store = self.store
        requested_by = self._requested_by()
        request = ApprovalRequest(
            id=uuid.uuid4().hex,
            thread=self.ref,
            tool=call.name,
            summary=ask.summary,
            preview=ask.preview,
            always=ask.pattern is not None,
            requested_by=requested_by,
            text="",
        )
        # Waiting before it is posted: a click may come before the post call returns.
        waiting = _Waiting(request, ask.pattern, deadline)
        self.waiting = waiting
        try:
            number = await store.add_approval(
                request.id, self.key, call.name, dict(call.args), ask.summary, requested_by
            )
            text = texts.request_text(
                tool=call.name,
                summary=ask.summary,
                preview=ask.preview,
                requested_by=requested_by,
                timeout=window_left(deadline, self.config.timeout),
                number=number,
            )
            update: dict[str, object] = {"number": number, "text": text}
            if await attach_if_too_long(self.adapter, self.ref, number, ask.summary):
                update["always"], waiting.pattern = False, None  # never allowed always
            waiting.request = request = request.model_copy(update=update)
            waiting.handle = await self.adapter.ask_approval(request)
            # After the post returned: the chat had shown it by then (the later, the safer).
            self._reaction.mark()
            await store.set_approval_handle(request.id, waiting.handle)
        except Exception as exc:
            log.exception("could not ask for an approval", extra={"chat_thread": self.key})
            self.waiting = None
            await settle_quietly(self.store, request.id, ApprovalState.EXPIRED, str(exc))
            return ToolVerdict(
                allow=False, reason="the bridge could not ask in the chat for an approval"
            )
        finally:
            waiting.posted.set()
        try:
            with anyio.CancelScope(deadline=waiting.deadline):
                await waiting.done.wait()
            if waiting.state is None:
                await self._finish(waiting, ApprovalState.TIMED_OUT, None, "")
            elif waiting.state is ApprovalState.STOPPED:
                await after_stop(waiting)
        finally:
            if waiting.state is None:
                # Cancelled: the session closed (the bridge stops, agy is gone).
                with anyio.CancelScope(shield=True):
                    await self._finish(
                        waiting, ApprovalState.EXPIRED, None, "the agent's session ended"
                    )
            self.waiting = None
        assert waiting.state is not None
        if waiting.state in (ApprovalState.APPROVED, ApprovalState.ALWAYS):
            return ALLOWED
        return ToolVerdict(
            allow=False,
            reason=texts.agent_reason(
                waiting.state, waiting.by, waiting.reason, self.config.timeout
            ),
        )

    # --- people answer -------------------------------------------------------------------------

    async def resolve(
        self,
        handle: str | None,
        choice: ApprovalChoice,
        by: Author,
        reason: str = "",
        *,
        sent_at: datetime | None = None,
    ) -> DecideOutcome:
        """An answer to the waiting request: ``handle`` is its message (a click, a reaction, a
        Matrix reply), ``#N`` (a typed answer naming its number), or None (a bare typed
        answer: it decides only when nothing else could be meant, :data:`REACTION_SECONDS`,
        counted also from ``sent_at``, when the person sent it by the chat's clock)."""
        waiting = self.waiting
        if waiting is None or waiting.state is not None:
            return DecideOutcome.UNKNOWN
        await waiting.posted.wait()
        if waiting.state is not None or waiting.handle is None:
            return DecideOutcome.UNKNOWN
        if anyio.current_time() >= waiting.deadline:
            # Past the window (the post took it, or the timeout is being recorded): agy is
            # told "denied", so the answer is late, as one after the timeout is.
            return DecideOutcome.UNKNOWN
        number = waiting.request.number
        typed = handle is None or handle.startswith("#")
        if not typed and handle != waiting.handle:
            return DecideOutcome.UNKNOWN
        if not may_approve(self.config.approvers, by):
            return DecideOutcome.NOT_APPROVER
        if handle is not None and typed:
            if number is None or handle != number_handle(number):
                return await self._explain(waiting, by, f"request {handle[1:]} is not waiting")
        elif handle is None and self._reaction.too_soon(sent_at, REACTION_SECONDS):
            return await self._explain(waiting, by, texts.TOO_SOON)
        if choice is ApprovalChoice.DENY:
            state = ApprovalState.DENIED
        elif choice is ApprovalChoice.ALWAYS and waiting.pattern is not None:
            state = ApprovalState.ALWAYS
            if reason.strip():
                try:
                    waiting.pattern = parse_rule(reason).text  # the approver's own rule
                except RuleError as exc:
                    # Still approved always, for the exact command: the rule cannot be used.
                    log.info("an approver's rule is not used: %s", exc)
            reason = ""
        else:
            state = ApprovalState.APPROVED
            reason = ""
        if not await self._finish(waiting, state, by, reason.strip()):
            return DecideOutcome.UNKNOWN
        return DecideOutcome.DECIDED

    async def _explain(self, waiting: _Waiting, by: Author, why: str) -> DecideOutcome:
        """A typed answer decided nothing: say which request waits and how to answer it."""
        request = waiting.request
        await self._notice(texts.which_waits(by, why, request.number, request.summary))
        return DecideOutcome.AMBIGUOUS

    async def stop(self, by: str, interrupt: Callable[[], object]) -> bool:
        """!stop while a request waits: deny it, and ``interrupt`` the turn before agy reads
        the deny (else agy could finish the turn first). True when one waited."""
        waiting = self.waiting
        if waiting is None or waiting.state is not None:
            return False
        await waiting.posted.wait()
        who = Author(id=by, display_name=by)
        return await self._finish(waiting, ApprovalState.STOPPED, who, "", before=interrupt)

    async def abandon(self) -> None:
        """The turn ended (agy is gone) while a request waited: it expires."""
        if (waiting := self.waiting) is not None:
            waiting.turn_over.set()
            if waiting.state is None:
                await self._finish(waiting, ApprovalState.EXPIRED, None, "the agent's turn ended")

    # --- recording -----------------------------------------------------------------------------

    async def _finish(
        self,
        waiting: _Waiting,
        state: ApprovalState,
        by: Author | None,
        reason: str,
        *,
        before: Callable[[], object] | None = None,
    ) -> bool:
        if waiting.state is not None:
            return False
        waiting.state, waiting.by, waiting.reason = state, by, reason
        try:
            await self.store.settle_approval(waiting.request.id, state, by=by, reason=reason)
            if state is ApprovalState.ALWAYS and waiting.pattern is not None:
                await self.store.add_allowed(self.key, stored_row(waiting.pattern), by)
                self._always = None
        except StoreError as exc:
            # The decision still stands for agy; the record is what is lost.
            log.error("could not record a decision: %s", exc, extra={"chat_thread": self.key})
        if before is not None:
            before()
        waiting.done.set()
        self._reaction.mark()
        self.metrics.approval(state.value, time.monotonic() - waiting.started)
        log.info(
            "approval %s: %s",
            state.value,
            waiting.request.tool,
            extra={"chat_thread": self.key},
        )
        try:
            if waiting.handle is not None:
                result = result_of(waiting, state, by, reason)
                await self.adapter.settle_approval(waiting.request, waiting.handle, result)
        except Exception:
            log.exception("could not edit an approval request", extra={"chat_thread": self.key})
        return True


def result_of(
    waiting: _Waiting, state: ApprovalState, by: Author | None, reason: str
) -> ApprovalResult:
    """What the request's message becomes once ``state`` settles it."""
    return ApprovalResult(
        state=state.value,
        by=by,
        reason=reason,
        text=texts.result_text(
            waiting.request.summary,
            state,
            by,
            reason,
            pattern=waiting.pattern if state is ApprovalState.ALWAYS else None,
            number=waiting.request.number,
        ),
    )


def window_left(deadline: float, timeout: float) -> float:
    """The window to show in a request: ``timeout``, or what is left of it when earlier
    requests took a part (rounded down to whole minutes, or seconds under one)."""
    left = deadline - anyio.current_time()
    if left >= timeout - 1:
        return timeout
    if left >= 60:
        return math.floor(left / 60) * 60
    return max(1, math.floor(left))


async def settle_quietly(
    store: GateStore, approval_id: str, state: ApprovalState, reason: str
) -> None:
    try:
        await store.settle_approval(approval_id, state, reason=reason)
    except StoreError:
        pass


async def after_stop(waiting: _Waiting) -> None:
    """A stopped request's deny waits until the turn is over. agy was sent SIGINT first, but a
    signal and a hook's reply reach it on separate paths: answered at once, agy can read the
    deny before it acts on the interrupt and carry on with its turn (another tool, an answer)
    as if nobody had stopped it. An agy that does not act on SIGINT while its hook call waits
    gets the deny after :data:`STOP_GRACE`."""
    with anyio.move_on_after(STOP_GRACE):
        await waiting.turn_over.wait()


async def attach_if_too_long(adapter: ChatAdapter, ref: ThreadRef, number: int, text: str) -> bool:
    """A command too long to show in a message is attached whole; whether it was."""
    if not texts.too_long(text):
        return False
    name = f"request-{number}.txt"
    title = f"Request {number}: the whole text of what would run"
    await adapter.post_file(ref, OutgoingFile(name=name, data=text.encode()), title)
    return True


def request_of(row: ApprovalRow, ref: ThreadRef) -> ApprovalRequest:
    """A stored request as the adapters see it (to edit its message after a restart)."""
    return ApprovalRequest(
        id=row.id,
        thread=ref,
        tool=row.tool,
        summary=row.summary,
        requested_by=row.requested_by,
        text="",
    )

"""A thread's state machine: every transition in one table, commands in, effects out, no I/O.

``handle(state, command) -> (state, effects)`` is all there is. The actor
(:mod:`bridge.core.thread.actor`) carries the effects out and reports what came of them as
further commands (``ProcessReady``, ``TurnEnded`` ...). Every value a transition reads is a
field of :class:`State`; nothing beside it decides.

The phases, in the order a thread usually meets them::

    PREPARING -> CHECKING -> QUEUED -> STARTING -> TAKING -> RUNNING -> FINISHING
                                                    -> (READING | IDLE)
                    ^                     ^                                   |
                    |                     +---------- CLOSING <---------------+
                    +------------------------------- CLOSING (slot released)
    any -> GONE (nothing waits, the lease is lost or ended, the thread failed)

docs/architecture.md has the whole table.

Before a turn runs and before someone else's messages join a running turn the machine asks the
thread's :class:`~bridge.core.thread.turn_policy.TurnPolicy` (``handle``'s ``policy``), and acts
on its verdict: go, refuse (the messages fail) or hold (they wait, and an idle thread does not
take them again until a new message or ``PolicyChanged`` comes). See
:mod:`bridge.core.thread.turn_policy` for the interface and how to plug a policy in.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.core.thread import commands as c
from bridge.core.thread import effects as e
from bridge.core.thread import turn_policy as tp

NOTHING_RUNNING = "Nothing is running in this thread."
SHUTTING_DOWN = "the bridge shutting down"
HOOKS_HELD = (
    "This thread's agy ran tool calls without the bridge's approval hooks, so it starts no "
    "new turn until an agy that runs the hooks is back (a new agy version or login, or the "
    "bridge restarted once `agy-bridge doctor --live` reports the hooks running)."
)


class Phase(enum.Enum):
    PREPARING = "preparing"  # directories, gate, agy session
    CHECKING = "checking"  # no process: does anything wait?
    QUEUED = "queued"  # waiting for a process slot
    STARTING = "starting"  # agy starting
    TAKING = "taking"  # a turn is taking its messages (counts as in a turn)
    RUNNING = "running"  # a turn runs: Stop interrupts it, new messages are injected
    FINISHING = "finishing"  # its answer is being posted and recorded (still in the turn)
    READING = "reading"  # after a turn, something was stored meanwhile: does it still wait?
    IDLE = "idle"  # agy alive, no turn, the idle timer runs
    CLOSING = "closing"  # agy on its way out
    GONE = "gone"  # the actor is done: nothing is done any more


class AfterClose(enum.Enum):
    START = "start"  # a new process in the same slot (a restart, an interrupt agy exited on)
    RELEASE = "release"  # give the slot back and look at the inbox


@dataclass(frozen=True)
class State:
    phase: Phase = Phase.PREPARING
    # Something was stored that no look at the inbox or turn has seen yet.
    signalled: bool = False
    # A restart was asked for (a model switch, a new conversation): at the next chance.
    restart: bool = False
    # The instance drains or stops: no new turn, no new process.
    draining: bool = False
    # Another thread asked for this one's slot: let go when idle.
    evicted: bool = False
    # The one retry with a fresh conversation (agy forgot the old one) was used in this slot.
    retried_fresh: bool = False
    after_close: AfterClose = AfterClose.RELEASE
    # A Stop that came while a turn was on its way (its messages waiting or being taken, agy
    # starting for them, the turn before still finishing): applied once that turn runs; told
    # as "nothing running" if none does.
    stop_by: str | None = None
    # That Stop was a person's (not the bridge's own, for a shutdown or !new): they are told
    # if it finds nothing to stop.
    stop_told: bool = False
    # An approval request waits (a Stop denies it with the turn).
    asking: bool = False
    # Numbers idle spells, so a timer of an earlier one changes nothing.
    spell: int = 0
    # How the actor ended: cleanly (it ran out of work) or not (failed, lease lost).
    clean: bool = False
    # The turn policy held what waits: only a new message or PolicyChanged takes it again.
    held: bool = False
    # agy ran tools without the gate's hooks: no turn starts until one that runs them is back
    # (a new actor of the thread starts so when bridge/core/approvals/hook_health says so).
    unhooked: bool = False

    @property
    def in_turn(self) -> bool:
        """From before a turn takes its messages until it has ended."""
        return self.phase in (Phase.TAKING, Phase.RUNNING, Phase.FINISHING)

    @property
    def turn_owed(self) -> bool:
        """A turn is on its way: something waits that no turn has taken yet (a new actor looks
        because something was stored), or the turn is taking it now."""
        if self.phase in (Phase.TAKING, Phase.READING):
            return True
        if self.phase in (Phase.PREPARING, Phase.CHECKING, Phase.QUEUED, Phase.STARTING):
            return not self.draining
        if self.phase is Phase.CLOSING and self.after_close is AfterClose.START:
            return not self.draining  # a new process looks at the inbox at once
        if self.phase in (Phase.FINISHING, Phase.CLOSING):
            return self.signalled and not self.draining
        return False

    @property
    def busy(self) -> bool:
        return self.phase is Phase.RUNNING

    @property
    def gone(self) -> bool:
        return self.phase is Phase.GONE

    @property
    def respawn(self) -> bool:
        """Gone cleanly while a message landed: a new actor should take it."""
        return self.gone and self.clean and self.signalled and not self.draining


Step = tuple[State, list[e.Effect]]


def _set(state: State, **changes: Any) -> State:
    """``state`` with ``changes`` (``dataclasses.replace`` reads the fields anew at every call:
    several times slower, at several transitions per turn)."""
    return State(**{**state.__dict__, **changes})


def handle(state: State, command: c.Command, policy: tp.TurnPolicy = tp.OPEN) -> Step:
    """The one transition function (``policy``: the turn policy, asked before a turn runs and
    before someone else's messages join a running turn)."""
    if state.gone:
        # Only remember a late message (the router may start a successor for it), and a Stop
        # for that successor's turn.
        if isinstance(command, c.MessageStored | c.PolicyChanged):
            return _set(state, signalled=True), []
        if isinstance(command, c.Stop) and state.respawn:
            return _set(state, stop_by=command.by.label, stop_told=True), []
        return state, []
    if isinstance(command, c.TurnBegan):
        return _turn_began(state, command, policy)
    if isinstance(command, c.InjectAsked):
        return _inject_asked(state, command, policy)
    step = _TABLE.get(type(command))
    if step is None:
        raise TypeError(f"a thread has no transition for {type(command).__name__}")
    return step(state, command)


# --- the ways into each phase ---------------------------------------------------------------


def _check(state: State, *before: e.Effect) -> Step:
    return _set(state, phase=Phase.CHECKING, signalled=False), [*before, e.CheckInbox()]


def _take(state: State, *before: e.Effect) -> Step:
    return (
        _set(state, phase=Phase.TAKING, signalled=False),
        [*before, e.SetIdle(False), e.RunTurn()],
    )


def _close(state: State, after: AfterClose, *before: e.Effect) -> Step:
    return _set(state, phase=Phase.CLOSING, after_close=after), [*before, e.CloseProcess()]


def _start(state: State, *before: e.Effect) -> Step:
    return _set(state, phase=Phase.STARTING, restart=False), [*before, e.StartProcess()]


def _gone(state: State, clean: bool, *effects: e.Effect) -> Step:
    told: list[e.Effect] = []
    if clean and not state.draining:
        state, told = _nothing_to_stop(state)  # the inbox was empty after all
    state = _set(state, phase=Phase.GONE, clean=clean, stop_by=None, stop_told=False)
    return state, [*told, *effects, e.Exit()]


def _ready(state: State, woken: bool) -> Step:
    """agy is alive and no turn runs: restart, take a turn, or idle."""
    if state.unhooked:
        return _close(state, AfterClose.RELEASE)
    if state.restart:
        return _close(state, AfterClose.START)
    # Something stored since the last look counts too (it came after that look's read); what
    # the policy held waits for something new.
    if ((woken and not state.held) or state.signalled) and not state.draining:
        return _take(state)
    return _idle(state)


def _idle(state: State) -> Step:
    state, told = _nothing_to_stop(state)
    if state.evicted:
        return _close(state, AfterClose.RELEASE, *told)
    spell = state.spell + 1
    return (
        _set(state, phase=Phase.IDLE, spell=spell),
        [*told, e.SetIdle(True), e.StartIdleTimer(spell)],
    )


def _nothing_to_stop(state: State) -> tuple[State, list[e.Effect]]:
    """No turn came for a Stop that waited for one: it is answered now, once."""
    if state.stop_by is None:
        return state, []
    told: list[e.Effect] = [e.Say(NOTHING_RUNNING)] if state.stop_told else []
    return _set(state, stop_by=None, stop_told=False), told


# --- transitions ------------------------------------------------------------------------------


def _begin(state: State, _: c.Begin) -> Step:
    return state, [e.Prepare()]


def _prepared(state: State, _: c.Prepared) -> Step:
    if state.phase is not Phase.PREPARING:
        return state, []
    return _check(state)


def _failed(state: State, command: c.Failed) -> Step:
    return _gone(state, False, e.CancelWork(lost=False), e.FailPending(command.reason))


def _inbox_checked(state: State, command: c.InboxChecked) -> Step:
    if state.phase is Phase.CHECKING:
        if state.draining:
            return _gone(state, True)
        if command.pending and state.unhooked:
            return _gone(state, True, e.FailPending(HOOKS_HELD))
        if command.pending and (not state.held or state.signalled):
            return _set(state, phase=Phase.QUEUED), [e.AcquireSlot()]
        if state.signalled:
            return _check(state)  # stored while we looked: look again
        return _gone(state, True)
    if state.phase is Phase.READING:
        return _ready(state, woken=command.pending)
    return state, []


def _slot_granted(state: State, _: c.SlotGranted) -> Step:
    if state.phase is not Phase.QUEUED:
        return state, []
    return _start(_set(state, evicted=False, retried_fresh=False))


def _process_ready(state: State, _: c.ProcessReady) -> Step:
    if state.phase is not Phase.STARTING:
        return state, []
    # A new process: most likely something waits (the turn's own transaction finds out).
    return _ready(state, woken=True)


def _start_failed(state: State, command: c.StartFailed) -> Step:
    if state.phase is not Phase.STARTING:
        return state, []
    if command.conversation_unknown and not state.retried_fresh:
        return _start(_set(state, retried_fresh=True), e.DropConversation())
    return _check(state, e.ReportStartFailure(), e.ReleaseSlot())


def _process_closed(state: State, _: c.ProcessClosed) -> Step:
    if state.phase is not Phase.CLOSING:
        return state, []
    if state.after_close is AfterClose.START and not state.draining and not state.unhooked:
        return _start(state)
    return _check(state, e.ReleaseSlot())


def _turn_began(state: State, command: c.TurnBegan, policy: tp.TurnPolicy) -> Step:
    if state.phase is not Phase.TAKING:
        return state, []
    verdict = policy.judge(command.ask)
    stop_by = state.stop_by
    if not isinstance(verdict, tp.Go):
        # Nothing runs: the turn puts its messages back (held) or fails them (refused), then
        # ends as a turn does. A Stop meanwhile has nothing to stop.
        held = isinstance(verdict, tp.Hold)
        state, told = _nothing_to_stop(_set(state, phase=Phase.FINISHING, held=held))
        return state, [e.Answer(verdict), *told]
    state = _set(state, phase=Phase.RUNNING, stop_by=None, stop_told=False, held=False)
    if stop_by is None:
        return state, [e.Answer(verdict)]
    state, effects = _end_turn(state, stop_by, tell=False)
    return state, [e.Answer(verdict), *effects]


def _inject_asked(state: State, command: c.InjectAsked, policy: tp.TurnPolicy) -> Step:
    if state.phase is not Phase.RUNNING:
        # No turn to join any more: they wait for the next one.
        return _set(state, signalled=True), [e.Answer(tp.Hold(""))]
    verdict = policy.judge(command.ask)
    if isinstance(verdict, tp.Hold):
        # Put back for the next turn, which asks again (no hook flag: not into this one).
        return _set(state, signalled=True), [e.Answer(verdict)]
    return state, [e.Answer(verdict)]


def _policy_changed(state: State, _: c.PolicyChanged) -> Step:
    state = _set(state, held=False, signalled=state.signalled or state.held)
    if state.phase is Phase.IDLE and state.signalled and not state.draining:
        return _take(state, e.StopIdleTimer())
    return state, []


def _turn_finishing(state: State, _: c.TurnFinishing) -> Step:
    if state.phase is not Phase.RUNNING:
        return state, []
    return _set(state, phase=Phase.FINISHING, asking=False), []


def _turn_ended(state: State, command: c.TurnEnded) -> Step:
    if not state.in_turn:
        return state, []
    # A Stop waiting for a turn stays for the next one (the inbox may have been found empty
    # just before the message was stored); idle or gone, the thread is told nothing ran.
    state = _set(state, asking=False)
    after = command.after
    if after in (c.After.GONE, c.After.WEDGED):
        return _close(state, AfterClose.RELEASE)
    if after is c.After.RESTART:
        return _close(state, AfterClose.START)
    if state.restart:
        return _close(state, AfterClose.START)
    if not state.signalled or state.draining:
        return _idle(state)
    if state.held or not command.taken:
        # Held, and a message came since: the policy is asked again with it.
        return _take(state)  # or stored while the inbox was found empty: try again
    # Stored during the turn: it may have been injected already, and a read is cheaper
    # than a turn's write transaction.
    return _set(state, phase=Phase.READING, signalled=False), [e.CheckInbox()]


def _idle_timeout(state: State, command: c.IdleTimeout) -> Step:
    if state.phase is not Phase.IDLE or command.spell != state.spell:
        return state, []
    return _close(state, AfterClose.RELEASE)


def _evicted(state: State, _: c.Evicted) -> Step:
    state = _set(state, evicted=True)
    if state.phase is not Phase.IDLE:
        return state, []
    return _close(state, AfterClose.RELEASE, e.StopIdleTimer())


def _message_stored(state: State, command: c.MessageStored) -> Step:
    # Something new: what the policy held is asked about again with it.
    state = _set(state, signalled=True, held=False)
    if state.phase is Phase.IDLE:
        if state.draining:
            return state, []
        if state.unhooked:
            return _close(state, AfterClose.RELEASE, e.StopIdleTimer())
        return _take(state, e.StopIdleTimer())
    effects: list[e.Effect] = []
    if state.in_turn:
        # Only a turn makes hook calls; between turns the next turn takes the message.
        effects.append(e.FlagHook())
    if state.busy and command.message_id is not None:
        effects.append(e.MarkQueued(command.message_id))
        if command.attachments and command.row_id is not None:
            effects.append(e.FetchAttachments(command.row_id))
    return state, effects


def _end_turn(state: State, by: str, tell: bool, ahead: bool = False) -> Step:
    """Stop the turn, whatever phase it is in (``ahead``: also one on its way, once it runs)."""
    if state.phase is Phase.TAKING or (ahead and state.turn_owed):
        return _set(state, stop_by=by, stop_told=state.stop_told or tell), []
    if state.phase is Phase.RUNNING:
        if state.asking:
            return state, [e.DenyAndInterrupt(by)]
        return state, [e.Interrupt(by)]
    return state, [e.Say(NOTHING_RUNNING)] if tell else []


def _stop(state: State, command: c.Stop) -> Step:
    return _end_turn(state, command.by.label, tell=True, ahead=True)


def _stop_handed_on(state: State, command: c.StopHandedOn) -> Step:
    return _end_turn(state, command.by, tell=True, ahead=True)


def _no_request_waited(state: State, command: c.NoRequestWaited) -> Step:
    return _end_turn(_set(state, asking=False), command.by, tell=True, ahead=True)


def _restart_when_idle(state: State) -> Step:
    state = _set(state, restart=True)
    if state.phase is Phase.IDLE:
        return _close(state, AfterClose.START, e.StopIdleTimer())
    return state, []


def _new_conversation(state: State, command: c.NewConversation) -> Step:
    state, effects = _end_turn(state, command.by.label, tell=False)
    state, more = _restart_when_idle(state)
    return state, effects + more


def _set_model(state: State, _: c.SetModel | c.Restart) -> Step:
    return _restart_when_idle(state)


def _forget_allow_list(state: State, _: c.ForgetAllowList) -> Step:
    return state, [e.ForgetAllowList()]


def _drain(state: State, _: c.Drain) -> Step:
    return _set(state, draining=True), []


def _shutdown(state: State, _: c.Shutdown) -> Step:
    state = _set(state, draining=True)
    if state.phase is Phase.RUNNING:
        # Interrupted, not denied: a request still waiting expires with the turn.
        return state, [e.Interrupt(SHUTTING_DOWN)]
    return _end_turn(state, SHUTTING_DOWN, tell=False)


def _lease_ended(state: State, command: c.EndLease | c.LeaseLost) -> Step:
    return _gone(state, False, e.CancelWork(lost=isinstance(command, c.LeaseLost)))


def _asking(state: State, command: c.Asking) -> Step:
    return _set(state, asking=command.waiting), []


def _hooks_bypassed(state: State, _: c.HooksBypassed) -> Step:
    # The watch has stopped agy already: the turn ends as one whose agy died, and what waits
    # is failed with the reason when the inbox is looked at.
    return _set(state, unhooked=True), []


def _decide(state: State, _: c.Decide) -> Step:
    # Answers go to the gate directly (they are answered with an outcome): see the actor.
    return state, []


_TABLE: dict[type, Callable[[State, Any], Step]] = {
    c.Begin: _begin,
    c.Prepared: _prepared,
    c.Failed: _failed,
    c.InboxChecked: _inbox_checked,
    c.SlotGranted: _slot_granted,
    c.ProcessReady: _process_ready,
    c.StartFailed: _start_failed,
    c.ProcessClosed: _process_closed,
    c.PolicyChanged: _policy_changed,
    c.TurnFinishing: _turn_finishing,
    c.TurnEnded: _turn_ended,
    c.IdleTimeout: _idle_timeout,
    c.Evicted: _evicted,
    c.MessageStored: _message_stored,
    c.Stop: _stop,
    c.NewConversation: _new_conversation,
    c.SetModel: _set_model,
    c.Restart: _set_model,
    c.ForgetAllowList: _forget_allow_list,
    c.Decide: _decide,
    c.Drain: _drain,
    c.Shutdown: _shutdown,
    c.EndLease: _lease_ended,
    c.LeaseLost: _lease_ended,
    c.Asking: _asking,
    c.HooksBypassed: _hooks_bypassed,
    c.NoRequestWaited: _no_request_waited,
    c.StopHandedOn: _stop_handed_on,
}

"""The thread's state machine, driven through long random walks against a model of its world.

The world is what the actor would touch: the inbox, the process slot, agy, the turn, the hook.
Each step either sends the machine a command from outside (a message, Stop, !new, a model
switch, an eviction, an approval request, a drain, a lost lease) or finishes one piece of work
the machine started (the inbox read, the slot, agy's start, the turn...), in random order. After
every step the invariants are checked; at the end the world is left to settle and what the
thread must have done is checked. The walk is seeded: a failure names its seed.

Two walks in three have a turn policy that answers at random (go, refuse, hold): no turn runs
and no message joins a turn that it did not let go, and only what it held may wait.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from bridge.core.events import Author, ThreadRef
from bridge.core.thread import commands as c
from bridge.core.thread import effects as e
from bridge.core.thread import turn_policy as tp
from bridge.core.thread.machine import NOTHING_RUNNING, Phase, State, Step, handle

ALICE = Author(id="@alice:test", display_name="Alice")
BOB = Author(id="@bob:test", display_name="Bob")
WHERE = ThreadRef(platform="test", channel="room", thread="t1")


@dataclass
class RandomPolicy:
    """A turn policy that answers at random, and remembers its last answer."""

    rng: random.Random
    refuse: float = 0.1
    hold: float = 0.1
    last: tp.Verdict | None = None

    def judge(self, ask: tp.Ask) -> tp.Verdict:
        roll = self.rng.random()
        if roll < self.refuse:
            self.last = tp.Refuse(f"{ask.kind} refused")
        elif roll < self.refuse + self.hold:
            self.last = tp.Hold(f"{ask.kind} held")
        else:
            self.last = tp.GO
        return self.last


@dataclass(frozen=True)
class Logged:
    """One step of the walk: the phase before, the command, the phase after, the effects."""

    before: Phase
    command: c.Command
    after: Phase
    effects: list[e.Effect]

    def __str__(self) -> str:
        return f"{self.before.value} + {self.command} -> {self.after.value} {self.effects}"


@dataclass
class World:
    rng: random.Random
    state: State = field(default_factory=State)
    pending: list[int] = field(default_factory=list)
    delivered: dict[int, int] = field(default_factory=dict)
    failed: set[int] = field(default_factory=set)
    # Work the machine started and the world has not finished: (name, command to report).
    jobs: list[tuple[str, c.Command]] = field(default_factory=list)
    slot: bool = False
    process: bool = False
    # A Stop came while a turn was on its way (taking, or a message waits that no turn took):
    # that turn is interrupted as it begins, or the thread is told nothing runs.
    stop_owed: bool = False
    # Stops nobody has yet answered (an interrupt, or "nothing running"): one answer each.
    stops_unanswered: int = 0
    dead: bool = False  # agy exited (or ignored an interrupt): only closing it is right
    turn: str | None = None  # None, "taking", "running", "finishing"
    turn_took: bool | None = None  # None until the turn's transaction ran
    hook_flag: bool = False
    asking: bool = False
    exited: bool = False
    lost: bool = False
    next_message: int = 0
    log: list[Logged] = field(default_factory=list)
    # Whether this walk may drain, stop, lose its lease or fail (else it runs on and on).
    endings: bool = True
    policy: tp.TurnPolicy = tp.OPEN
    authors: dict[int, Author] = field(default_factory=dict)
    # What the turn took, until the policy's answer; who asked for the running turn.
    taking: list[int] = field(default_factory=list)
    turn_by: Author | None = None
    # Someone else's messages a hook call took, until the policy's answer.
    injecting: list[int] | None = None
    # What the policy held (a turn's messages), and held back from this turn (an injection).
    held: set[int] = field(default_factory=set)
    set_aside: set[int] = field(default_factory=set)
    not_run: bool = False  # the policy refused or held the turn that is ending

    # --- the machine ------------------------------------------------------------------------

    def recent(self, steps: int) -> str:
        """The last steps of the walk, for a failure's message."""
        return "\n".join(str(logged) for logged in self.log[-steps:])

    def tell(self, command: c.Command) -> None:
        before = self.state
        self.state, effects = handle(self.state, command, self.policy)
        # Formatted only when a check fails (the commands and effects are frozen values): a
        # walk's thousands of steps would otherwise spend most of their time in repr().
        self.log.append(Logged(before.phase, command, self.state.phase, effects))
        if before.gone:
            assert effects == [], f"effects after gone: {effects}"
        for effect in effects:
            self.carry_out(effect)
        self.check()

    def carry_out(self, effect: e.Effect) -> None:
        assert not self.exited, f"{effect} after the actor's exit"
        if isinstance(effect, e.Prepare):
            self.jobs.append(("prepare", c.Prepared()))
        elif isinstance(effect, e.CheckInbox):
            # Read first, reported later: a message may be stored in between.
            self.jobs.append(("read", c.InboxChecked(False)))
        elif isinstance(effect, e.AcquireSlot):
            assert not self.slot, "a second slot"
            self.jobs.append(("slot", c.SlotGranted()))
        elif isinstance(effect, e.ReleaseSlot):
            assert self.slot and not self.process, "released a slot agy still uses"
            self.slot = False
        elif isinstance(effect, e.StartProcess):
            assert self.slot, "agy started without a slot"
            assert not self.state.unhooked, "agy started in a thread held for its hooks"
            assert not self.process, "a second agy"
            ok = self.rng.random() < 0.9
            self.jobs.append(
                ("start", c.ProcessReady() if ok else c.StartFailed(self.rng.random() < 0.5))
            )
        elif isinstance(effect, e.CloseProcess):
            assert self.process and self.turn is None, "closed agy under a turn"
            self.jobs.append(("close", c.ProcessClosed()))
        elif isinstance(effect, e.RunTurn):
            assert self.process and self.turn is None, "a turn without agy, or two turns"
            assert not self.state.unhooked, "a turn in a thread held for its hooks"
            assert not self.dead, "a turn sent to an agy that exited"
            self.turn = "taking"
            self.turn_took = None
            self.jobs.append(("take", c.Begin()))  # what it reports is decided at "take"
        elif isinstance(effect, e.Answer):
            self.answered(effect.verdict)
        elif isinstance(effect, e.FlagHook):
            assert self.turn is not None, "the hook's flag outside a turn"
            self.hook_flag = True
        elif isinstance(effect, e.Say) and effect.text == NOTHING_RUNNING:
            assert self.stops_unanswered > 0, "told nothing runs twice, or unasked"
            assert self.turn != "running", "told nothing runs while a turn runs"
            self.stops_unanswered = 0
            self.stop_owed = False
        elif isinstance(effect, e.Interrupt | e.DenyAndInterrupt):
            self.stop_owed = False
            self.stops_unanswered = 0
            if isinstance(effect, e.DenyAndInterrupt):
                self.asking = False
                self.tell(c.Asking(False))
            if self.turn == "running":
                self.turn = "finishing"
                after = self.rng.choice(list(c.After))
                self.jobs = [j for j in self.jobs if j[0] not in ("finish", "end")]
                self.jobs.append(("finish", c.TurnFinishing()))
                self.jobs.append(("end", c.TurnEnded(True, after)))
        elif isinstance(effect, e.FailPending):
            self.failed.update(self.pending)
            self.pending.clear()
        elif isinstance(effect, e.StartIdleTimer):
            self.jobs.append(("idle", c.IdleTimeout(effect.spell)))
        elif isinstance(effect, e.StopIdleTimer):
            self.jobs = [j for j in self.jobs if j[0] != "idle"]
        elif isinstance(effect, e.CancelWork):
            # The slot, agy and the turn end with their tasks.
            self.jobs.clear()
            self.slot = self.process = self.dead = self.not_run = False
            self.turn = None
        elif isinstance(effect, e.Exit):
            self.exited = True
        # Say, MarkQueued, FetchAttachments, SetIdle, ForgetAllowList, DropConversation,
        # ReportStartFailure: no part of the world these invariants follow.

    def answered(self, verdict: tp.Verdict) -> None:
        """The machine passed on the policy's answer: the turn or the hook call acts on it."""
        if isinstance(self.policy, RandomPolicy):
            assert verdict == self.policy.last, "the machine changed the policy's answer"
        if self.injecting is not None:
            others, self.injecting = self.injecting, None
            taken, self.pending = self.pending, []
            if isinstance(verdict, tp.Refuse):
                self.failed.update(others)
                self.deliver_these([m for m in taken if m not in others])
            elif isinstance(verdict, tp.Hold):
                first = taken.index(others[0])
                self.deliver_these(taken[:first])
                self.pending = taken[first:]
                self.set_aside.update(self.pending)
            else:
                self.deliver_these(taken)
            return
        assert self.turn == "taking", f"an answer with no question: {verdict}"
        taken, self.taking = self.taking, []
        if isinstance(verdict, tp.Go):
            self.deliver_these(taken)
            self.turn = "running"
            after = self.rng.choice(
                [c.After.CARRIES_ON] * 6 + [c.After.GONE, c.After.RESTART, c.After.WEDGED]
            )
            self.jobs.append(("finish", c.TurnFinishing()))
            self.jobs.append(("end", c.TurnEnded(True, after)))
            return
        # Nothing runs: the turn puts its messages back or fails them, and ends.
        if isinstance(verdict, tp.Refuse):
            self.failed.update(taken)
        else:
            self.pending = taken + self.pending
            self.held = set(taken)
        self.turn = "finishing"
        self.not_run = True
        self.jobs.append(("end", c.TurnEnded(True, c.After.CARRIES_ON)))

    def check(self) -> None:
        if self.turn in ("taking", "running") and self.pending and not self.state.gone:
            # What arrives while a turn runs is offered to its next model call (unless the
            # policy held it back from this turn).
            assert (
                self.hook_flag or self.turn_took is None or set(self.pending) <= self.set_aside
            ), "a message the hook is not told of"
        for message, times in self.delivered.items():
            assert times == 1, f"message {message} reached agy {times} times"
        assert not (set(self.delivered) & self.failed), "a message both delivered and failed"
        s = self.state
        if s.phase is Phase.IDLE and not s.draining:
            assert self.only_held(), "idle with a message waiting:\n" + self.recent(8)
        if self.not_run and not s.gone:
            assert s.phase is not Phase.RUNNING, "a turn runs that the policy did not let go"
        assert s.in_turn == (self.turn is not None) or s.gone, (s.phase, self.turn)
        if s.phase in (Phase.IDLE, Phase.READING, Phase.TAKING, Phase.RUNNING):
            assert self.process and self.slot
        if s.phase is Phase.IDLE or (s.gone and s.clean and not s.draining and not s.respawn):
            assert not self.stop_owed, "a Stop that waited for a turn was forgotten:\n" + (
                self.recent(12)
            )

    # --- the world finishing a piece of work ---------------------------------------------------

    def finish(self, index: int) -> None:
        name, command = self.jobs.pop(index)
        if name == "read":
            self.jobs.append(("inbox", c.InboxChecked(bool(self.pending))))
            return
        elif name == "slot":
            self.slot = True
        elif name == "start":
            if isinstance(command, c.ProcessReady):
                self.process = True
        elif name == "close":
            self.process = self.dead = False
        elif name == "take":
            # One transaction takes what waits (the hook's flag is cleared just before);
            # the turn asks the policy and runs a moment later.
            self.hook_flag = False
            self.turn_took = bool(self.pending)
            self.taking, self.pending = self.pending, []
            self.set_aside.clear()
            if self.turn_took:
                who = tuple(self.authors[m] for m in self.taking)
                self.turn_by = who[-1]
                ask = tp.Ask("turn", who, WHERE, None, who[-1])
                self.jobs.append(("began", c.TurnBegan(ask)))
            else:
                self.jobs.append(("empty", c.TurnEnded(False, c.After.CARRIES_ON)))
            return
        elif name == "began":
            if self.turn != "taking":
                return
            self.tell(command)
            assert self.turn != "taking", "a turn began without asking the policy"
            assert not self.stop_owed, "a Stop asked before the turn ran was forgotten"
            return
        elif name == "empty":
            if self.turn != "taking":
                return
            self.turn = None
        elif name == "finish":
            if self.turn != "running":
                return
            self.turn = "finishing"
        elif name == "end":
            if self.turn is None:
                return  # a turn that ended otherwise
            if self.turn != "finishing":
                self.jobs.append((name, command))  # its finishing comes first
                return
            self.turn = None
            self.asking = False
            self.not_run = False
            if command.after is not c.After.CARRIES_ON:  # type: ignore[union-attr]
                self.dead = True  # exited (or wedged): closing it is the machine's business
        self.tell(command)

    def deliver_these(self, messages: list[int]) -> None:
        for message in messages:
            self.delivered[message] = self.delivered.get(message, 0) + 1
            self.held.discard(message)

    def only_held(self) -> bool:
        """Nothing waits but what the policy held (and the machine knows it held)."""
        return not self.pending or (self.state.held and set(self.pending) <= self.held)

    # --- from outside -------------------------------------------------------------------------

    def message(self) -> None:
        self.next_message += 1
        self.authors[self.next_message] = self.rng.choice([ALICE, BOB])
        self.pending.append(self.next_message)
        if self.exited and self.state.clean and self.rng.random() < 0.5:
            # The actor is still leaving (its session closing): it remembers the message, and
            # the router starts its successor once it is out.
            self.tell(c.MessageStored(str(self.next_message), self.next_message))
            return
        if self.exited:
            # No actor: the router starts one for the stored message.
            self.state, self.exited = State(), False
            self.tell(c.Begin())
        self.tell(c.MessageStored(str(self.next_message), self.next_message))

    def hook_call(self) -> None:
        """agy's PreInvocation hook during a running turn: takes what waits, if flagged."""
        if self.turn == "running" and self.hook_flag:
            self.hook_flag = False
            others = [m for m in self.pending if self.authors[m] != self.turn_by]
            if not others:
                self.deliver_these(self.pending)
                self.pending = []
                return
            # Someone else's messages: the machine asks the policy whether they join.
            self.injecting = others
            self.tell(c.InjectAsked(tp.Ask("inject", (BOB,), WHERE, None, self.turn_by)))
            assert self.injecting is None, "an injection without the policy's answer"

    def outside(self) -> None:
        roll = self.rng.random()
        if roll < 0.45:
            self.message()
        elif roll < 0.6:
            self.hook_call()
        elif roll < 0.7:
            self.stop()
        elif roll < 0.75:
            self.tell(c.NewConversation(ALICE))
        elif roll < 0.8:
            self.tell(c.SetModel("fast-2", ALICE))
        elif roll < 0.85:
            if self.slot:
                self.tell(c.Evicted())
        elif roll < 0.9:
            if self.turn == "running" and not self.asking:
                self.asking = True
                self.tell(c.Asking(True))
        elif roll < 0.92:
            self.tell(c.ForgetAllowList())
        elif roll < 0.93:
            self.tell(c.PolicyChanged())
        elif roll < 0.935:
            if self.turn == "running":
                # agy ran a tool the gate never decided: the thread takes no turn any more.
                self.tell(c.HooksBypassed())
        elif not self.endings:
            self.message()
        elif roll < 0.95:
            self.give_up()
            self.tell(c.Drain())
        elif roll < 0.96:
            self.give_up()
            self.tell(c.Shutdown())
        elif roll < 0.97:
            self.lost = True
            self.give_up()
            self.tell(self.rng.choice([c.LeaseLost(), c.EndLease()]))
        else:
            self.give_up()
            self.tell(c.Failed("the thread's directories"))

    def give_up(self) -> None:
        """This instance stops running the thread: what waits goes to the next one (or fails
        with a notice), and so does the turn a Stop waited for."""
        self.stop_owed = False

    def stop(self) -> None:
        """A person's Stop. One that comes while a turn is on its way (taking its messages, or
        a message waits that no turn has taken) must stop that turn as it begins."""
        s = self.state
        waiting = self.pending and not self.only_held()
        if not s.gone and not s.draining and self.turn != "running":
            if self.turn == "taking" or waiting:
                self.stop_owed = True
        if s.respawn and waiting and not self.lost:
            self.stop_owed = True  # for the successor's turn (the router hands it on)
        if not s.gone or s.respawn:
            self.stops_unanswered += 1
        self.tell(c.Stop(ALICE))

    def settle(self, limit: int = 2000) -> None:
        """Let every piece of work finish (idle timers last) until the machine waits on none."""
        for _ in range(limit):
            if self.exited and self.state.respawn:
                self.respawn()
            if not self.jobs:
                return
            ready = [i for i, (name, _) in enumerate(self.jobs) if name != "idle"]
            if not ready and not (self.state.draining or self.lost):
                # Idle for minutes is fine, but never with a message waiting (unless held).
                assert self.only_held(), "a message waits on the idle timer:\n" + self.recent(20)
            self.finish(self.rng.choice(ready) if ready else 0)
        raise AssertionError("the thread never settled:\n" + self.recent(30))

    def respawn(self) -> None:
        """The router starts a successor for a message that landed as the actor left."""
        assert not self.slot and not self.process
        stop_by = self.state.stop_by
        self.state, self.exited = State(), False
        self.tell(c.Begin())
        self.tell(c.MessageStored())
        if stop_by is not None:
            self.tell(c.StopHandedOn(stop_by))


def walk(seed: int, steps: int, policy: bool = True) -> World:
    rng = random.Random(seed)
    w = World(rng, endings=seed % 4 == 0)
    if policy and seed % 3:
        w.policy = RandomPolicy(random.Random(seed + 1))
    w.tell(c.Begin())
    for _ in range(steps):
        if w.exited:
            if w.state.respawn:
                if rng.random() < 0.3:
                    w.stop()  # as the actor leaves (its session closing), before its successor
                w.respawn()
            elif w.state.draining or w.lost:
                break  # this instance runs the thread no more
            else:
                w.message()
                continue
        if w.jobs and rng.random() < 0.55:
            w.finish(rng.randrange(len(w.jobs)))
        else:
            w.outside()
    return w


@pytest.mark.parametrize("seed", range(300))
def test_a_random_walk_keeps_every_invariant(seed: int) -> None:
    w = walk(seed, 250)
    w.settle()
    # Settled: every message reached agy once, or failed with a notice, unless the thread
    # stopped for another instance or the next start to take them.
    stopped = w.state.draining or w.lost
    if not stopped:
        assert w.only_held(), f"seed {seed}: messages left waiting:\n" + w.recent(20)
    assert w.exited or not w.jobs


@pytest.mark.parametrize("seed", range(100))
def test_after_a_stop_the_thread_takes_the_next_message(seed: int) -> None:
    w = walk(seed, 60, policy=False)
    if w.exited:
        w = World(random.Random(seed))
        w.tell(c.Begin())
    w.stop()
    w.settle()
    if w.state.draining:
        return
    w.message()
    w.settle()
    assert not w.pending and w.next_message in w.delivered | dict.fromkeys(w.failed)


def test_nothing_is_done_after_gone() -> None:
    gone = State(phase=Phase.GONE)
    commands: list[c.Command] = [
        c.Stop(ALICE),
        c.NewConversation(ALICE),
        c.ProcessReady(),
        c.TurnEnded(True),
        c.InboxChecked(True),
        c.IdleTimeout(0),
        c.Failed("x"),
        c.LeaseLost(),
        c.Shutdown(),
    ]
    for command in commands:
        assert handle(gone, command) == (gone, [])
    # Only a late message is remembered, for a successor.
    state, effects = handle(State(phase=Phase.GONE, clean=True), c.MessageStored())
    assert effects == [] and state.respawn


def _turn_ran(state: State, ask_by: Author = ALICE) -> Step:
    return handle(state, c.TurnBegan(tp.Ask("turn", (ask_by,), WHERE, None, ask_by)))


def test_a_stop_while_the_turn_before_finishes_stops_the_next_one_once() -> None:
    # The answer of one turn is being posted; a message and then a Stop arrive.
    state = State(phase=Phase.FINISHING)
    state, _ = handle(state, c.MessageStored("m2", 2))
    state, effects = handle(state, c.Stop(BOB))
    assert effects == [], "not 'nothing runs': a turn is on its way"
    state, effects = handle(state, c.TurnEnded(True))
    assert state.phase is Phase.READING
    state, effects = handle(state, c.InboxChecked(True))
    assert state.phase is Phase.TAKING
    state, effects = _turn_ran(state)
    assert effects == [e.Answer(tp.GO), e.Interrupt("Bob (@bob:test)")]
    assert state.stop_by is None


@pytest.mark.parametrize("phase", [Phase.PREPARING, Phase.CHECKING, Phase.QUEUED, Phase.STARTING])
def test_a_stop_while_agy_starts_for_a_message_stops_its_turn(phase: Phase) -> None:
    state, effects = handle(State(phase=phase), c.Stop(BOB))
    assert effects == [] and state.stop_by == "Bob (@bob:test)"
    state, _ = handle(_set_phase(state, Phase.STARTING), c.ProcessReady())
    assert state.phase is Phase.TAKING
    _, effects = _turn_ran(state)
    assert e.Interrupt("Bob (@bob:test)") in effects


def test_a_stop_waiting_for_a_turn_that_never_comes_is_told_nothing_runs_once() -> None:
    # The new actor finds the inbox empty after all: it goes, and says so once.
    state, _ = handle(State(phase=Phase.CHECKING), c.Stop(BOB))
    state, effects = handle(state, c.InboxChecked(False))
    assert effects == [e.Say(NOTHING_RUNNING), e.Exit()]
    # The turn took nothing: idle, told once; a second Stop is answered on its own.
    state, _ = handle(State(phase=Phase.TAKING), c.Stop(BOB))
    state, effects = handle(state, c.TurnEnded(False))
    assert state.phase is Phase.IDLE and effects.count(e.Say(NOTHING_RUNNING)) == 1
    assert handle(state, c.Stop(BOB))[1] == [e.Say(NOTHING_RUNNING)]
    # The bridge's own stop (a shutdown) is nobody's question: nothing is said.
    state, _ = handle(State(phase=Phase.TAKING), c.Shutdown())
    _, effects = handle(state, c.TurnEnded(False))
    assert e.Say(NOTHING_RUNNING) not in effects


def _set_phase(state: State, phase: Phase) -> State:
    return State(**{**state.__dict__, "phase": phase})

"""The turn policy: may these messages start a turn, or join someone else's running turn?

The thread's state machine (:mod:`bridge.core.thread.machine`) asks the policy at two moments,
and nowhere else is the question asked:

- **a turn**: the turn has taken its messages from the inbox and nothing has reached agy yet
  (``TurnBegan(ask)``, ``ask.kind == "turn"``);
- **an injection**: agy's ``PreInvocation`` hook took messages of which at least one was
  written by someone other than whoever asked for the running turn (``InjectAsked(ask)``,
  ``ask.kind == "inject"``). A person's own follow-up is not asked about.

The policy is pure: it gets an :class:`Ask` (who wrote the messages, where, the thread's
usage so far, whose turn runs) and answers a :class:`Verdict` at once, with no I/O and no
await (it runs inside ``handle``). What it needs beyond the ask (a budget's limits, a
person's spend read at start) it holds itself; when those inputs change (a budget is raised,
a new day begins) tell the thread ``c.PolicyChanged()`` and held messages are asked about
again.

The machine acts on the answer:

- :class:`Go`: the turn runs (the messages are injected) as before.
- :class:`Refuse`: the messages fail (❌), the thread is told ``reason``, agy reads nothing
  of them; the thread takes the next message as usual.
- :class:`Hold`: the messages go back to the inbox and wait, the thread is told ``reason``.
  A held turn is asked about again when a new message comes or ``PolicyChanged`` is told (an
  idle thread does not loop on them, and its actor may end while they wait). A held
  injection waits for the thread's next turn, where the turn is asked about.

Plugging a policy in: write a class with ``judge(ask) -> Verdict`` and add it to
:func:`policy_for` (several are chained: the first answer that is not ``Go`` wins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from bridge.core.events import Author, ThreadRef
from bridge.core.store.rows import Usage

if TYPE_CHECKING:
    from bridge.config import Config


@dataclass(frozen=True, slots=True)
class Ask:
    """What the policy is asked about."""

    kind: Literal["turn", "inject"]
    # The authors of the messages, in order (an injection: only those who are not ``turn_by``).
    who: tuple[Author, ...]
    where: ThreadRef
    # The thread's conversation so far, as agy last reported it (None: no turn yet).
    usage: Usage | None = None
    # Who asked for the running turn (an injection), or for this one (a turn: the last author).
    turn_by: Author | None = None


@dataclass(frozen=True, slots=True)
class Go:
    pass


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


@dataclass(frozen=True, slots=True)
class Hold:
    reason: str


Verdict = Go | Refuse | Hold
GO = Go()


@runtime_checkable
class TurnPolicy(Protocol):
    def judge(self, ask: Ask) -> Verdict:
        """Pure and quick: called inside the state machine's transition."""
        ...


class Open:
    """Every turn and every injection goes (the bridge's behaviour with no limits set)."""

    def judge(self, ask: Ask) -> Verdict:
        return GO


OPEN = Open()


@dataclass(frozen=True)
class Chain:
    """Several policies: the first answer that is not :class:`Go` wins."""

    policies: tuple[TurnPolicy, ...]

    def judge(self, ask: Ask) -> Verdict:
        for policy in self.policies:
            verdict = policy.judge(ask)
            if not isinstance(verdict, Go):
                return verdict
        return GO


def policy_for(config: Config) -> TurnPolicy:
    """The bridge's turn policy, from its configuration: the one place policies are plugged in.

    The approvals' ``mode`` decides tool calls, not turns (its gate answers ``PreToolUse``), so
    it adds no policy here: with every approvals mode every turn goes, as before this seam.
    """
    policies: tuple[TurnPolicy, ...] = ()
    if not policies:
        return OPEN
    return Chain(policies)

"""Everything that can happen to a thread, as frozen values.

Two kinds: what people and other instances ask (a message stored, Stop, a new conversation, a
model switch, an approval answer, a lost lease, a drain), and what the thread's own work reports
back (agy ready, a turn begun or ended, an idle spell over). The people's commands travel
between instances too (:mod:`bridge.core.thread.wire`), so a Stop forwarded from another
instance is the same object as a local one by the time a thread sees it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from bridge.core.events import ApprovalChoice, Author
from bridge.core.thread.turn_policy import Ask

# --- asked of a thread (local or forwarded) -----------------------------------------------------


@dataclass(frozen=True)
class MessageStored:
    """A message joined the thread's inbox (``message_id`` None: told by another instance,
    which stored it)."""

    message_id: str | None = None
    row_id: int | None = None
    attachments: bool = False
    kind: Literal["stored"] = "stored"


@dataclass(frozen=True)
class Stop:
    """!stop, a Stop button, a 🛑 reaction: interrupt the running turn."""

    by: Author
    kind: Literal["stop"] = "stop"


@dataclass(frozen=True)
class NewConversation:
    """!new: the store already forgot the conversation; end the turn and restart agy."""

    by: Author
    kind: Literal["new"] = "new"


@dataclass(frozen=True)
class SetModel:
    """!model <id>: the store holds the new model; agy restarts with it when idle."""

    model: str
    by: Author
    kind: Literal["model"] = "model"


@dataclass(frozen=True)
class Decide:
    """An answer to an approval request (``handle`` None: whichever waits now)."""

    handle: str | None
    choice: ApprovalChoice
    by: Author
    reason: str = ""
    # When the person sent it, by the chat's clock (a typed answer; None when the platform
    # gives no time): a bare answer sent before a request was shown must not decide it.
    sent_at: datetime | None = None
    kind: Literal["decide"] = "decide"


@dataclass(frozen=True)
class ForgetAllowList:
    """!approvals reset: the stored allow list is gone; the gate reads it again."""

    kind: Literal["forget_allow_list"] = "forget_allow_list"


# The commands that travel between instances.
Forwarded = MessageStored | Stop | NewConversation | SetModel | Decide | ForgetAllowList


@dataclass(frozen=True)
class Restart:
    """Restart agy when idle (same conversation): a test's or an operator's wish."""


@dataclass(frozen=True)
class Drain:
    """This instance drains: finish the running turn, start no other."""


@dataclass(frozen=True)
class Shutdown:
    """The bridge stops: start nothing new, and interrupt the running turn."""


@dataclass(frozen=True)
class EndLease:
    """A drain hands the thread over: stop now (as a lost lease, but expected)."""


@dataclass(frozen=True)
class LeaseLost:
    """Another instance took the thread: stop at once."""


# --- reported by the thread's own work ----------------------------------------------------------


@dataclass(frozen=True)
class Begin:
    """The actor's task started."""


@dataclass(frozen=True)
class Prepared:
    """Directories, gate and agy session are ready."""


@dataclass(frozen=True)
class Failed:
    """The thread cannot go on (its directories, an internal error): fail what waits."""

    reason: str


@dataclass(frozen=True)
class InboxChecked:
    pending: bool


@dataclass(frozen=True)
class SlotGranted:
    pass


@dataclass(frozen=True)
class Evicted:
    """Another thread needs this one's process slot."""


@dataclass(frozen=True)
class ProcessReady:
    pass


@dataclass(frozen=True)
class StartFailed:
    """agy did not start. ``conversation_unknown``: it no longer knows the conversation it was
    to resume (worth one retry with a fresh one)."""

    conversation_unknown: bool


@dataclass(frozen=True)
class ProcessClosed:
    pass


@dataclass(frozen=True)
class TurnBegan:
    """The turn took its messages: the turn policy is asked about ``ask``, and on ``Go`` the
    turn runs (a Stop now interrupts it); the answer goes back as ``effects.Answer``."""

    ask: Ask


@dataclass(frozen=True)
class InjectAsked:
    """agy's hook took messages of someone other than the running turn's requester: may they
    join it? Answered with ``effects.Answer``."""

    ask: Ask


@dataclass(frozen=True)
class PolicyChanged:
    """What the turn policy reads changed (a budget raised): ask again about held messages."""


@dataclass(frozen=True)
class TurnFinishing:
    """The turn's end is known: its answer is being posted and recorded (nothing runs to
    interrupt any more, and hook calls take nothing into it)."""


class After(enum.Enum):
    """What became of agy with the turn that just ended."""

    CARRIES_ON = "carries_on"  # alive, ready for the next turn
    GONE = "gone"  # exited (or was gone before the turn could run)
    RESTART = "restart"  # exited after an interrupt: carry on with a new process
    WEDGED = "wedged"  # ignored an interrupt: close it (its process group ends)


@dataclass(frozen=True)
class TurnEnded:
    """``taken``: the turn had messages (False: the inbox was empty after all)."""

    taken: bool
    after: After = After.CARRIES_ON


@dataclass(frozen=True)
class IdleTimeout:
    spell: int  # which idle spell (a late timer of an earlier spell changes nothing)


@dataclass(frozen=True)
class NoRequestWaited:
    """A Stop came to deny a waiting request, but it had been answered meanwhile: stop the
    turn as a Stop does."""

    by: str


@dataclass(frozen=True)
class StopHandedOn:
    """A Stop that came as the thread's last actor was leaving with a message just stored:
    the successor stops the turn it runs for that message."""

    by: str


@dataclass(frozen=True)
class Asking:
    """An approval request waits (True) or was settled (False)."""

    waiting: bool


@dataclass(frozen=True)
class HooksBypassed:
    """agy ran a tool call the gate never decided (or ran no hook): it was stopped; no new
    turn starts in this thread until an agy that runs the hooks is back."""


Command = (
    MessageStored
    | Stop
    | NewConversation
    | SetModel
    | Decide
    | ForgetAllowList
    | Restart
    | Drain
    | Shutdown
    | EndLease
    | LeaseLost
    | Begin
    | Prepared
    | Failed
    | InboxChecked
    | SlotGranted
    | Evicted
    | ProcessReady
    | StartFailed
    | ProcessClosed
    | TurnBegan
    | InjectAsked
    | PolicyChanged
    | TurnFinishing
    | TurnEnded
    | IdleTimeout
    | NoRequestWaited
    | StopHandedOn
    | Asking
    | HooksBypassed
)

"""What the thread's state machine asks its actor to do: values, carried out in order."""

from __future__ import annotations

from dataclasses import dataclass

from bridge.core.thread.turn_policy import Verdict


@dataclass(frozen=True)
class Prepare:
    """Directories, approval gate, agy session (and a takeover's report)."""


@dataclass(frozen=True)
class CheckInbox:
    """Read whether messages wait: answered with ``InboxChecked``."""


@dataclass(frozen=True)
class AcquireSlot:
    """Hold one of the bridge's process slots (maybe waiting in line): ``SlotGranted``."""


@dataclass(frozen=True)
class ReleaseSlot:
    pass


@dataclass(frozen=True)
class StartProcess:
    """Start agy on the thread's conversation: ``ProcessReady`` or ``StartFailed``."""


@dataclass(frozen=True)
class DropConversation:
    """agy forgot the conversation: forget its id, and give the next turn the history."""


@dataclass(frozen=True)
class ReportStartFailure:
    """Tell the thread why agy did not start; the waiting messages fail."""


@dataclass(frozen=True)
class CloseProcess:
    """Let agy go (its process group ends): ``ProcessClosed``."""


@dataclass(frozen=True)
class RunTurn:
    """Take everything pending as one turn: ``TurnBegan``, then ``TurnEnded``."""


@dataclass(frozen=True)
class Answer:
    """The turn policy's verdict on what was just asked (``TurnBegan``, ``InjectAsked``), for
    the turn that waits on it: go, refuse (the messages fail) or hold (they wait)."""

    verdict: Verdict


@dataclass(frozen=True)
class FlagHook:
    """Tell agy's hook that a message waits, so its next model call takes it."""


@dataclass(frozen=True)
class MarkQueued:
    """A message waits for the running turn (📥), and is counted as queued."""

    message_id: str


@dataclass(frozen=True)
class FetchAttachments:
    """Save a waiting message's files now, so the hook can hand it to the running turn."""

    row_id: int


@dataclass(frozen=True)
class Interrupt:
    """SIGINT the running turn (the machine asks only while one runs)."""

    by: str


@dataclass(frozen=True)
class DenyAndInterrupt:
    """A request waits: deny it, with the turn interrupted before agy reads the deny (none
    waits by then, answered meanwhile: ``NoRequestWaited``)."""

    by: str


@dataclass(frozen=True)
class Say:
    text: str


@dataclass(frozen=True)
class SetIdle:
    """Whether the slot's holder is idle (an idle one may be asked to let go)."""

    idle: bool


@dataclass(frozen=True)
class StartIdleTimer:
    spell: int


@dataclass(frozen=True)
class StopIdleTimer:
    pass


@dataclass(frozen=True)
class ForgetAllowList:
    pass


@dataclass(frozen=True)
class FailPending:
    reason: str


@dataclass(frozen=True)
class CancelWork:
    """End the slot, the process and the turn now (the lease is gone)."""

    lost: bool


@dataclass(frozen=True)
class Exit:
    """The actor's last effect."""


# Carried out the moment they are decided, by whoever told the actor (no I/O, no wait): the
# hook's flag must be up before ``submit`` returns, an interrupt must not queue behind a post.
Immediate = (
    Answer
    | FlagHook
    | MarkQueued
    | Interrupt
    | SetIdle
    | RunTurn
    | StartIdleTimer
    | StopIdleTimer
    | ForgetAllowList
    | CancelWork
)

# Carried out in order by the actor's task (they wait on I/O).
Queued = (
    Prepare
    | CheckInbox
    | AcquireSlot
    | ReleaseSlot
    | StartProcess
    | DropConversation
    | ReportStartFailure
    | CloseProcess
    | FetchAttachments
    | DenyAndInterrupt
    | Say
    | FailPending
    | Exit
)

Effect = Immediate | Queued

"""What one sync event is for the bot, decided without I/O (the sync worker then acts on it).

The kinds, in the order they are told apart: the bot's own (ignore), a room upgrade, a person
verifying the bot, a message the bot cannot decrypt yet, an answer to an approval request (✅
♾️ ❌), a Stop (🛑), a message for the agent (submit) or one from someone not allowed (refuse),
and anything else (ignore). Whether a sender is allowed is the access rule's answer, given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nio import MatrixRoom, MegolmEvent, RoomUpgradeEvent
from nio.events import Event

from bridge.core.events import ApprovalChoice, IncomingMessage

from .approvals import approval_answer
from .events import stop_target, to_incoming


@dataclass(frozen=True)
class Ignore:
    pass


@dataclass(frozen=True)
class Upgrade:
    """A tombstone: the room carries on in another one."""


@dataclass(frozen=True)
class Verify:
    """A person verifying the bot (acted on only when ``allowed``)."""

    allowed: bool


@dataclass(frozen=True)
class Undecryptable:
    """Encrypted with a key the bot does not have (yet)."""

    allowed: bool


@dataclass(frozen=True)
class Answer:
    """A reaction answering the approval request ``target``."""

    target: str
    choice: ApprovalChoice
    allowed: bool


@dataclass(frozen=True)
class Stop:
    """A 🛑 on ``target`` (a message of the turn to stop)."""

    target: str
    allowed: bool


@dataclass(frozen=True)
class Submit:
    message: IncomingMessage


@dataclass(frozen=True)
class Refuse:
    """A message from someone the access rule does not serve."""

    message: IncomingMessage


Action = Ignore | Upgrade | Verify | Undecryptable | Answer | Stop | Submit | Refuse
# What reaches the core only if the sender's device is trusted (the trust gate decides, async).
Gated = Answer | Stop | Submit


def classify(
    room: MatrixRoom,
    event: Event,
    *,
    own_id: str,
    allowed: bool,
    threads: bool,
    upgrades: bool,
    verification: Callable[[Event], bool],
) -> Action:
    if event.sender == own_id:
        return Ignore()
    if isinstance(event, RoomUpgradeEvent) and upgrades:
        return Upgrade()
    if verification(event):
        return Verify(allowed)
    if isinstance(event, MegolmEvent):
        return Undecryptable(allowed)
    answer = approval_answer(event)
    if answer is not None:
        return Answer(answer[0], answer[1], allowed)
    target = stop_target(event)
    if target is not None:
        return Stop(target, allowed)
    message = to_incoming(event, room, threads=threads)
    if message is None:
        return Ignore()
    return Submit(message) if allowed else Refuse(message)

"""What a thread's agent is told when its conversation goes on after a cut-off, or must start
anew: after a crash of the bridge, a takeover by another instance, or agy refusing the id.

A request whose turn was cut off (the bridge stopped, restarted, or the instance running the
thread was lost) was reported to the thread as interrupted: it must not run again unless a
person sends it again (``!retry``). So:

- a conversation that goes on (``--conversation``) gets, ahead of the next messages, a note
  that its last turn was cut off and is not to be continued or redone;
- a new conversation gets the thread's history as context: answered requests apart from
  those that were not, each cut-off request marked interrupted and not to be redone, and an
  explicit statement that only the messages after it are new requests.

Both are text blocks of their own, wrapped in one marker (:data:`OPEN`/:data:`CLOSE`) that
agy's model, and the project's simulator, read as context rather than as a request. Each block ends
with the statement that only the messages after it are new requests. A cut-off request is
only ever inside such a block.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bridge.core.store.rows import HistoryItem, MessageState, TurnRow, TurnState

OPEN = "<thread-history>"
CLOSE = "</thread-history>"
# The block's last line: where the requests begin.
ONLY_AFTER = "Only the messages after this history are new requests."
# The most of a thread's history a new conversation's first turn carries.
HISTORY_LIMIT = 50

# How recovery records a turn it cut off (recovery.py) and how a shutdown does (outcome.py).
RESTARTED = "the bridge restarted during this turn"
_CUT_OFF = re.compile(r"^(the bridge (restarted|stopped)|instance \S+ stopped) during this turn")

HANDOVER_NOTICE = (
    "ℹ️ This thread moved to bridge instance `{name}`, which cannot reach the agent's earlier "
    "conversation (it was kept by `{previous}`). The agent starts a new conversation and is "
    "given this thread's history as context."
)

RESUME_NOTE = (
    f"{OPEN}\n"
    "Note from the chat bridge, not a request: your previous turn in this conversation was cut "
    "off (the bridge stopped while you worked on it) and its answer was lost. The person was "
    "told it was interrupted. Do not continue or redo that request: they will send it again "
    "if they still want it.\n"
    f"{ONLY_AFTER}\n"
    f"{CLOSE}"
)


def instance_stopped(name: str) -> str:
    """The error recorded for a turn whose instance was lost (a takeover)."""
    return f"instance {name} stopped during this turn"


def is_cut_off(state: str | None, error: str | None) -> bool:
    """A turn the bridge cut off (not one a person stopped, not one agy ended in error)."""
    if state == TurnState.RUNNING:
        return True  # left running by a lost instance, not yet reported
    return state == TurnState.INTERRUPTED and bool(error) and bool(_CUT_OFF.match(error or ""))


def turn_was_cut_off(turn: TurnRow | None) -> bool:
    return turn is not None and is_cut_off(turn.state, turn.error)


def _quoted(text: str) -> str:
    """A message as history: one line's worth of text that cannot close the block early."""
    return re.sub(r"<(/?)thread-history", r"‹\1thread-history", text, flags=re.IGNORECASE)


def _label(item: HistoryItem) -> str:
    if item.kind == "answer":
        return "answer"
    if item.kind == MessageState.FAILED:
        return "not answered: the agent could not take it"
    if is_cut_off(item.turn_state, item.turn_error):
        return "INTERRUPTED, not to be redone: cut off when the bridge stopped; the person was told"
    if item.turn_state == TurnState.INTERRUPTED:
        return "not answered: stopped by a person"
    if item.turn_state == TurnState.ERROR:
        return "not answered: the turn failed"
    return "answered"


def history_block(items: Sequence[HistoryItem]) -> list[str]:
    """The thread's history as one block for a new conversation's first turn (none if empty)."""
    if not items:
        return []
    lines = [
        f"{OPEN}",
        "This chat thread was handled by an earlier conversation you cannot see. Its history "
        "so far, oldest first, is context only: nothing in it is a request to you now.",
    ]
    cut = 0
    for item in items:
        label = _label(item)
        cut += label.startswith("INTERRUPTED")
        lines.append(f"[{label}] {item.who}: {_quoted(item.text)}")
    if cut:
        lines.append(
            f"{cut} request(s) above are marked INTERRUPTED: their turn was cut off and the "
            "person was told so. Do not carry them out, continue or redo them; a person who "
            "still wants one sends it again after this history."
        )
    lines += [ONLY_AFTER, CLOSE]
    return ["\n".join(lines)]


def resume_note(last: TurnRow | None, conversation: str | None) -> list[str]:
    """For a conversation that goes on: the note, when its last turn was cut off."""
    if conversation is None or not turn_was_cut_off(last):
        return []
    assert last is not None
    if last.conversation_id not in (None, conversation):
        return []  # cut off in another conversation (this one never saw that request)
    return [RESUME_NOTE]

"""Which tool steps of agy's stream the gate decided: a step no ``PreToolUse`` call announced
means agy ran a tool without the bridge's hook.

The evidence (the recorded streams and the hook's input, DESIGN.md):

- a tool call is a ``step_update`` whose ``step_type`` is ``tool``; it goes ``ACTIVE`` when agy
  announces it (before its ``PreToolUse`` hooks run: a failing hook turns that same step
  ``ERROR``), then ``DONE`` or ``ERROR``. The hook's ``stepIdx`` is the step's
  ``step_index``. Step indices carry on across turns and resumed processes.
- ``run_command``, ``list_dir``, ``find_by_name`` and ``call_mcp_tool`` were each seen refused by
  a failing ``PreToolUse`` hook (agy 1.1.24), and ``write_to_file`` is matched by its name in
  a live-measured hook set (agy 1.1.2). Only these are judged here: a tool kind no evidence
  shows passing through ``PreToolUse`` (``view_file``, an ``invoke_subagent`` step, whose
  ``step_type`` is ``subagent``) could be one agy never asks about, and stopping agy for it
  would stop ordinary turns.
- a step of another conversation (a subagent's) is not the session's, and neither is a hook
  call under another ``conversationId``: they are left out on both sides.
- a step ending ``ERROR`` with no hook call did not run (agy's own checks, such as a missing
  file's ``invalid_args``, refuse before any hook): it proves nothing.

Matching is by index first. Should a build number ``stepIdx`` differently, a hook call of the
same tool that no step took yet stands for it, so that a build that does ask is never taken
for one that does not; a build that runs no ``PreToolUse`` at all leaves every step unmatched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from bridge.agy import wire

GATED_TOOLS = frozenset(
    {"run_command", "list_dir", "find_by_name", "call_mcp_tool", "write_to_file"}
)


class Seen(enum.Enum):
    FINE = "fine"  # decided, or not a step the gate is asked about
    WAIT = "wait"  # announced and not decided yet: its hook call may still be on its way
    BYPASSED = "bypassed"  # it ran, and no hook call decided it


@dataclass(frozen=True)
class ToolStep:
    index: int
    name: str
    state: str


def gated_step(step: wire.StepUpdate, conversation_id: str) -> ToolStep | None:
    """The step as the gate sees it, or None when it is not a tool call the gate must decide."""
    if step.step_type != "tool":
        return None
    if step.conversation_id and conversation_id and step.conversation_id != conversation_id:
        return None
    info = step.tool_info
    name = step.tool_name or (info.name if info is not None else None) or ""
    if name not in GATED_TOOLS or step.step_index < 0:
        return None
    return ToolStep(step.step_index, name, step.state)


class StepLedger:
    """The hook calls of one agy process, matched to the tool steps of its stream."""

    def __init__(self) -> None:
        self._calls: list[tuple[int | None, str]] = []  # (stepIdx, tool) no step took yet
        self._matched: set[int] = set()
        self._ended: set[int] = set()  # steps seen DONE or ERROR
        self.bypassed: ToolStep | None = None

    def decided(self, name: str, step_idx: int | None) -> None:
        """A ``PreToolUse`` call of this process's conversation reached the gate."""
        if name in GATED_TOOLS:  # the others' steps are not judged: nothing would take them
            self._calls.append((step_idx, name))

    def seen(self, step: ToolStep) -> Seen:
        if step.state != "ACTIVE":
            self._ended.add(step.index)
        if step.index in self._matched or self._take(step):
            return Seen.FINE
        if step.state == "ACTIVE":
            return Seen.WAIT
        if step.state == "DONE":
            self.bypassed = step
            return Seen.BYPASSED
        return Seen.FINE  # ERROR: refused before any hook; nothing ran

    def undecided(self, step: ToolStep) -> bool:
        """Whether ``step`` (seen ACTIVE) still has no hook call and has not ended (a step
        that ended was judged then)."""
        if step.index in self._ended:
            return False
        return step.index not in self._matched and not self._take(step)

    def _take(self, step: ToolStep) -> bool:
        exact = (step.index, step.name)
        if exact in self._calls:
            self._calls.remove(exact)
        else:
            other = next((call for call in self._calls if call[1] == step.name), None)
            if other is None:
                return False
            self._calls.remove(other)
        self._matched.add(step.index)
        return True

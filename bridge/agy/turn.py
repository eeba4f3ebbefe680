"""One turn read from agy's stream, with no I/O (in the manner of h11: events in, events out).

:class:`TurnReader` is fed the parsed events of one turn (:mod:`bridge.agy.wire`) and answers
with small frozen values the core acts on: :class:`TextDelta` for answer text,
:class:`ToolUpdate` for a tool call with its one-line summary, and one :class:`TurnEnd` that
says how the turn ended. Everything agy-specific about a turn lives here: which steps belong to
a subagent, which words mean "interrupted", which tool parameters make a good summary, where the
final text comes from, and how long agy takes to go away after an error or a SIGINT.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from bridge.agy import wire
from bridge.agy.process import AgyOutput, ProcessExit

# agy answers SIGINT with a result whose error is one of these (``context canceled`` on 1.1.18
# in stdin mode); they mean "stopped", not "failed".
INTERRUPT_WORDS = frozenset({"interrupted", "context canceled"})
# The sentence agy gives the model when a PreToolUse hook refuses a call.
HOOK_DENIAL_MARK = "denied by pre-tool hook"
# Parameters that make a good one-line summary of a tool call, best first.
_SUMMARY_KEYS = ("CommandLine", "AbsolutePath", "TargetFile", "DirectoryPath", "Pattern", "Url")
_SUMMARY_LIMIT = 120
# Paths keep their end when cut (the file's own name says most).
_PATH_KEYS = frozenset({"AbsolutePath", "TargetFile", "DirectoryPath"})

# After an ERROR result agy is often on its way out (quota and login errors end the process).
ERROR_EXIT_WAIT = 1.0
# How long agy may take to answer SIGINT and exit before its process group is ended.
INTERRUPT_GRACE = 15.0


class TurnStatus(StrEnum):
    DONE = "done"  # a SUCCESS result
    ERROR = "error"  # an ERROR result, in agy's words
    INTERRUPTED = "interrupted"  # stopped by SIGINT (ours), agy said so or exited on it
    EXITED = "exited"  # agy's process ended with no result


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolUpdate:
    name: str
    summary: str  # one line: the command, the file, the server/tool
    state: str  # ACTIVE, DONE or ERROR
    error: str | None = None
    # agy refused the call (its permission check, or a PreToolUse hook's deny).
    denied: bool = False


@dataclass(frozen=True, slots=True)
class TurnEnd:
    status: TurnStatus
    final_text: str
    # agy's own words when the turn failed, or how the process ended; never an interrupt word.
    error: str | None = None
    usage: wire.Usage | None = None
    denied: tuple[str, ...] = ()

    @property
    def exit_wait(self) -> float:
        """How long to wait for agy to exit after this end before the next turn (0: it stays)."""
        if self.status is TurnStatus.INTERRUPTED:
            return INTERRUPT_GRACE
        if self.status is TurnStatus.ERROR:
            return ERROR_EXIT_WAIT
        return 0.0


TurnEvent = TextDelta | ToolUpdate | TurnEnd


def tool_summary(info: wire.ToolInfo | None) -> str:
    params = info.parameters if info is not None and info.parameters else {}
    for key in _SUMMARY_KEYS:
        value = params.get(key)
        if isinstance(value, str) and value:
            if len(value) <= _SUMMARY_LIMIT:
                return value
            if key in _PATH_KEYS:
                return "…" + value[-(_SUMMARY_LIMIT - 1) :]
            return value[: _SUMMARY_LIMIT - 1] + "…"
    if "ToolName" in params:
        return f"{params.get('ServerName', '?')}/{params['ToolName']}"
    return ""


def is_denial(step: wire.StepUpdate) -> bool:
    if step.is_permission_denial:
        return True
    info = step.tool_info
    return bool(
        step.state == "ERROR"
        and info is not None
        and info.error is not None
        and HOOK_DENIAL_MARK in (info.error.message or "").lower()
    )


class TurnReader:
    """Reads one turn of one agy conversation. Feed it events; it never blocks or writes."""

    def __init__(self, conversation_id: str | None) -> None:
        self._conversation = conversation_id
        self._streamed: list[str] = []
        self._denied: list[str] = []
        self._interrupt_sent = False
        self.ended: TurnEnd | None = None
        # agy printed something for this turn (at least its user_input step): it read the turn.
        self.acknowledged = False

    @property
    def streamed(self) -> str:
        return "".join(self._streamed)

    def interrupt_sent(self) -> None:
        """We sent SIGINT: an ERROR result or an exit now means "interrupted"."""
        self._interrupt_sent = True

    def feed(self, event: AgyOutput) -> TurnEvent | None:
        """The next thing agy's process said (an event, or that it exited)."""
        if self.ended is not None:
            return None
        if isinstance(event, wire.StepUpdateEvent):
            found = self._step(event.step_update)
            return TextDelta(found) if isinstance(found, str) else found
        return self._other(event)

    def read(self, outputs: Iterable[AgyOutput]) -> list[TurnEvent]:
        """What several things agy said together mean, in order, with the text deltas in a row
        as one :class:`TextDelta` (their texts joined): a batch of a hundred deltas is one
        event, not a hundred. Nothing after the turn's end counts, as with :meth:`feed`."""
        events: list[TurnEvent] = []
        text: list[str] = []
        found: TurnEvent | None
        for out in outputs:
            if self.ended is not None:
                break
            if isinstance(out, wire.StepUpdateEvent):
                step = self._step(out.step_update)
                if isinstance(step, str):
                    text.append(step)
                    continue
                found = step
            else:
                found = self._other(out)
            if found is not None:
                if text:
                    events.append(TextDelta("".join(text)))
                    text = []
                events.append(found)
        if text:
            events.append(TextDelta("".join(text)))
        return events

    def _other(self, event: AgyOutput) -> TurnEvent | None:
        if isinstance(event, ProcessExit):
            return self.exited(event.describe())
        if isinstance(event, wire.ResultEvent):
            self.acknowledged = True
            return self._end(self._result(event.result))
        return None  # init again after a resume, unknown events: nothing for the turn

    def exited(self, how: str) -> TurnEnd:
        """agy's process ended before this turn's result; ``how`` describes the exit."""
        if self.ended is not None:
            return self.ended
        if self._interrupt_sent:
            return self._end(TurnEnd(TurnStatus.INTERRUPTED, self.streamed))
        return self._end(
            TurnEnd(TurnStatus.EXITED, self.streamed, error=f"agy stopped unexpectedly ({how})")
        )

    def _end(self, end: TurnEnd) -> TurnEnd:
        self.ended = end
        return end

    def _step(self, step: wire.StepUpdate) -> str | ToolUpdate | None:
        """A step's answer text (a plain string: the caller wraps or joins it), its tool
        update, or None."""
        self.acknowledged = True
        if (
            step.conversation_id
            and self._conversation
            and step.conversation_id != self._conversation
        ):
            return None  # a subagent's step: its work shows in the parent's own steps
        if step.step_type == "agent_response":
            if step.text_delta:
                self._streamed.append(step.text_delta)
                return step.text_delta
            return None
        if step.step_type == "tool" or step.tool_name:
            info = step.tool_info
            name = step.tool_name or (info.name if info is not None else None) or "tool"
            error = info.error.message if info is not None and info.error is not None else None
            denied = is_denial(step)
            if denied and name not in self._denied:
                self._denied.append(name)
            return ToolUpdate(
                name=name, summary=tool_summary(info), state=step.state, error=error, denied=denied
            )
        return None

    def _result(self, result: wire.ResultInfo) -> TurnEnd:
        actions = result.denied_actions or []
        denied = tuple(a.display_name or a.action for a in actions) or tuple(self._denied)
        final = result.response or self.streamed
        if result.ok:
            return TurnEnd(TurnStatus.DONE, final, usage=result.usage, denied=denied)
        error = (result.error or "").strip()
        if self._interrupt_sent or error.lower() in INTERRUPT_WORDS:
            return TurnEnd(TurnStatus.INTERRUPTED, final, usage=result.usage, denied=denied)
        return TurnEnd(
            TurnStatus.ERROR,
            final,
            error=error or "agy reported an error without a message",
            usage=result.usage,
            denied=denied,
        )

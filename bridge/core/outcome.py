"""How a turn ended, as the thread sees it: one classification, one renderer for every adapter.

The agy layer says how agy ended the turn (:class:`bridge.agy.turn.TurnEnd`); this module adds
what the bridge knows (who pressed Stop, our own deadline) and decides what the thread is told
and what the store records. Adapters render :class:`TurnOutcome` with :func:`render_outcome`,
so "interrupted" and agy's error words are judged in one place only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bridge.agy.turn import TurnEnd, TurnStatus
from bridge.core.events import TurnOutcome
from bridge.core.store_model import TurnState

_STATES = {
    TurnStatus.DONE: TurnState.DONE,
    TurnStatus.ERROR: TurnState.ERROR,
    TurnStatus.INTERRUPTED: TurnState.INTERRUPTED,
    TurnStatus.EXITED: TurnState.ERROR,
}


@dataclass(frozen=True, slots=True)
class Classified:
    outcome: TurnOutcome
    state: TurnState


def classify(
    end: TurnEnd,
    *,
    scrub: Callable[[str], str],
    stopped_by: str | None = None,
    deadline_minutes: float | None = None,
) -> Classified:
    """The thread's view of ``end``. ``deadline_minutes``: our own turn_timeout stopped it."""
    final = scrub(end.final_text)
    denied = list(end.denied)
    if deadline_minutes is not None:
        error = f"the turn ran longer than {deadline_minutes:g} minutes and was stopped"
        return Classified(
            TurnOutcome(final_text=final, error=error, interrupted=True, denied=denied),
            TurnState.INTERRUPTED,
        )
    if end.status is TurnStatus.INTERRUPTED:
        notes = [f"Stopped by {stopped_by}."] if stopped_by else []
        return Classified(
            TurnOutcome(final_text=final, interrupted=True, denied=denied, notes=notes),
            TurnState.INTERRUPTED,
        )
    return Classified(
        TurnOutcome(final_text=final, error=scrub(end.error) if end.error else None, denied=denied),
        _STATES[end.status],
    )


def stopped_by_shutdown() -> Classified:
    return Classified(
        TurnOutcome(
            error="the bridge stopped during this turn; send the message again later",
            interrupted=True,
        ),
        TurnState.INTERRUPTED,
    )


def render_outcome(outcome: TurnOutcome, streamed: str) -> str:
    """The whole final reply in Markdown: the answer, then interruption, error, denials, notes.

    ``streamed`` is what the reply showed so far; it stands in when agy's result has no text.
    """
    body = outcome.final_text.strip() or streamed.strip()
    parts = ([body] if body else []) + outcome_lines(outcome)
    return "\n\n".join(parts) if parts else "_(no answer)_"


def outcome_lines(outcome: TurnOutcome) -> list[str]:
    """What is said after the answer: interruption, agy's error, refused tools, notes."""
    lines: list[str] = []
    if outcome.interrupted:
        lines.append("⏹️ _Interrupted._")
    if outcome.error and outcome.error.strip():
        lines.append(f"⚠️ agy: {outcome.error.strip()}")
    if outcome.denied:
        lines.append("🚫 Not allowed: " + ", ".join(code_span(name) for name in outcome.denied))
    lines.extend(f"ℹ️ {note.strip()}" for note in outcome.notes if note.strip())
    return lines


def code_span(text: str) -> str:
    """``text`` as an inline code span, whatever backticks it holds."""
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"

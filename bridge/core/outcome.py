"""How a turn ended, as the thread sees it: one classification for every adapter.

The agy layer says how agy ended the turn (:class:`bridge.agy.turn.TurnEnd`); this module adds
what the bridge knows (who pressed Stop, our own deadline) and decides what the thread is told
and what the store records, so "interrupted" and agy's error words are judged in one place
only. Adapters word the resulting :class:`TurnOutcome` with ``bridge.chat.common.outcome``,
which needs no agy module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bridge.agy import wire
from bridge.agy.turn import TurnEnd, TurnStatus
from bridge.core.events import TurnOutcome
from bridge.core.store.rows import TurnState, Usage
from bridge.core.tokens import turn_delta

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


def summarised(
    result: Classified, files: list[str], usage_before: Usage | None, end: TurnEnd
) -> Classified:
    """``result`` with what the turn did: the files it wrote, and the tokens it used (agy's
    totals are the conversation's: the turn's share is :func:`bridge.core.tokens.turn_delta`
    from ``usage_before``, the conversation's total before it, as the usage ledger counts it)."""
    tokens = None
    usage = stored_usage(end.usage)
    if usage is not None and usage.total_tokens:
        tokens = turn_delta(usage, usage_before).total
    update = {"files_changed": list(files), "tokens": tokens}
    return Classified(result.outcome.model_copy(update=update), result.state)


def stored_usage(usage: wire.Usage | None) -> Usage | None:
    """agy's usage as the store keeps it."""
    if usage is None:
        return None
    return Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        thinking_tokens=usage.thinking_tokens,
        cache_read_tokens=usage.cache_read_tokens,
    )


def stopped_by_shutdown() -> Classified:
    return Classified(
        TurnOutcome(
            error="the bridge stopped during this turn; send the message again later",
            interrupted=True,
        ),
        TurnState.INTERRUPTED,
    )

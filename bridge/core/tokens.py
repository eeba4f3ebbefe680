"""A turn's own tokens, from agy's running totals: the one computation of them.

agy's ``result.usage`` is the conversation's total so far (earlier turns, earlier processes,
the conversation before a resume). A turn's own usage is the difference from the total at the
end of the conversation's turn before (:meth:`bridge.core.store.threads.Threads.thread` reads it
from the ``turns`` table); a count that went down (agy started counting again) is taken whole.
The summary under a turn's answer and the team's usage ledger (``bridge/core/team/usage.py``)
both use :func:`turn_delta`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.core.store.rows import Usage


@dataclass(frozen=True, slots=True)
class Tokens:
    input: int = 0
    output: int = 0
    thinking: int = 0
    cache_read: int = 0
    total: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input + other.input,
            self.output + other.output,
            self.thinking + other.thinking,
            self.cache_read + other.cache_read,
            self.total + other.total,
        )


def _tokens(usage: Usage) -> Tokens:
    total = usage.total_tokens or usage.input_tokens + usage.output_tokens
    return Tokens(
        usage.input_tokens,
        usage.output_tokens,
        usage.thinking_tokens,
        usage.cache_read_tokens,
        total,
    )


def turn_delta(current: Usage, previous: Usage | None) -> Tokens:
    """One turn's usage from the conversation's totals after it and after the turn before."""
    now = _tokens(current)
    if previous is None:
        return now
    before = _tokens(previous)
    parts = (now.input, now.output, now.thinking, now.cache_read, now.total)
    earlier = (before.input, before.output, before.thinking, before.cache_read, before.total)
    if any(a < b for a, b in zip(parts, earlier, strict=True)):
        return now  # agy counts afresh (a conversation it no longer knew): all of it is new
    return Tokens(*(a - b for a, b in zip(parts, earlier, strict=True)))

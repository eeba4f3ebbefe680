"""How every chat words the end of a turn: the answer, then what went wrong.

The core decides what happened (:class:`bridge.core.events.TurnOutcome`, classified once in
``bridge.core.outcome``); this module only words it, the same for every adapter, so
"interrupted" and agy's error words read alike in Slack, Matrix and the console. It lives with
the chats, not the core, because the core's classifier reads agy's turn ends and an adapter
must not load the agy layer to render a reply.
"""

from __future__ import annotations

from bridge.core.events import TurnOutcome


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

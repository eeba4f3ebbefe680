"""A compact summary under a turn's final answer: the files the turn changed and the tokens it
used, one ``context`` block (Block Kit) that rides on the answer's last ``chat.stopStream``
(``blocks``), or on its last message where the answer was posted rather than streamed.
"""

from __future__ import annotations

from typing import Any

from bridge.chat.slack.format import mrkdwn_escape, one_line
from bridge.core.events import TurnOutcome

# File names shown before "and N more".
SHOWN_FILES = 5
_NAME_LIMIT = 80
BLOCK_ID = "agy_bridge_summary"


def short_path(name: str, limit: int = _NAME_LIMIT) -> str:
    """A file's path on one line, at most ``limit`` characters: its last components kept
    (the file's own name says most), the start given as "…/"."""
    flat = one_line(name, 10 * limit)
    if len(flat) <= limit:
        return flat
    kept: list[str] = []
    for part in reversed(flat.split("/")):
        if kept and len("…/" + "/".join([part, *kept])) > limit:
            break
        kept.insert(0, part)
    tail = "/".join(kept)
    return "…/" + tail if len(tail) <= limit - 2 else "…" + tail[-(limit - 1) :]


def summary_text(outcome: TurnOutcome) -> str:
    """The summary's mrkdwn ("" when the turn changed no file and agy counted no tokens)."""
    parts: list[str] = []
    files = outcome.files_changed
    if files:
        names = [
            "`" + mrkdwn_escape(short_path(name).replace("`", "'")) + "`"
            for name in files[:SHOWN_FILES]
        ]
        more = len(files) - SHOWN_FILES
        if more > 0:
            names.append(f"and {more} more")
        label = "1 file changed" if len(files) == 1 else f"{len(files)} files changed"
        parts.append(f":pencil2: {label}: " + ", ".join(names))
    if outcome.tokens is not None:
        parts.append(f":abacus: {outcome.tokens:,} tokens this turn")
    return "  ·  ".join(parts)


def summary_block(outcome: TurnOutcome) -> dict[str, Any] | None:
    text = summary_text(outcome)
    if not text:
        return None
    return {
        "type": "context",
        "block_id": BLOCK_ID,
        "elements": [{"type": "mrkdwn", "text": text}],
    }

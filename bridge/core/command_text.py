"""A message that is a chat command: ``!word [argument]``. No slash: Slack does not allow slash
commands in threads.

Outside :mod:`bridge.core.commands` (whose package loads every command and, through them, the
core's turn machinery): a chat adapter tells a command from a message with :func:`is_command`
without loading any of that."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

PREFIX = "!"


@dataclass(frozen=True)
class Command:
    name: str  # a registered command's name, or "unknown"
    arg: str = ""
    word: str = ""


def parse(text: str, names: Collection[str]) -> Command | None:
    """A command when the message is ``!word [argument]``; None for an ordinary message.
    ``names``: the known commands (``bridge.core.commands.parse_command`` passes the
    registry's)."""
    stripped = text.strip()
    if not stripped.startswith(PREFIX) or len(stripped) < 2 or stripped[1].isspace():
        return None
    word, _, arg = stripped[1:].partition(" ")
    word = word.split("\n", 1)[0]
    if not word.replace("-", "").replace("_", "").isalnum():
        return None  # "!!!" or "!?" is punctuation, not a command
    name = word.lower()
    if name not in names:
        return Command("unknown", arg.strip(), word)
    return Command(name, arg.strip(), word)


def is_command(text: str) -> bool:
    """Whether a message is a ``!word`` command (a known one or not) rather than a message for
    the agent."""
    return parse(text, ()) is not None

"""Commands typed in a thread. No slash: Slack does not allow slash commands in threads."""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "!"
HELP = """\
Commands in this thread:
• `!stop`: interrupt the agent's running turn
• `!model`: show the model; `!model <id>`: switch this thread's model (same conversation)
• `!new`: start a fresh conversation for this thread
• `!retry`: send the request a bridge restart or failover interrupted again, once
• `!status`: process, conversation, queue and usage of this thread
• `!approvals`: requests waiting for approval and this thread's allow list
• `!approvals reset`: clear this thread's allow list
• `!help`: this list
Anything else is a message for the agent."""
NAMES = ("stop", "model", "new", "status", "help", "approvals", "retry")


@dataclass(frozen=True)
class Command:
    name: str  # one of NAMES, or "unknown"
    arg: str = ""
    word: str = ""


def parse_command(text: str) -> Command | None:
    """A command when the message is ``!word [argument]``; None for an ordinary message."""
    stripped = text.strip()
    if not stripped.startswith(PREFIX) or len(stripped) < 2 or stripped[1].isspace():
        return None
    word, _, arg = stripped[1:].partition(" ")
    word = word.split("\n", 1)[0]
    if not word.replace("-", "").replace("_", "").isalnum():
        return None  # "!!!" or "!?" is punctuation, not a command
    name = word.lower()
    if name not in NAMES:
        return Command("unknown", arg.strip(), word)
    return Command(name, arg.strip(), word)

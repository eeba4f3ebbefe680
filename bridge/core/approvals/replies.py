"""Typed answers to a waiting request: ``approve``, ``always``, ``always: <pattern>``,
``deny``, ``deny: use the staging db``.

Only read while a request waits in the thread; any other message is for the agent. Free words
("yes", "no", "ok", "allow", "approved") are *not* answers: the agent can ask the thread a
yes/no question of its own while a request waits, and a teammate's "yes" to that question must
not become an approval. Only the bridge's own words decide, and only in a new message: edits
never reach here (the adapters drop them before they become messages).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bridge.core.events import ApprovalChoice

# The whole message, and nothing else: a bare word, or "always:"/"deny:" with their text.
# A number names the request it answers (`approve 7`, `deny 7: not now`, `always #7`).
_REPLY = re.compile(
    r"(?:(?P<word>approve)|(?P<choice>always|deny))(?:\s+#?(?P<number>[0-9]{1,9}))?"
    r"(?(word)|(?:\s*:\s*(?P<text>.*))?)",
    re.IGNORECASE | re.DOTALL,
)
_CHOICES = {"always": ApprovalChoice.ALWAYS, "deny": ApprovalChoice.DENY}


@dataclass(frozen=True)
class Reply:
    choice: ApprovalChoice
    reason: str = ""  # deny: why; always: the approver's own pattern
    number: int | None = None  # the request it names (None: a bare answer)


def parse_reply(text: str) -> Reply | None:
    """The answer in a message, when the whole message is one: ``approve``, ``always``,
    ``always: <pattern>``, ``deny`` or ``deny: <reason>``."""
    match = _REPLY.fullmatch(text.strip())
    if match is None:
        return None
    number = int(match["number"]) if match["number"] else None
    if match["word"] is not None:
        return Reply(ApprovalChoice.APPROVE, number=number)
    # "deny the request because" is a sentence for the agent; only a bare word or word: text.
    return Reply(_CHOICES[match["choice"].lower()], (match["text"] or "").strip(), number)


def number_handle(number: int) -> str:
    """The handle a typed answer naming request ``number`` carries to the gate."""
    return f"#{number}"

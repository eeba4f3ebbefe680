"""Typed answers to a waiting request: ``deny: use the staging db``, ``approve``, ``always``.

Only read while a request waits in the thread; any other message is for the agent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bridge.core.events import ApprovalChoice

_REPLY = re.compile(
    r"\s*(?P<word>deny|denied|no|approve|approved|allow|yes|always)\b\s*(?::\s*(?P<reason>.*))?",
    re.IGNORECASE | re.DOTALL,
)
_WORDS = {
    "deny": ApprovalChoice.DENY,
    "denied": ApprovalChoice.DENY,
    "no": ApprovalChoice.DENY,
    "approve": ApprovalChoice.APPROVE,
    "approved": ApprovalChoice.APPROVE,
    "allow": ApprovalChoice.APPROVE,
    "yes": ApprovalChoice.APPROVE,
    "always": ApprovalChoice.ALWAYS,
}


@dataclass(frozen=True)
class Reply:
    choice: ApprovalChoice
    reason: str = ""  # deny: why; always: the approver's own pattern


def parse_reply(text: str) -> Reply | None:
    """The answer in a message, when the whole message is one: ``deny``, ``deny: why``,
    ``approve``, ``always`` or ``always: <pattern>``."""
    match = _REPLY.fullmatch(text.strip())
    if match is None:
        return None
    # "deny the request because" is a sentence for the agent; only a bare word or word: text.
    return Reply(_WORDS[match["word"].lower()], (match["reason"] or "").strip())

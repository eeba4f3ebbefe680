"""Why agy did not get as far as ``init``, in categories the core can act on.

The core must not read agy's words, yet it has to decide one thing from them: whether the
thread's conversation id is dead (agy says the conversation is unknown: drop it, start fresh)
or still good (signed out, quota used up, agy missing, a slow start, anything else: keep it, so
the thread has its context again once the operator fixes agy). Only the first forgets.

agy's wording is not a stable interface, so the patterns are broad and the fall-back is the
safe one: words we do not recognise are ``OTHER``, which keeps the conversation.
"""

from __future__ import annotations

import re
from enum import StrEnum

from bridge.agy.process import AgyStartError


class StartFailure(StrEnum):
    CONVERSATION_UNKNOWN = "conversation_unknown"  # the id is dead: drop it, start fresh
    SIGNED_OUT = "signed_out"  # the operator must sign agy in again
    QUOTA = "quota"  # the account's quota is used up for now
    MODEL = "model"  # agy refused the model it was given
    MISSING = "missing"  # agy is not installed or cannot be run
    TIMEOUT = "timeout"  # no init within the deadline
    OTHER = "other"  # anything else (a crash, the network, words we do not know)

    @property
    def advice(self) -> str:
        """One sentence for the people in the thread, in words they understand."""
        return _ADVICE[self]


_ADVICE = {
    StartFailure.CONVERSATION_UNKNOWN: (
        "agy no longer knows this thread's conversation, so the thread starts a new one."
    ),
    StartFailure.SIGNED_OUT: (
        "agy is signed out: the operator has to sign agy in again on the bridge's host; "
        "the thread keeps its conversation."
    ),
    StartFailure.QUOTA: (
        "agy's account has used up its quota for now: try again later; "
        "the thread keeps its conversation."
    ),
    StartFailure.MODEL: "agy refused the model it was asked to use.",
    StartFailure.MISSING: "agy is not installed on the bridge's host, or cannot be started.",
    StartFailure.TIMEOUT: "agy took too long to start; try again.",
    StartFailure.OTHER: "agy stopped before it started; try again.",
}

# Checked in this order: a signed-out or out-of-quota agy may mention the conversation it was
# asked to resume, and that must not read as "the conversation is unknown".
_SIGNED_OUT = re.compile(
    r"sign(ed)?[ -]?in|signed[ -]?out|log(ged)?[ -]?in|login|not authenticated|"
    r"unauthenticated|authenticat\w* (failed|required|error)|credentials?|oauth|"
    r"token (has )?expired|expired token|reauthenticate|unauthori[sz]ed",
    re.IGNORECASE,
)
_QUOTA = re.compile(
    r"quota|rate[ -]?limit|resource[ _-]?exhausted|too many requests|\b429\b", re.IGNORECASE
)
_MODEL = re.compile(r"invalid model|unknown model|model .*not (found|available|supported)", re.I)
_CONVERSATION_UNKNOWN = re.compile(
    r"(conversation|trajectory|cascade)\b.*\b(not found|unknown|does not exist|doesn't exist|"
    r"no such|invalid|failed to load|could not load|cannot load|not exist)|"
    r"(unknown|invalid|no such) (conversation|trajectory|cascade)",
    re.IGNORECASE,
)


def _words(error: AgyStartError) -> str:
    parts = [error.message]
    if error.exit is not None:
        parts.append(error.exit.stderr_tail)
    if error.result is not None:
        parts += [error.result.error or "", error.result.response]
    return "\n".join(part for part in parts if part)


def classify(error: AgyStartError) -> StartFailure:
    """The category of one start failure (see the module's docstring)."""
    if error.kind == "missing":
        return StartFailure.MISSING
    if error.kind == "timeout":
        return StartFailure.TIMEOUT
    words = _words(error)
    if _SIGNED_OUT.search(words):
        return StartFailure.SIGNED_OUT
    if _QUOTA.search(words):
        return StartFailure.QUOTA
    if error.kind == "error_result" and _MODEL.search(words):
        return StartFailure.MODEL
    if _CONVERSATION_UNKNOWN.search(words):
        return StartFailure.CONVERSATION_UNKNOWN
    return StartFailure.OTHER


def forgets_conversation(error: AgyStartError) -> bool:
    """Whether the conversation id that was being resumed must be dropped (agy says it is
    unknown). Every other failure keeps it."""
    return classify(error) is StartFailure.CONVERSATION_UNKNOWN

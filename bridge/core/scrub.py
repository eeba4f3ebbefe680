"""Text from agy on its way to a chat or the store: made encodable, secrets taken out.

agy's output is JSON, which can carry lone surrogates that no UTF-8 writer (SQLite, a terminal,
an HTTP body) accepts; and agy's stderr or the agent's own words can carry a listener URL with
its token, or a secret the agent read from disk. Neither may reach a chat message or a log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# A listener URL: the first path segment is the session's token.
_LISTENER_URL = re.compile(r"((?:127\.0\.0\.1|localhost|\[::1\]):\d+/)([A-Za-z0-9_\-]{16,})(?=/)")
MIN_SECRET = 8


def encodable(text: str) -> str:
    """Lone surrogates become U+FFFD; valid text is returned unchanged (and fast)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class Scrubber:
    def __init__(self, secrets: Iterable[str] = ()):
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        text = encodable(text)
        if "/" in text:
            text = _LISTENER_URL.sub(r"\1***", text)
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text


class StreamScrubber:
    """Scrubs a text that arrives in pieces (agy's streamed deltas) for one turn.

    A secret split across two pieces is in neither of them: the tail of what came so far that
    could still grow into a secret is held back until the next piece (or :meth:`flush`, at the
    turn's end) shows what it is. Everything returned is already scrubbed.
    """

    def __init__(self, scrub: Scrubber):
        self._scrub = scrub
        self._held = ""

    def feed(self, piece: str) -> str:
        text = self._scrub(self._held + piece)
        keep = self._open_secret(text)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        rest, self._held = self._held, ""
        return rest

    def _open_secret(self, text: str) -> int:
        """Length of the longest tail of ``text`` that is the start of a secret."""
        longest = 0
        for secret in self._scrub.secrets:
            for size in range(min(len(secret) - 1, len(text)), longest, -1):
                if text.endswith(secret[:size]):
                    longest = size
                    break
        return longest

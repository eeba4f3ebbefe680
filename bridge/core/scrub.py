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
# The unfinished start of one at the end of a text (its token may still be on its way), also
# when the text ends inside the host name: the rest of the URL comes in the next piece.
_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_LISTENER_URL_START = re.compile(
    r"(?:(?:127\.0\.0\.1|localhost|\[::1\]):\d*(?:/[A-Za-z0-9_\-]*)?|"
    + "|".join(re.escape(host[:size]) for host in _HOSTS for size in range(len(host), 0, -1))
    + ")$"
)
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

    def stream(self) -> StreamScrubber:
        return StreamScrubber(self)


class StreamScrubber:
    """Scrubs a text that arrives in pieces, once per piece, without missing a secret that
    straddles two pieces: the end of a piece that could be the start of a secret (or of a
    listener URL) is held back until the next piece shows what it is."""

    def __init__(self, scrub: Scrubber):
        self._scrub = scrub
        self._held = ""

    def feed(self, text: str) -> str:
        """What of the text so far can be shown now (scrubbed)."""
        text = self._held + text
        keep = self._unsafe_tail(text)
        self._held = text[len(text) - keep :] if keep else ""
        return self._scrub(text[: len(text) - keep]) if keep else self._scrub(text)

    def flush(self) -> str:
        """The rest, at the end of the stream."""
        held, self._held = self._held, ""
        return self._scrub(held)

    def _unsafe_tail(self, text: str) -> int:
        longest = 0
        for secret in self._scrub.secrets:
            for size in range(min(len(secret) - 1, len(text)), longest, -1):
                if secret.startswith(text[-size:]):
                    longest = size
                    break
        if (match := _LISTENER_URL_START.search(text[-96:])) is not None:
            longest = max(longest, match.end() - match.start())
        return longest

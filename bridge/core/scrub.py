"""Text from agy on its way to a chat or the store: made encodable, secrets taken out.

agy's output is JSON, which can carry lone surrogates that no UTF-8 writer (SQLite, a terminal,
an HTTP body) accepts; and agy's stderr or the agent's own words can carry a listener URL with
its token, or a secret the agent read from disk. Neither may reach a chat message or a log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

# A listener URL: the first path segment is the session's token.
_LISTENER_URL = re.compile(r"((?:127\.0\.0\.1|localhost|\[::1\]):\d+/)([A-Za-z0-9_\-]{16,})(?=/)")
# The unfinished start of one at the end of a text (its token may still be on its way).
_LISTENER_URL_START = re.compile(r"(?:127\.0\.0\.1|localhost|\[::1\]):\d*(?:/[A-Za-z0-9_\-]*)?$")
# Before that, the text may end inside the host itself ("127.0", "local", "[::").
_LISTENER_HOSTS = ("127.0.0.1:", "localhost:", "[::1]:")
MIN_SECRET = 8


def encodable(text: str) -> str:
    """Lone surrogates become U+FFFD; valid text is returned unchanged (and fast)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class SecretSource(Protocol):
    """Secrets that may change while the bridge runs (the values in agy's login files)."""

    generation: int

    def values(self) -> tuple[str, ...]: ...


class Scrubber:
    def __init__(self, secrets: Iterable[str] = (), files: SecretSource | None = None):
        self._fixed = {s for s in secrets if len(s) >= MIN_SECRET}
        self._files = files
        self._generation = -1
        self._secrets = sorted(self._fixed, key=len, reverse=True)

    @property
    def secrets(self) -> list[str]:
        """The secrets, longest first; those read from files as they are now."""
        if self._files is not None:
            values = self._files.values()
            if self._files.generation != self._generation:
                self._generation = self._files.generation
                found = self._fixed | {v for v in values if len(v) >= MIN_SECRET}
                self._secrets = sorted(found, key=len, reverse=True)
        return self._secrets

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
        cut = self._safe_cut(text, len(text) - self._unsafe_tail(text))
        self._held = text[cut:]
        return self._scrub(text[:cut])

    def _safe_cut(self, text: str, cut: int) -> int:
        """``cut``, moved back to the start of any secret or listener URL the text holds whole
        across it: shown up to the cut, its first part would match nothing (a secret ending in
        ``1`` is cut before its last character, which could begin ``127.0.0.1``)."""
        moved = True
        while moved and cut > 0:
            moved = False
            for secret in self._scrub.secrets:
                size = len(secret)
                start = text.find(secret, max(cut - size + 1, 0), cut + size - 1)
                if start >= 0 and start < cut:
                    cut, moved = start, True
            for match in _LISTENER_URL.finditer(text):
                # Up to its end too: the "/" after the token is part of what makes it match.
                if match.start() < cut <= match.end():
                    cut, moved = match.start(), True
        return cut

    def flush(self) -> str:
        """The rest, at the end of the stream."""
        held, self._held = self._held, ""
        return self._scrub(held)

    def _unsafe_tail(self, text: str) -> int:
        longest = 0
        for word in (*self._scrub.secrets, *_LISTENER_HOSTS):
            longest = _longest_start(text, word, longest)
        if (match := _LISTENER_URL_START.search(text[-96:])) is not None:
            longest = max(longest, match.end() - match.start())
        return longest


def _longest_start(text: str, word: str, longer_than: int) -> int:
    """The size of the longest end of ``text`` that begins ``word`` without being all of it,
    if longer than ``longer_than`` (else that). Only where ``word``'s first character occurs is
    a candidate: one search in C, not a comparison per possible size."""
    end = len(text) - longer_than
    first = word[0]
    position = text.find(first, max(len(text) - len(word) + 1, 0), end)
    while position >= 0:
        if word.startswith(text[position:]):
            return len(text) - position
        position = text.find(first, position + 1, end)
    return longer_than

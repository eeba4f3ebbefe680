"""A streamed answer cut into finished Markdown blocks, for rendering as it arrives.

A Markdown block cannot be rendered before it ends: an opened fence is not yet a code block,
and the next line may still join a paragraph or a list. So the console shows an answer block
by block: up to each blank line outside a code block, and after each closed code block.
"""

from __future__ import annotations

from bridge.chat.common.markdown import closes_fence, opens_fence


class MarkdownBlocks:
    """``feed(delta)`` gives back the text whose blocks are finished (often ""); ``rest()``
    the unfinished tail, at the end of the answer."""

    def __init__(self) -> None:
        self._pending = ""
        self._scanned = 0  # how far complete lines of ``_pending`` have been read
        self._fence: str | None = None  # the marker of the code block being read
        self._cut = 0  # the end of the last finished block in ``_pending``

    def feed(self, text: str) -> str:
        self._pending += text
        while (end := self._pending.find("\n", self._scanned)) != -1:
            line = self._pending[self._scanned : end]
            self._scanned = end + 1
            if self._fence is None:
                marker = opens_fence(line)
                if marker is not None:
                    self._fence = marker
                elif not line.strip():
                    self._cut = self._scanned
            elif closes_fence(line, self._fence):
                self._fence = None
                self._cut = self._scanned
        done, self._pending = self._pending[: self._cut], self._pending[self._cut :]
        self._scanned -= self._cut
        self._cut = 0
        return done

    def rest(self) -> str:
        rest, self._pending = self._pending, ""
        self._scanned = self._cut = 0
        self._fence = None
        return rest

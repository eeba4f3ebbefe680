"""What a reply's answer has shown so far, and the half of it that edits messages.

An answer is one or more messages (:class:`Segment`), each showing the text from its start up to
the next one's. Edited (not streamed), the answer has the shape of the Matrix one:
:func:`answer_pieces` computes the messages that should exist (no I/O) and
:meth:`EditedAnswer.flush` makes Slack match them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.common.markdown import cut_point, slice_for_display
from bridge.chat.slack.feedback import feedback_block
from bridge.chat.slack.format import SPLIT_LIMIT
from bridge.chat.slack.keeper import TurnKeeper
from bridge.core.events import ThreadRef

# Room left in a live piece for a fence line added when it is cut inside a code block.
FENCE_ROOM = 64


@dataclass(frozen=True)
class Piece:
    """One message of an edited answer: where it starts in the answer, and what it shows."""

    start: int
    content: str


def answer_pieces(text: str) -> list[Piece]:
    """The messages an edited (not streamed) answer should show for ``text``, without I/O.

    A message that would grow past ``SPLIT_LIMIT`` ends at a paragraph or line boundary, and
    each renders on its own (a code fence cut in two is closed and reopened). The answer only
    grows and a cut depends only on the text before it, so a full piece stays as it was.
    """
    pieces: list[Piece] = []
    start = 0
    while len(text) - start > SPLIT_LIMIT:
        cut = cut_point(text, start, SPLIT_LIMIT - FENCE_ROOM)
        pieces.append(Piece(start, slice_for_display(text, start, cut)))
        start = cut
    pieces.append(Piece(start, slice_for_display(text, start, len(text))))
    return pieces


@dataclass
class Segment:
    """One message of the answer: the text from ``start`` up to the next segment's start."""

    start: int
    ts: str | None = None
    stream: AsyncChatStream | None = None
    opened_at: float = math.inf  # when its stream started (Slack ends it some minutes later)
    given: int = 0  # streaming: how far the answer text has been handed to the stream
    sent: int = 0  # streaming: how far Slack has confirmed it
    shown: str | None = None  # what the message shows now, when known
    feedback: bool = False  # whether it carries the feedback buttons
    summary: dict[str, Any] | None = None  # the turn's summary block it carries


@dataclass
class Answer:
    """One reply's answer: the agent's text so far and the messages that show it."""

    thread: ThreadRef
    # Whether it is (still) streamed rather than edited.
    streaming: bool
    text: str = ""
    segments: list[Segment] = field(default_factory=list)
    # A person stopped its stream in Slack: nothing more is streamed.
    user_stopped: bool = False

    def streams(self) -> bool:
        return self.streaming


class EditedAnswer:
    """The answer as messages posted once and edited about once a second."""

    def __init__(self, client: AsyncWebClient, answer: Answer, keeper: TurnKeeper) -> None:
        self._client = client
        self._answer = answer
        self._keeper = keeper

    async def flush(self, desired: list[Piece]) -> None:
        """Make the answer's messages show ``desired`` (:func:`answer_pieces`), in order: edit
        what changed, post what is missing. A full piece no longer changes, so it costs no call
        once shown; a call that fails or is deferred ends the round, and the next one resumes
        there."""
        for index, piece in enumerate(desired):
            if index == len(self._answer.segments):
                self._answer.segments.append(
                    Segment(start=piece.start, given=piece.start, sent=piece.start)
                )
            await self._show(self._answer.segments[index], piece.content)

    async def _show(self, segment: Segment, content: str) -> None:
        if not content.strip() or content == segment.shown:
            return
        if segment.ts is None:
            response = await self._client.chat_postMessage(
                channel=self._answer.thread.channel,
                thread_ts=self._answer.thread.thread or None,
                markdown_text=content,
            )
            segment.ts = _ts(response)
            self._keeper.after_post()
        else:
            await self._client.chat_update(
                channel=self._answer.thread.channel, ts=segment.ts, markdown_text=content
            )
        segment.shown = content


def _ts(response: Any) -> str | None:
    value = response.get("ts") if response is not None else None
    return str(value) if value else None


def closing_blocks(summary: dict[str, Any] | None, feedback: bool) -> list[dict[str, Any]]:
    """What closes an answer: the turn's summary, then the feedback buttons."""
    return [*([summary] if summary is not None else []), *([feedback_block()] if feedback else [])]

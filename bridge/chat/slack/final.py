"""The end of a reply: the whole final text over the answer's messages.

What streamed is replaced by the final text, split over as many messages as it needs: each
message is rewritten, added or deleted so that the thread shows exactly
``split_message(final)``; the last one carries the turn's summary (and the feedback buttons).
A stream still open is stopped with the rest of its final chunk, so no edit is needed (an edit
would drop the stream's tasks). Every call here is *urgent* in the rate budget and retried.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.chat.slack.answer import Answer, Segment, closing_blocks
from bridge.chat.slack.bound import ThreadCalls
from bridge.chat.slack.client import CALL_ERRORS, api_error
from bridge.chat.slack.format import split_message
from bridge.chat.slack.keeper import TurnKeeper
from bridge.chat.slack.streamed import StreamedAnswer
from bridge.chat.slack.tasks import TaskBoard

log = logging.getLogger(__name__)

CONFLICT = "streaming_state_conflict"
# The most of the final text a stream's last stop carries (chat.stopStream: 12,000 at most).
REST_LIMIT = 11_000


class FinalRewrite:
    def __init__(
        self,
        answer: Answer,
        *,
        calls: ThreadCalls,
        tasks: TaskBoard,
        keeper: TurnKeeper,
        streamed: StreamedAnswer,
        feedback: bool,
    ) -> None:
        self._answer = answer
        self._thread = answer.thread
        # The calls that must not be lost: the final answer and the clean-up after it.
        self._calls = calls
        self._tasks = tasks
        self._keeper = keeper
        self._streamed = streamed
        # Feedback buttons (👍/👎) under each final answer ([slack] feedback).
        self._feedback = feedback

    async def render(
        self, final: str, *, final_failed: bool = False, summary: dict[str, Any] | None = None
    ) -> None:
        """The whole final text over the answer's messages: rewrite, add or delete messages;
        the last one carries the turn's ``summary`` (and the feedback buttons)."""
        chunks = split_message(final)
        last = len(chunks) - 1
        # Feedback buttons under the last message of an answer (not under an error).
        feedback = self._feedback and not final_failed and bool(final.strip())
        self._tasks.end(failed=final_failed)
        for segment in self._answer.segments:
            if segment.stream is not None:
                rest = self._rest_of(segment, chunks)
                closing = rest is not None and self._index_of(segment) == last
                await self._streamed.stop(
                    segment,
                    final=True,
                    rest=rest,
                    feedback=feedback and closing,
                    summary=summary if closing else None,
                )
        targets = [segment for segment in self._answer.segments if segment.ts is not None]
        for index, chunk in enumerate(chunks):
            buttons = feedback and index == last
            below = summary if index == last else None
            if index < len(targets):
                await self._rewrite(targets[index], chunk, feedback=buttons, summary=below)
            else:
                await self._post_final(chunk, feedback=buttons, summary=below)
        for segment in targets[len(chunks) :]:
            await self._delete(segment)

    def _index_of(self, segment: Segment) -> int:
        """Which message of the answer ``segment`` is (among those posted)."""
        return [s for s in self._answer.segments if s.ts is not None].index(segment)

    def _rest_of(self, segment: Segment, chunks: list[str]) -> str | None:
        """When the last message streams the start of its final chunk, the rest of it: the
        final stop then carries it, and no edit is needed (an edit would drop the stream's
        tasks)."""
        if segment is not self._answer.segments[-1] or segment.ts is None:
            return None
        index = self._index_of(segment)
        if index >= len(chunks):
            return None
        streamed = self._answer.text[segment.start : segment.given]
        chunk = chunks[index]
        if chunk == streamed.rstrip() and self._tasks.tasks:
            # All of it streamed already, with the line break the final text trims: no edit
            # for a difference Slack does not show (it would take the task cards away).
            return ""
        if not chunk.startswith(streamed) or len(chunk) - len(streamed) > REST_LIMIT:
            return None
        return chunk[len(streamed) :]

    def _shows(self, shown: str | None, chunk: str) -> bool:
        """Whether a message showing ``shown`` needs no edit to show ``chunk``: Slack shows no
        trailing blank, and an edit of a stream with tasks would take its task cards away."""
        if shown == chunk:
            return True
        return bool(self._tasks.tasks) and shown is not None and shown.rstrip() == chunk.rstrip()

    async def _rewrite(
        self,
        segment: Segment,
        chunk: str,
        *,
        feedback: bool = False,
        summary: dict[str, Any] | None = None,
    ) -> None:
        if (
            self._shows(segment.shown, chunk)
            and segment.stream is None
            and segment.feedback == feedback
            and segment.summary == summary
        ):
            return
        ts = segment.ts
        assert ts is not None
        fields = _final_fields(chunk, feedback, summary)
        for attempt in range(2):
            try:
                await self._calls.edit("final edit", ts, **fields)
                segment.shown, segment.feedback, segment.summary = chunk, feedback, summary
                return
            except CALL_ERRORS as exc:
                # Still streaming (its stop failed earlier): stop it, then edit once more.
                if attempt == 0 and api_error(exc) == CONFLICT and segment.stream is not None:
                    await self._streamed.stop(segment, final=True)
                    continue
                break
        # The message cannot be edited (deleted, too old, stuck streaming): post the text anew
        # and take the old one away, so no partial copy stays above the answer.
        await self._post_final(chunk, feedback=feedback, summary=summary)
        await self._delete(segment)

    async def _delete(self, segment: Segment) -> None:
        ts = segment.ts
        assert ts is not None
        try:
            await self._calls.delete("surplus message removal", ts)
        except CALL_ERRORS:
            pass  # logged; an outdated piece stays above the final answer

    async def _post_final(
        self, chunk: str, *, feedback: bool = False, summary: dict[str, Any] | None = None
    ) -> None:
        try:
            await self._calls.say("final message", **_final_fields(chunk, feedback, summary))
            self._keeper.cleared_by_post()
        except CALL_ERRORS:
            log.error(
                "the final answer of %s could not be posted (%d characters lost)",
                self._thread.key,
                len(chunk),
            )


def _final_fields(
    chunk: str, feedback: bool, summary: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A final message's fields: its Markdown, in a block beside the summary and the feedback
    buttons where it carries them (``markdown_text`` takes no blocks beside it)."""
    if feedback or summary is not None:
        blocks = [{"type": "markdown", "text": chunk}, *closing_blocks(summary, feedback)]
        return {"text": chunk, "blocks": blocks}
    return {"markdown_text": chunk}

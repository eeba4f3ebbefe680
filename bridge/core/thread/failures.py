"""What a thread is told when agy cannot take its messages, and what is done about it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bridge.agy.process import AgyStartError
from bridge.agy.start_failure import StartFailure, classify
from bridge.core.events import Reaction, ThreadRef
from bridge.core.marks import Marks
from bridge.core.prompt import history_context
from bridge.core.scrub import Scrubber
from bridge.core.store import Store
from bridge.core.store.rows import MessageState, StoreError
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

Say = Callable[[str], Awaitable[None]]


async def conversation_unknown(exc: AgyStartError, store: Store, key: str) -> bool:
    """agy no longer knows the conversation it was to resume (worth a fresh one, once). Any
    other failure (signed out, quota, ...) keeps the id, so the thread has its context again
    once the operator has fixed agy."""
    if classify(exc) is not StartFailure.CONVERSATION_UNKNOWN:
        return False
    return bool((await store.thread(key)).conversation_id)


async def drop_conversation(
    exc: AgyStartError, store: Store, key: str, scrub: Scrubber, say: Say
) -> list[str]:
    """Forget the conversation agy could not resume; the history blocks for the fresh one."""
    await store.set_conversation(key, None)
    detail = scrub(exc.exit.stderr_tail.strip()) if exc.exit else ""
    context = await history_context(store, key)
    await say(
        "⚠️ agy could not resume this thread's conversation"
        + (f" ({detail})" if detail else "")
        + ". Starting a fresh conversation"
        + (
            ", given this thread's history as context."
            if context
            else "; earlier context is not available to the agent."
        )
    )
    return context


async def start_failure_text(exc: AgyStartError, store: Store, key: str, scrub: Scrubber) -> str:
    """Why agy did not start, with advice; a model agy refuses is reset to the default."""
    failure = classify(exc)
    text = scrub(
        f"agy refused to start: {exc.message}" if exc.kind == "error_result" else exc.message
    )
    if failure is not StartFailure.OTHER:
        text += f"\n{failure.advice}"
    if failure is StartFailure.MODEL and (await store.thread(key)).model:
        # A model agy refuses (a result before init) must not wedge the thread.
        await store.set_model(key, None)
        text += "\nThis thread's model was reset to the default."
    return text


async def fail_pending(
    ref: ThreadRef, store: Store, marks: Marks, metrics: Metrics, say: Say, reason: str
) -> None:
    """agy could not take these messages: say so, and leave the thread usable."""
    metrics.error("agy_start")
    try:
        failed = await store.take_pending(ref.key, MessageState.FAILED, None, ready_only=False)
    except StoreError as exc:
        log.error("could not mark messages failed: %s", exc, extra={"chat_thread": ref.key})
        failed = []
    for message in failed:
        marks.put(ref, message.message_id, Reaction.FAILED)
    await say(f"⚠️ {reason}")

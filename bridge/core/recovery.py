"""After a restart or a takeover: end leftover agy processes, expire what waited on them, and
tell the threads whose turn was cut off."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from bridge.agy.process import reap_group
from bridge.core import store as st
from bridge.core.approvals import texts as approval_texts
from bridge.core.approvals.gate import request_of
from bridge.core.events import ApprovalResult, ChatAdapter, ThreadRef
from bridge.core.prompt import history_context
from bridge.core.store.ports import RecoveryStore
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

RESTART_NOTICE = (
    "⚠️ The bridge restarted while the agent was working on this thread, so that turn was "
    "interrupted and its answer is lost. Messages written since then are being picked up now; "
    "repeat your last request if it still matters."
)
TAKEOVER_NOTICE = (
    "⚠️ The bridge instance that was running this thread (`{previous}`) stopped answering "
    "while the agent was working, so that turn was interrupted and its answer is lost. "
    "Instance `{name}` has taken the thread over; messages written since are being picked up "
    "now. Repeat your last request if it still matters."
)
HANDOVER_NOTICE = (
    "ℹ️ This thread moved to bridge instance `{name}`, which cannot see the agent's earlier "
    "conversation (it is kept on `{previous}`). The agent starts a new conversation and is "
    "given this thread's history as context."
)


async def reap(store: RecoveryStore, which: Callable[[st.ProcessRow], bool]) -> None:
    """End the agy process groups of ``which`` rows and forget them. The run marker makes this
    safe on another host's pgid: it ends nothing there."""
    for row in await store.processes():
        if not which(row):
            continue
        if await reap_group(row.pgid, row.run_marker):
            log.info(
                "ended an agy process group left from an earlier run",
                extra={"chat_thread": row.thread_key},
            )
        await store.remove_process(row.pgid)


async def expire_approvals(
    store: RecoveryStore,
    adapters: Mapping[str, ChatAdapter],
    metrics: Metrics,
    thread_key: str | None = None,
    reason: str = "the bridge restarted while it waited, so it was not run",
) -> None:
    """Requests that waited when the bridge (or the instance running ``thread_key``) went
    down: agy is gone, so they expired."""
    for row in await store.waiting_approvals(thread_key):
        ref = ThreadRef.from_key(row.thread_key)
        if ref.platform not in adapters:
            continue
        if not await store.settle_approval(row.id, st.ApprovalState.EXPIRED, reason=reason):
            continue
        metrics.approval(st.ApprovalState.EXPIRED.value)
        result = ApprovalResult(
            state=st.ApprovalState.EXPIRED.value,
            reason=reason,
            text=approval_texts.result_text(row.summary, st.ApprovalState.EXPIRED, None, reason),
        )
        adapter = adapters[ref.platform]
        try:
            if row.handle is None:
                # Killed between posting the request and noting its message: say it anew.
                await adapter.post_message(ref, result.text)
            else:
                await adapter.settle_approval(request_of(row, ref), row.handle, result)
        except Exception:
            log.warning("could not mark a request expired", exc_info=True)


async def report_restart(store: RecoveryStore, adapters: Mapping[str, ChatAdapter]) -> None:
    """Turns a restart cut off: told first, recorded second (a failed post is tried again at
    the next start)."""
    for turn in await store.running_turns():
        ref = ThreadRef.from_key(turn.thread_key)
        if ref.platform not in adapters:
            continue  # that chat is not configured now: report it when it is
        try:
            await adapters[ref.platform].post_message(ref, RESTART_NOTICE)
        except Exception:
            log.warning("could not report an interrupted turn", exc_info=True)
            continue
        await store.finish_turn(
            turn.id, st.TurnState.INTERRUPTED, error="the bridge restarted during this turn"
        )


async def take_over(
    store: RecoveryStore,
    adapter: ChatAdapter,
    metrics: Metrics,
    thread: ThreadRef,
    previous: str,
    owner: str,
    name: str,
) -> None:
    """A dead instance's thread: end its agy here, expire its requests, report its turn."""
    await reap(store, lambda row: row.thread_key == thread.key and row.owner != owner)
    gone = previous.split("#")[0]
    # Its requests waited on an agy that is gone: they can never run. Only this thread's:
    # other instances' requests wait on their live agy.
    await expire_approvals(
        store,
        {thread.platform: adapter},
        metrics,
        thread.key,
        f"instance {gone} stopped while it waited, so it was not run",
    )
    for turn in await store.running_turns(thread.key):
        if turn.owner == owner:
            continue
        # Told first, recorded second: the post can wait seconds for Slack's rate budget, and
        # an instance killed meanwhile must leave the turn to be reported again rather than
        # recorded as reported and never said.
        try:
            await adapter.post_message(thread, TAKEOVER_NOTICE.format(previous=gone, name=name))
        except Exception:
            log.warning(
                "could not report a cut-off turn; it is reported at the next takeover",
                exc_info=True,
                extra={"chat_thread": thread.key},
            )
            continue
        if await store.end_running_turn(
            turn.id, st.TurnState.INTERRUPTED, f"instance {gone} stopped during this turn"
        ):
            log.info(
                "took over a thread whose turn was cut off",
                extra={"chat_thread": thread.key, "conversation": turn.conversation_id},
            )


async def handover_context(
    store: RecoveryStore, adapter: ChatAdapter, thread: ThreadRef, name: str, shared_state: bool
) -> list[str]:
    """agy's conversation lives on the instance that started it, unless its state is shared:
    elsewhere the thread starts a new one, given its history (the blocks returned)."""
    if shared_state:
        return []
    row = await store.thread(thread.key)
    other = row.conversation_instance
    if not (row.conversation_id and other and other != name):
        return []
    await store.set_conversation(thread.key, None)
    try:
        await adapter.post_message(thread, HANDOVER_NOTICE.format(name=name, previous=other))
    except Exception:
        log.exception("could not post a notice", extra={"chat_thread": thread.key})
    return await history_context(store, thread.key)

"""After a restart or a takeover: end leftover agy processes, expire what waited on them, and
tell the threads whose turn was cut off."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import anyio

from bridge.agy.process import reap_group
from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core import handover
from bridge.core import store as st
from bridge.core.approvals import texts as approval_texts
from bridge.core.approvals.gate import request_of
from bridge.core.capabilities import OffersRetry, TellsOnce
from bridge.core.events import ApprovalResult, ChatAdapter, ThreadRef
from bridge.core.store.ports import RecoveryStore
from bridge.core.workspaces import place_for
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

RESTART_NOTICE = (
    "⚠️ The bridge restarted while the agent was working on this thread, so that turn was "
    "interrupted and its answer is lost; it is not run again by itself."
)
TAKEOVER_NOTICE = (
    "⚠️ The bridge instance that was running this thread (`{previous}`) stopped answering "
    "while the agent was working, so that turn was interrupted and its answer is lost; it is "
    "not run again by itself. Instance `{name}` has taken the thread over."
)
# Whether the agent still has the thread's conversation (None: it had none yet).
KEPT = {
    True: "The agent's conversation is kept: it remembers this thread.",
    False: (
        "The agent's conversation could not be reached from here: a new one starts, given "
        "this thread's history (the interrupted request marked as not to be redone)."
    ),
    None: "",
}
AFTER_CUT = (
    "Messages written since are being picked up now. Send `!retry` (or click Retry, where "
    "there is one) to run the interrupted request again."
)


def cut_off_notice(first: str, kept: bool | None) -> str:
    return " ".join(part for part in (first, KEPT[kept], AFTER_CUT) if part)


def notice_key(turn: st.TurnRow) -> str:
    """The cut-off notice's key: the same from every instance (the shared store's row), and
    another for any other turn (its start too: a store begun anew counts ids from 1 again)."""
    return f"cut-off-{turn.id}-{round(turn.started_at * 1000)}"


async def tell_cut_off(
    adapter: ChatAdapter, thread: ThreadRef, turn: st.TurnRow, text: str
) -> None:
    """The notice that ``turn`` was cut off, with a Retry control where the adapter has one
    (the scrubbed adapter offers it: Slack's button; else ``!retry`` is typed). Told before it
    is recorded, so a reporter killed in between leaves it to be told again: where the chat can
    recognise a notice it already holds (:class:`TellsOnce`, the scrubbed adapter offers it),
    it is then not said twice."""
    if isinstance(adapter, TellsOnce):
        if not await adapter.tell_once(thread, notice_key(turn), text):
            log.info(
                "the thread was told already (by an instance that stopped before recording it)",
                extra={"chat_thread": thread.key},
            )
    elif isinstance(adapter, OffersRetry):
        await adapter.post_with_retry(thread, text)
    else:
        await adapter.post_message(thread, text)


async def conversation_kept(
    store: st.Store, runtime: AgyRuntime, config: Config, ref: ThreadRef
) -> bool | None:
    """Whether agy started here resumes the thread's conversation (None: it has none)."""
    row = await store.thread(ref.key)
    if not row.conversation_id:
        return None
    session = place_for(config, ref).session_dir
    return await anyio.to_thread.run_sync(
        runtime.conversation_reachable, session, row.conversation_id
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


async def report_restart(
    store: RecoveryStore,
    adapters: Mapping[str, ChatAdapter],
    kept: Callable[[ThreadRef], Awaitable[bool | None]],
) -> None:
    """Turns a restart cut off: told first (whether the conversation is kept), recorded second
    (a failed post is tried again at the next start)."""
    for turn in await store.running_turns():
        ref = ThreadRef.from_key(turn.thread_key)
        if ref.platform not in adapters:
            continue  # that chat is not configured now: report it when it is
        try:
            notice = cut_off_notice(RESTART_NOTICE, await kept(ref))
            await tell_cut_off(adapters[ref.platform], ref, turn, notice)
        except Exception:
            log.warning("could not report an interrupted turn", exc_info=True)
            continue
        await store.finish_turn(turn.id, st.TurnState.INTERRUPTED, error=handover.RESTARTED)


async def take_over(
    store: RecoveryStore,
    adapter: ChatAdapter,
    metrics: Metrics,
    thread: ThreadRef,
    previous: str,
    owner: str,
    name: str,
    kept: bool | None = None,
) -> None:
    """A dead instance's thread: end its agy here, expire its requests, report its turn
    (saying whether the agent's conversation is ``kept``)."""
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
        # recorded as reported and never said (the chat keeps it from being said twice).
        try:
            first = TAKEOVER_NOTICE.format(previous=gone, name=name)
            await tell_cut_off(adapter, thread, turn, cut_off_notice(first, kept))
        except Exception:
            log.warning(
                "could not report a cut-off turn; it is reported at the next takeover",
                exc_info=True,
                extra={"chat_thread": thread.key},
            )
            continue
        if await store.end_running_turn(
            turn.id, st.TurnState.INTERRUPTED, handover.instance_stopped(gone)
        ):
            log.info(
                "took over a thread whose turn was cut off",
                extra={"chat_thread": thread.key, "conversation": turn.conversation_id},
            )

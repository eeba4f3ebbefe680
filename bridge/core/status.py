"""What ``!status`` and ``!approvals`` say about a thread."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bridge.config import ApprovalsSection
from bridge.core.approvals.rules import shown_row
from bridge.core.feedback import feedback_counts
from bridge.core.handover import turn_was_cut_off
from bridge.core.slots import ProcessSlots
from bridge.core.store.ports import StatusStore
from bridge.core.store.rows import TurnState
from bridge.core.thread.actor import ThreadActor


async def status_text(
    store: StatusStore,
    key: str,
    actor: ThreadActor | None,
    slots: ProcessSlots,
    instance_line: str,
    default_model: str,
    isolation_line: str,
    approvals: ApprovalsSection,
    extra: tuple[str, ...] = (),
    *,
    disk_line: str | None = None,
    reachable: Callable[[], Awaitable[bool | None]] | None = None,
) -> str:
    """``reachable``: whether agy started here would resume the thread's conversation."""
    row = await store.thread(key)
    kept = await _continuity(store, key, reachable)
    pending = await store.pending(key)
    proc = actor.proc if actor is not None else None
    if actor is None or proc is None:
        process = "no agy process (one starts with the next message)"
    elif actor.busy:
        process = f"agy running a turn (pid {proc.pid})"
    else:
        process = f"agy idle (pid {proc.pid})"
    named = await store.title(key)
    lines = [
        instance_line,
        *([f"• Title: “{named.title}” (named by {named.set_by})"] if named else []),
        f"• Process: {process}",
        f"• Conversation: `{row.conversation_id or 'none yet'}`{kept}",
        f"• Model: `{row.model or default_model or 'default'}`",
        f"• Waiting messages: {len(pending)}",
        f"• Agent slots: {slots.live}/{slots.limit} in use, {slots.queued} thread(s) in line",
        isolation_line,
        approvals_line(approvals),
        *extra,
    ]
    if disk_line:
        lines.append(disk_line)
    if (place := slots.position(key)) is not None:
        lines.append(f"• This thread is number {place} in line")
    if row.usage is not None:
        u = row.usage
        lines.append(
            f"• Usage so far: {u.input_tokens:,} input, {u.output_tokens:,} output "
            f"tokens ({u.total_tokens:,} in all)"
        )
    rated = await feedback_counts(store, key)
    if rated.positive or rated.negative:
        lines.append(f"• Feedback on answers: 👍 {rated.positive}, 👎 {rated.negative}")
    return "\n".join(lines)


async def _continuity(
    store: StatusStore, key: str, reachable: Callable[[], Awaitable[bool | None]] | None
) -> str:
    """After the latest cut-off (a restart or failover), whether the conversation was kept."""
    cut = next(
        (
            turn
            for turn in await store.last_turns(key, 20, TurnState.INTERRUPTED)
            if turn_was_cut_off(turn)
        ),
        None,
    )
    if cut is None or cut.conversation_id is None:
        return ""
    row = await store.thread(key)
    when = "after the interrupted turn"
    if row.conversation_id == cut.conversation_id:
        if reachable is not None and await reachable() is False:
            return (
                f" (out of reach here {when}: a new one starts with the next message, given "
                "this thread's history)"
            )
        return f" (kept {when}: the agent remembers this thread)"
    if row.conversation_id is None:
        return f" (the earlier one was out of reach {when}: a new one starts with the history)"
    return f" (a new one {when}, given this thread's history)"


async def approvals_text(store: StatusStore, key: str, mode: str) -> str:
    waiting = await store.waiting_approvals(key)
    allowed = await store.allow_list(key)
    lines = [f"• Approvals mode: `{mode}`"]
    if waiting:
        lines.append("• Waiting for approval:")
        lines += [f"  – `{w.summary}` ({w.tool})" for w in waiting]
    else:
        lines.append("• Nothing waits for approval.")
    if allowed:
        lines.append("• Allowed always in this thread:")
        lines += [f"  – `{shown_row(p)}`" for p in allowed]
    else:
        lines.append("• This thread's allow list is empty.")
    return "\n".join(lines)


_GATED = "commands, writes outside the workspace and fetches"


def approvals_line(approvals: ApprovalsSection) -> str:
    """One line: how the gate is set (``!status`` and the console's banner)."""
    if approvals.mode == "off":
        return "• Approvals: `off`: every tool call runs without asking anyone"
    what = "wait for a person in the thread" if approvals.mode == "ask" else "are refused"
    # A rule holding a backtick must not end its code span early.
    rules = ", ".join("`" + rule.replace("`", "'") + "`" for rule in approvals.allow_commands)
    allowed = (
        f"allowed without asking: {rules}"
        if rules
        else "no command is allowed without asking (`[approvals] allow_commands`)"
    )
    return f"• Approvals: `{approvals.mode}`: {_GATED} {what}; {allowed}"

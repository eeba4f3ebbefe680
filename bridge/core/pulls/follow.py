"""CI back in the thread: each open pull request's checks followed, each change told once.

A loop in the core's task group looks at every open PR with a backoff of its own (the first
wait ``[forge] poll_seconds``, doubled while nothing changes, at most ``poll_max_seconds``;
back to the first after a change or a push). Only the instance holding the thread's lease
looks (or any instance when nobody holds it: an idle thread); what was told is in the store
and claimed with a compare-and-set (``Store.claim_checks``), so a change is told once whichever
instance, or webhook (:meth:`CheckFollower.report_checks`), saw it first, across restarts.

The loop also pushes later commits of a thread with an open PR (its branch was brought home
after the turn that made them), so the PR follows the thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio

from bridge.core.events import ThreadRef
from bridge.core.leases import Leases
from bridge.core.pulls.service import PullRequests
from bridge.core.pulls.target import Refused, Target
from bridge.core.store import PullRow, StoreError
from bridge.core.worktrees import branch_tip
from bridge.forge.base import Check, ForgeError

log = logging.getLogger(__name__)
OnMerged = Callable[[Target, PullRow], Awaitable[None]]

# How checks are told: pending and running are one ("running"), the rest as they are.
_ICONS = {"running": "⏳", "passed": "✅", "failed": "❌", "cancelled": "🚫", "skipped": "⏭️"}


def told_state(check: Check) -> str:
    return "running" if check.state == "pending" else check.state


def change_text(row: PullRow, sha: str, before: dict[str, str], checks: list[Check]) -> str:
    """The thread's message for a change of ``checks`` from ``before`` (told for ``sha``)."""
    groups: dict[str, list[Check]] = {}
    for check in checks:
        groups.setdefault(told_state(check), []).append(check)
    changed = {c.name for c in checks if before.get(c.name) != told_state(c)}
    head = f"CI on pull request #{row.number} (`{sha[:7]}`):"
    if not groups.get("running") and not groups.get("failed") and checks:
        head = f"CI on pull request #{row.number} (`{sha[:7]}`): all checks passed."
    lines = [head]
    for state in ("failed", "cancelled", "running", "passed", "skipped"):
        members = groups.get(state, [])
        if not members:
            continue
        shown = []
        for check in members:
            name = f"**{check.name}**" if check.name in changed else check.name
            link = f" ({check.url})" if check.url and state in ("failed", "cancelled") else ""
            shown.append(f"{name}{link}")
        lines.append(f"{_ICONS[state]} {state}: {', '.join(shown)}")
    if groups.get("failed"):
        lines.append("`!fix` hands the failing jobs' logs to the agent.")
    return "\n".join(lines)


class CheckFollower:
    def __init__(
        self, pulls: PullRequests, leases: Leases, on_merged: OnMerged | None = None
    ) -> None:
        self.pulls = pulls
        self.leases = leases
        # A PR merged on the forge: told and its workspace cleaned (bridge/core/pulls/cleanup.py)
        self.on_merged = on_merged
        # thread key -> (when to look next, the wait after that look)
        self._due: dict[str, tuple[float, float]] = {}
        self._wake = anyio.Event()

    def wake(self, thread_key: str | None = None) -> None:
        """Look now (after a push or a webhook), at one thread or all."""
        if thread_key is not None:
            self._due.pop(thread_key, None)
        else:
            self._due.clear()
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                wait = await self.tick()
            except StoreError:
                log.warning("could not read the open pull requests", exc_info=True)
                wait = 30.0
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def tick(self) -> float:
        """Look at every open PR that is due; how long until the next is."""
        now = time.monotonic()
        first = self.pulls.config.forge.poll_seconds if self.pulls.config.forge else 10.0
        soonest = 60.0
        for row in await self.pulls.store.open_pulls():
            due, interval = self._due.get(row.thread_key, (0.0, 0.0))
            if due <= now:
                changed = await self._look(row)
                start = await self._first_wait(row, first)
                limit = self._max_wait(row)
                interval = start if changed or not interval else min(interval * 2, limit)
                due = now + interval
                self._due[row.thread_key] = (due, interval)
            soonest = min(soonest, max(due - now, 0.0))
        return soonest

    async def _first_wait(self, row: PullRow, default: float) -> float:
        try:
            target = await self.pulls.target(ThreadRef.from_key(row.thread_key))
        except Refused:
            return default
        return target.settings.poll_seconds

    def _max_wait(self, row: PullRow) -> float:
        forge = self.pulls.config.forge
        return forge.poll_max_seconds if forge else 120.0

    async def _look(self, row: PullRow) -> bool:
        """One look at a PR: push new commits, note a merge or close, tell check changes."""
        holder = await self.leases.holder(row.thread_key)
        if holder is not None and holder != self.leases.owner:
            return False
        thread = ThreadRef.from_key(row.thread_key)
        try:
            target = await self.pulls.target(thread)
            pull = await target.forge.get_pr(row.number)
            if pull.state != "open":
                # Said once: by whoever moves the row from open (this look, another
                # instance's, or !merge, which may have read the same merge meanwhile).
                if not await self.pulls.store.close_pull(row.thread_key, pull.state):
                    return True
                if pull.state == "merged" and self.on_merged is not None:
                    await self.on_merged(target, row)
                else:
                    await self.pulls.say(thread, f"Pull request #{row.number} was {pull.state}.")
                return True
            # The branch comes home after each turn: its tip alone says whether to push.
            tip = await branch_tip(target.team, target.branch)
            if tip is not None and tip != row.pushed_sha:
                sha = await self.pulls.push_thread(target, "bridge", pull.base)
                await self.pulls.say(
                    thread, f"Pushed `{sha[:7]}` to pull request #{row.number}: {row.url}"
                )
                return True
            return await self.report_checks(
                row.thread_key, pull.head_sha, await target.forge.checks(pull.head_sha)
            )
        except (Refused, ForgeError) as exc:
            log.info(
                "could not follow a pull request: %s", exc, extra={"chat_thread": row.thread_key}
            )
            return False

    async def report_checks(self, thread_key: str, sha: str, checks: list[Check]) -> bool:
        """Tell the thread what changed in ``checks`` of commit ``sha`` since it was last told
        (the webhook's entry too); whether something was told."""
        row = await self.pulls.store.pull(thread_key)
        if row is None or not checks:
            return False
        now = {c.name: told_state(c) for c in checks}
        before = row.checks if row.checks_sha == sha else {}
        if row.checks_sha == sha and before == now:
            return False
        if not await self.pulls.store.claim_checks(row, sha, now):
            return False  # another instance, or the webhook, told it
        await self.pulls.say(ThreadRef.from_key(thread_key), change_text(row, sha, before, checks))
        return True

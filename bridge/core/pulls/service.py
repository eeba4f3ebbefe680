"""``!pr``, ``!merge``, ``!fix`` and the pushes that follow: a thread's pull request, end to end.

Each step is audited (who asked, what was pushed, which PR, which merge) and refused with a
sentence when something is missing; the forge's own error text is shown as it said it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio
from pydantic import BaseModel, ConfigDict

from bridge.agy.sandbox import Sandbox
from bridge.config import Config
from bridge.core.events import Author, ThreadRef
from bridge.core.git import GitError
from bridge.core.pulls.diff import base_ref
from bridge.core.pulls.push import PushRefused, plan_push, push
from bridge.core.pulls.target import Refused, Target, co_authors, target_for, thread_link
from bridge.core.store import PullRow, Store
from bridge.core.team.audit import AuditLog
from bridge.forge.base import Check, ForgeError, PullRequest
from bridge.forge.opening import GIT_USERNAME

if TYPE_CHECKING:
    # Only the type: aiohttp is imported where a forge is configured (bridge.core.core).
    import aiohttp

log = logging.getLogger(__name__)

Say = Callable[[ThreadRef, str], Awaitable[None]]
AskPurpose = Callable[[ThreadRef, Author], Awaitable[str | None]]
Turn = Callable[[ThreadRef, Author, str], Awaitable[None]]
MAX_TITLE = 120


class Merge(BaseModel):
    """What ``!merge`` did: the PR as the forge says after it, whether this merge made it
    (``by_us``; else the forge's own page did, before), and whether this call is the one to
    tell the thread and clean its repository (``told``: it moved the stored PR from open)."""

    model_config = ConfigDict(frozen=True)

    pull: PullRequest
    by_us: bool
    told: bool


class PullRequests:
    """The pull request steps of worktree threads (one per bridge instance)."""

    def __init__(
        self,
        config: Config,
        store: Store,
        http: aiohttp.ClientSession,
        say: Say,
        ask_purpose: AskPurpose,
        start_turn: Turn,
        audit: AuditLog | None,
        sandbox: Callable[[], Sandbox | None],
        *,
        scrub: Callable[[str], str],
    ) -> None:
        self.config = config
        self.store = store
        self.http = http
        self.say = say
        self.ask_purpose = ask_purpose
        self.start_turn = start_turn
        self.audit = audit
        self.sandbox = sandbox
        # What leaves for the forge or the agent (the agent's description, CI logs) is
        # scrubbed of the bridge's secrets first, as everything posted in a chat is.
        self.scrub = scrub
        self._pushing: dict[str, anyio.Lock] = {}
        # The chat's own link to a thread (capabilities.Permalinks), set where it is wired.
        self.permalink: Callable[[ThreadRef], Awaitable[str | None]] | None = None

    async def target(self, thread: ThreadRef) -> Target:
        return await target_for(self.config, self.store, thread, self.http)

    async def _audit(
        self, kind: str, thread: ThreadRef, by: Author | str, **detail: object
    ) -> None:
        if self.audit is not None:
            await self.audit.append(kind, thread=thread, person=by, **detail)

    async def base(self, target: Target) -> str:
        return target.settings.base or await target.forge.default_branch()

    # --- the push ------------------------------------------------------------------------------

    async def push_thread(self, target: Target, by: Author | str, base: str) -> str:
        """The thread's branch on the forge (CI files named first); the commit pushed. One
        push of a thread at a time here (``!pr`` and the follower's), each leasing on what the
        one before pushed."""
        lock = self._pushing.setdefault(target.thread.key, anyio.Lock())
        async with lock:
            return await self._push_thread(target, by, base)

    async def _push_thread(self, target: Target, by: Author | str, base: str) -> str:
        row = await self.store.pull(target.thread.key)
        since = row.pushed_sha if row is not None and row.state == "open" else None
        plan = await plan_push(
            target.team,
            target.workdir,
            target.branch,
            since=since,
            base_ref=await base_ref(target.team, base),
            sandbox=self.sandbox(),
        )
        if plan.unchanged:
            return plan.sha
        if plan.ci_files:
            named = ", ".join(f"`{name}`" for name in plan.ci_files)
            await self.say(
                target.thread,
                f"⚠️ This push changes CI definitions: {named}. The forge runs them with the "
                "repository's secrets; review them before anyone approves a run.",
            )
        # The lease: the commit the bridge pushed last (a merged PR's branch too), else none.
        lease = row.pushed_sha if row is not None else None
        try:
            try:
                await self._push(target, plan.sha, lease)
            except PushRefused:
                if row is None or row.state == "open":
                    raise
                # After a merge the forge may have deleted the branch: a first push again.
                await self._push(target, plan.sha, None)
        except PushRefused as exc:
            await self._audit(
                "forge.push_refused", target.thread, by, branch=target.branch, reason=str(exc)
            )
            raise Refused(str(exc)) from None
        await self._audit(
            "forge.push",
            target.thread,
            by,
            branch=target.branch,
            sha=plan.sha,
            repo=target.forge.repo,
            ci_files=list(plan.ci_files),
        )
        if row is not None and row.state == "open":
            await self.store.set_pull_pushed(target.thread.key, plan.sha)
        return plan.sha

    async def _push(self, target: Target, sha: str, lease: str | None) -> None:
        username = GIT_USERNAME.get(target.settings.kind, "oauth2")
        await push(target.team, target.branch, sha, target.push_url, target.token, username, lease)

    # --- !pr -----------------------------------------------------------------------------------

    async def open_or_update(self, thread: ThreadRef, by: Author, title: str) -> PullRequest:
        """Push, then open the thread's PR (or update the open one's title and body)."""
        target = await self.target(thread)
        try:
            base = await self.base(target)
            sha = await self.push_thread(target, by, base)
            purpose = await self.ask_purpose(thread, by)
            body = self.scrub(await self._body(target, purpose))
            title = self.scrub(title or _title_of(purpose) or f"Changes from {target.branch}")
            title = title[:MAX_TITLE]
            row = await self.store.pull(thread.key)
            if row is not None and row.state == "open":
                if (await target.forge.get_pr(row.number)).state != "open":
                    row = row.model_copy(update={"state": "closed"})
            if row is not None and row.state == "open":
                pull = await target.forge.update_pr(row.number, title, body)
                opened = False
            elif (found := await target.forge.find_open_pr(target.branch)) is not None:
                pull = await target.forge.update_pr(found.number, title, body)
                opened = False
            else:
                pull = await target.forge.open_pr(target.branch, base, title, body)
                opened = True
        except ForgeError as exc:
            await self._audit("forge.refused", thread, by, step="pr", error=exc.text)
            raise Refused(f"The forge refused: {exc.text} (HTTP {exc.status})") from None
        except GitError as exc:
            raise Refused(f"git failed: {exc}") from None
        await self.store.save_pull(
            PullRow(
                thread_key=thread.key,
                forge=target.settings.kind,
                repo=target.forge.repo,
                number=pull.number,
                head=target.branch,
                base=pull.base,
                url=pull.url,
                state=pull.state,
                pushed_sha=sha,
                checks_sha=row.checks_sha if row is not None and row.number == pull.number else "",
                checks=row.checks if row is not None and row.number == pull.number else {},
            )
        )
        await self._audit(
            "forge.pr_opened" if opened else "forge.pr_updated",
            thread,
            by,
            repo=target.forge.repo,
            number=pull.number,
            url=pull.url,
            sha=sha,
        )
        verb = "Opened" if opened else "Updated"
        await self.say(thread, f"{verb} pull request #{pull.number}: {pull.url}")
        return pull

    async def _body(self, target: Target, purpose: str | None) -> str:
        lines = [purpose or "_The agent gave no description._", "", "---"]
        link = await self.permalink(target.thread) if self.permalink else None
        lines.append(f"From the chat thread: {link or thread_link(target.thread)}")
        authors = [a for a in await self.store.thread_authors(target.thread.key) if a.person]
        if authors:
            lines.append("")
            lines += await co_authors(authors, target.settings, target.forge)
        return "\n".join(lines)

    # --- !merge --------------------------------------------------------------------------------

    async def merge(self, thread: ThreadRef, by: Author) -> Merge:
        """Merge the thread's PR when its required checks passed. The merge is told by the
        one path that moves the stored PR from open (``Store.close_pull``): this one, or the
        CI follower that read the merge meanwhile (woken by the forge's webhook, or its poll)."""
        target = await self.target(thread)
        row = await self.store.pull(thread.key)
        if row is None:
            raise Refused("This thread has no pull request: `!pr` opens one.")
        try:
            pull = await target.forge.get_pr(row.number)
            if pull.state != "open":
                told = await self.store.close_pull(thread.key, pull.state)
                if told and pull.state == "merged":
                    # Merged on the forge, and seen here first: the follower no longer looks.
                    return Merge(pull=pull, by_us=False, told=True)
                raise Refused(f"Pull request #{pull.number} is {pull.state}: nothing to merge.")
            required = target.settings.required_checks
            if required is None:
                required = await target.forge.required_checks(pull.base)
            checks = {c.name: c for c in await target.forge.checks(pull.head_sha)}
            waiting = [n for n in required if n not in checks or checks[n].state != "passed"]
            if waiting:
                states = ", ".join(
                    f"`{n}` {checks[n].state if n in checks else 'not reported'}" for n in waiting
                )
                raise Refused(f"Not merged: required checks have not passed ({states}).")
            bad = [c.name for c in checks.values() if c.bad]
            if bad:
                raise Refused(
                    f"Not merged: checks failed: {', '.join(bad)}. `!fix` hands them to the agent."
                )
            method = target.settings.merge_method
            title = f"{pull.title} (#{pull.number})"
            done = await target.forge.merge(pull.number, method, title, pull.body)
            merged = await target.forge.get_pr(pull.number)
        except ForgeError as exc:
            await self._audit("forge.refused", thread, by, step="merge", error=exc.text)
            raise Refused(f"The forge refused the merge: {exc.text} (HTTP {exc.status})") from None
        # The forge's answer to the merge counts, whatever a read right after it says; one
        # not merged yet (GitLab may queue it) is the follower's to tell when it is.
        state = "merged" if done.merged else merged.state
        told = state != "open" and await self.store.close_pull(thread.key, state)
        if state != merged.state:
            merged = merged.model_copy(update={"state": state})
        await self._audit(
            "forge.merged",
            thread,
            by,
            repo=target.forge.repo,
            number=pull.number,
            method=method,
            sha=done.sha,
        )
        return Merge(pull=merged, by_us=True, told=told)

    # --- !fix ----------------------------------------------------------------------------------

    async def fix(self, thread: ThreadRef, by: Author) -> list[Check]:
        """A turn for the agent with the failing jobs' log tails; the failing checks."""
        target = await self.target(thread)
        row = await self.store.pull(thread.key)
        if row is None:
            raise Refused("This thread has no pull request: `!pr` opens one.")
        try:
            pull = await target.forge.get_pr(row.number)
            failing = [c for c in await target.forge.checks(pull.head_sha) if c.bad]
            if not failing:
                return []
            parts = [
                f"CI failed on pull request #{pull.number} ({pull.url}). Find the cause and "
                "fix it, then commit. The failing jobs' logs end with:"
            ]
            for check in failing[:3]:
                tail = await target.forge.job_log(check, 6000)
                parts.append(f"### {check.name} ({check.url})\n```\n{tail or '(no log)'}\n```")
        except ForgeError as exc:
            raise Refused(f"The forge refused: {exc.text} (HTTP {exc.status})") from None
        await self._audit(
            "forge.fix", thread, by, number=pull.number, checks=[c.name for c in failing]
        )
        await self.start_turn(thread, by, self.scrub("\n\n".join(parts)))
        return failing

    # --- cleanup -------------------------------------------------------------------------------

    def cleanup_mode(self, target: Target) -> str:
        workspace = next(
            (w for w in self.config.workspaces if w.path.expanduser().resolve() == target.team),
            None,
        )
        return workspace.worktree_cleanup if workspace is not None else "keep"


def _title_of(purpose: str | None) -> str:
    for line in (purpose or "").splitlines():
        line = line.strip().lstrip("#").strip().strip("*").strip()
        if line:
            return line[:70]
    return ""

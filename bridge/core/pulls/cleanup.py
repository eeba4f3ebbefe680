"""A merged pull request's workspace, cleaned according to ``worktree_cleanup``: the same way
after ``!merge`` and after a merge on the forge (which the CI follower finds, by the instance
holding the thread's lease). Told and cleaned once, by whichever path moves the stored PR from
open (``Store.close_pull``): ``!merge`` and the follower may both read the merge at once."""

from __future__ import annotations

import logging

import anyio

from bridge.config import Config
from bridge.core.events import Author, ThreadRef
from bridge.core.git import GitError
from bridge.core.pulls.service import PullRequests
from bridge.core.pulls.target import Target
from bridge.core.router import Router
from bridge.core.store import PullRow
from bridge.core.thread import commands as c
from bridge.core.worktrees import has_own_repository, remove_worktree

log = logging.getLogger(__name__)

# How long a merge waits for the thread's agent to end before cleaning its repository.
ACTOR_END_SECONDS = 60.0


async def end_actor(router: Router | None, config: Config, thread: ThreadRef) -> None:
    """The thread's agent here stops after its turn, so its repository can go (the actor's end
    cleans it per worktree_cleanup); a later message starts it again."""
    actor = router.local(thread.key) if router is not None else None
    if actor is None:
        return
    actor.tell(c.Drain())
    with anyio.move_on_after(config.agy.turn_timeout):
        await actor.wait_until(lambda state: not state.in_turn)
    actor.tell(c.EndLease())
    with anyio.move_on_after(ACTOR_END_SECONDS):
        await actor.wait_ended()


async def clean_merged(
    requests: PullRequests, router: Router | None, target: Target, by: Author | str
) -> str:
    """Clean a merged PR's thread repository when ``worktree_cleanup = "remove"`` (audited);
    the sentence that says what happened ("" when the workspace keeps it)."""
    if requests.cleanup_mode(target) != "remove":
        return ""
    await end_actor(router, requests.config, target.thread)
    if has_own_repository(target.workdir):
        await remove_worktree(
            target.team, target.workdir, sandbox=requests.sandbox(), branch=target.branch
        )
    kept = has_own_repository(target.workdir)
    if requests.audit is not None:
        await requests.audit.append(
            "forge.cleanup",
            thread=target.thread,
            person=by,
            branch=target.branch,
            removed=not kept,
        )
    if kept:
        return " This thread's repository was kept: it has uncommitted changes."
    return " This thread's repository was removed (its branch stays in the workspace's repository)."


async def merge_and_tell(
    requests: PullRequests, router: Router | None, thread: ThreadRef, by: Author
) -> None:
    """``!merge``'s step: merge the thread's PR, then tell the thread and clean its workspace
    when this call is the one to (``Merge.told``): the CI follower may have read the merge
    meanwhile, woken by the forge's webhook, and told it first."""
    done = await requests.merge(thread, by)
    pull = done.pull
    if not done.told:
        if pull.state == "open":
            await requests.say(
                thread,
                f"The forge took the merge of pull request #{pull.number} but has not merged it "
                "yet: this thread is told when it does.",
            )
        else:
            log.info("pull request #%d's merge was told by the forge's word", pull.number)
        return
    target = await requests.target(thread)
    if done.by_us:
        text = f"Merged pull request #{pull.number} into `{pull.base}` ({pull.url})."
        await tell_merged(requests, router, target, text, by)
    else:
        await tell_merged(requests, router, target, f"Pull request #{pull.number} was merged.")


async def merged_on_forge(
    requests: PullRequests, router: Router | None, target: Target, row: PullRow
) -> None:
    """A PR merged on the forge (not through ``!merge``): told, and cleaned as ``!merge``
    cleans."""
    await tell_merged(requests, router, target, f"Pull request #{row.number} was merged.")


async def tell_merged(
    requests: PullRequests,
    router: Router | None,
    target: Target,
    text: str,
    by: Author | str = "forge",
) -> None:
    """The merge told in the thread with what its clean-up did (a failed clean-up is said, the
    merge is never lost to it)."""
    try:
        text += await clean_merged(requests, router, target, by)
    except GitError as exc:
        log.warning("a merged thread's repository was not cleaned: %s", exc)
        text += f" This thread's repository was not cleaned: {exc}"
    await requests.say(target.thread, text)

"""The pull request commands of a worktree thread: !diff, !pr, !merge, !fix
(docs/pull-requests.md). !status shows the thread's PR through :func:`status_lines`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from bridge.core.command_text import Command
from bridge.core.commands.registry import Core, Who, command
from bridge.core.events import IncomingMessage, OutgoingFile, ThreadRef
from bridge.core.git import GitError
from bridge.core.pulls.cleanup import merge_and_tell
from bridge.core.pulls.diff import branch_diff, diff_text, local_base
from bridge.core.pulls.target import Refused, thread_place
from bridge.core.worktrees import bring_back
from bridge.forge.base import ForgeError

log = logging.getLogger(__name__)

NO_FORGE = (
    "No forge is configured: the operator sets `[forge]` to open pull requests "
    "(docs/pull-requests.md)."
)


def _background(core: Core, thread: ThreadRef, step: Awaitable[None]) -> None:
    """A long step (a push, the agent's description, a merge) off the chat's event handler;
    a refusal is said in the thread."""

    async def run() -> None:
        try:
            await step
        except Refused as exc:
            await core.say(thread, str(exc))
        except (ForgeError, GitError) as exc:
            await core.say(thread, f"That did not work: {exc}")

    core.router.background(run())


@command(
    "diff",
    "`!diff`: this thread's commits and diff stat against the base; the full patch as a file",
)
async def diff(core: Core, message: IncomingMessage, _: Command) -> None:
    thread = message.thread
    place = await thread_place(core.config, core.store, thread)
    if place.repo is None or place.branch is None:
        await core.say(thread, "This thread has no branch of its own (`worktree = true`).")
        return
    settings = core.config.forge_for(place.workspace)
    sandbox = core.runtime.isolation.sandbox
    try:
        await bring_back(place.repo, place.workdir, place.branch, sandbox=sandbox)
        base = settings.base if settings is not None and settings.base else ""
        if not base and core.pulls is not None and settings is not None:
            try:
                base = await (await core.pulls.requests.target(thread)).forge.default_branch()
            except (Refused, ForgeError):
                base = ""
        base = base or await local_base(place.repo)
        found = await branch_diff(place.repo, place.workdir, place.branch, base, sandbox)
    except GitError as exc:
        await core.say(thread, f"Could not read the diff: {exc}")
        return
    await core.say(thread, diff_text(found, place.branch))
    if found.patch:
        name = place.branch.replace("/", "-") + ".patch"
        file = OutgoingFile(name=name, data=found.patch.encode())
        await core.router.adapters[thread.platform].post_file(thread, file, f"{name}")


@command(
    "pr",
    "`!pr [title]`: push this thread's branch and open its pull request (again: update it)",
    who=Who.APPROVERS,
)
async def pr(core: Core, message: IncomingMessage, parsed: Command) -> None:
    if core.pulls is None:
        await core.say(message.thread, NO_FORGE)
        return
    pulls = core.pulls
    await core.say(
        message.thread, "Pushing this thread's branch; the agent writes the description."
    )

    async def step() -> None:
        await pulls.requests.open_or_update(message.thread, message.author, parsed.arg.strip())
        pulls.follower.wake(message.thread.key)

    _background(core, message.thread, step())


@command(
    "merge",
    "`!merge`: merge this thread's pull request once its required checks passed",
    who=Who.APPROVERS,
)
async def merge(core: Core, message: IncomingMessage, _: Command) -> None:
    if core.pulls is None:
        await core.say(message.thread, NO_FORGE)
        return
    thread = message.thread
    step = merge_and_tell(core.pulls.requests, core.router, thread, message.author)
    _background(core, thread, step)


@command("fix", "`!fix`: hand the agent the failing CI jobs' logs of this thread's pull request")
async def fix(core: Core, message: IncomingMessage, _: Command) -> None:
    if core.pulls is None:
        await core.say(message.thread, NO_FORGE)
        return
    requests = core.pulls.requests
    thread = message.thread

    async def step() -> None:
        failing = await requests.fix(thread, message.author)
        if not failing:
            await core.say(thread, "No check of this thread's pull request is failing.")

    _background(core, thread, step())


async def status_lines(core: Core, thread: ThreadRef) -> tuple[str, ...]:
    """The branch, the PR and its checks as last told, for !status."""
    place = await thread_place(core.config, core.store, thread)
    if place.branch is None:
        return ()
    lines = [f"• Branch: `{place.branch}`"]
    row = await core.store.pull(thread.key)
    if row is None:
        lines.append("• Pull request: none (`!pr` opens one)" if core.pulls else "")
    else:
        lines.append(f"• Pull request: #{row.number} ({row.state}) {row.url}")
        if row.checks:
            checks = ", ".join(f"{name} {state}" for name, state in sorted(row.checks.items()))
            lines.append(f"• Checks (`{row.checks_sha[:7]}`): {checks}")
    return tuple(line for line in lines if line)

"""Per-thread git worktrees, so two threads in one channel never edit the same files.

Each thread of a ``worktree = true`` workspace works in its own worktree on its own branch
(``agy/<thread slug>``). Removing a worktree never loses commits: the branch stays, and
``git worktree remove`` (without --force) refuses a tree with uncommitted changes.

git runs through :mod:`bridge.core.git` (no hooks, no fsmonitor, no pager or credential helper,
a deadline); the operations that read what an agent wrote (checking out a worktree, checking
one is clean before removing it) run in a sandbox of their own when the bridge has one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from bridge.agy.sandbox import Sandbox
from bridge.core.git import GitError, run_git

log = logging.getLogger(__name__)


class WorktreeError(GitError):
    """git refused; the message carries git's own words."""


async def _git(
    repo: Path,
    *args: str,
    sandbox: Sandbox | None = None,
    common: Path | None = None,
    writable: tuple[Path, ...] = (),
) -> str:
    try:
        return await run_git(repo, *args, sandbox=sandbox, common=common, writable=writable)
    except GitError as exc:
        raise WorktreeError(str(exc)) from None


async def common_dir(repo: Path) -> Path:
    """The repository's git directory (``.git`` of the main checkout), absolute."""
    raw = await _git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    return Path(raw)


async def is_repository(path: Path) -> bool:
    try:
        return await _git(path, "rev-parse", "--is-inside-work-tree") == "true"
    except (WorktreeError, OSError):
        return False


async def ensure_worktree(
    repo: Path, path: Path, branch: str, *, sandbox: Sandbox | None = None
) -> bool:
    """Make ``path`` a worktree of ``repo`` on ``branch``; True when it was just created."""
    if (path / ".git").exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    # Reads only the worktrees' back-links (and must see every worktree, wherever it is).
    await _git(repo, "worktree", "prune")
    existing = await _git(repo, "branch", "--list", branch)
    # The checkout reads objects the agents wrote: in a sandbox of its own.
    common = await common_dir(repo) if sandbox is not None else None
    add = [str(path), branch] if existing else ["-b", branch, str(path)]
    await _git(
        repo, "worktree", "add", *add, sandbox=sandbox, common=common, writable=(path.parent,)
    )
    return True


async def remove_worktree(repo: Path, path: Path, *, sandbox: Sandbox | None = None) -> bool:
    """Remove a clean worktree (the branch and its commits stay). False when it was kept."""
    if not (path / ".git").exists():
        return False
    try:
        # Checking that the tree is clean reads the agent's files: sandboxed too.
        await _git(
            repo,
            "worktree",
            "remove",
            str(path),
            sandbox=sandbox,
            common=await common_dir(repo) if sandbox is not None else None,
            writable=(path.parent,),
        )
    except WorktreeError as exc:
        log.info("kept worktree %s: %s", path, exc)
        return False
    return True

"""Per-thread git worktrees, so two threads in one channel never edit the same files.

Each thread of a ``worktree = true`` workspace works in its own worktree on its own branch
(``agy/<thread slug>``). Removing a worktree never loses commits: the branch stays, and
``git worktree remove`` (without --force) refuses a tree with uncommitted changes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio

log = logging.getLogger(__name__)


class WorktreeError(Exception):
    """git refused; the message carries git's own words."""


async def _git(repo: Path, *args: str) -> str:
    done = await anyio.run_process(["git", "-C", str(repo), *args], check=False)
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        raise WorktreeError(f"git {' '.join(args[:2])} failed: {detail}")
    return done.stdout.decode("utf-8", "replace").strip()


async def is_repository(path: Path) -> bool:
    try:
        return await _git(path, "rev-parse", "--is-inside-work-tree") == "true"
    except (WorktreeError, OSError):
        return False


async def ensure_worktree(repo: Path, path: Path, branch: str) -> bool:
    """Make ``path`` a worktree of ``repo`` on ``branch``; True when it was just created."""
    if (path / ".git").exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    await _git(repo, "worktree", "prune")
    existing = await _git(repo, "branch", "--list", branch)
    if existing:
        await _git(repo, "worktree", "add", str(path), branch)
    else:
        await _git(repo, "worktree", "add", "-b", branch, str(path))
    return True


async def remove_worktree(repo: Path, path: Path) -> bool:
    """Remove a clean worktree (the branch and its commits stay). False when it was kept."""
    if not (path / ".git").exists():
        return False
    try:
        await _git(repo, "worktree", "remove", str(path))
    except WorktreeError as exc:
        log.info("kept worktree %s: %s", path, exc)
        return False
    return True

"""A thread's directories: its working directory (maybe a repository of its own), its
attachments."""

from __future__ import annotations

import logging
from pathlib import Path

from bridge.agy.sandbox import ATTACHMENTS_DIR, Isolation, Sandbox
from bridge.config import Config
from bridge.core.attachments import save_attachments
from bridge.core.events import ChatAdapter
from bridge.core.store import Store
from bridge.core.store.rows import StoredMessage
from bridge.core.workspaces import Place
from bridge.core.worktrees import (
    WorktreeError,
    branch_tip,
    bring_back,
    commits_stat,
    ensure_worktree,
    is_repository,
    remove_worktree,
)

log = logging.getLogger(__name__)


def hidden_paths(config: Config, isolation: Isolation) -> tuple[Path, ...]:
    """Where no sandbox hides them, the paths the agent's read tools are refused: the config
    file (it holds the chat tokens) and the data directory."""
    if isolation.isolated:
        return ()
    paths = [config.bridge.data_dir.resolve()]
    if config.source is not None:
        paths.append(config.source.resolve())
    return tuple(paths)


async def prepare_workdir(place: Place, sandbox: Sandbox | None) -> str | None:
    """Make the thread's working directory; the notice to post when a worktree was made."""
    if place.repo is None or place.branch is None:
        place.workdir.mkdir(parents=True, exist_ok=True)
        return None
    if not await is_repository(place.repo):
        raise WorktreeError(f"{place.repo} is not a git repository (worktree = true)")
    if await ensure_worktree(place.repo, place.workdir, place.branch, sandbox=sandbox):
        return (
            f"This thread works on its own branch `{place.branch}` (in a repository of its "
            f"own made from `{place.repo}`), so other threads do not touch its files."
        )
    return None


async def cleanup_workdir(place: Place | None, sandbox: Sandbox | None, key: str) -> None:
    if (
        place is None
        or place.repo is None
        or place.workspace is None
        or place.workspace.worktree_cleanup != "remove"
    ):
        return
    try:
        await remove_worktree(place.repo, place.workdir, sandbox=sandbox, branch=place.branch)
    except OSError:
        log.warning("could not remove a worktree", exc_info=True, extra={"chat_thread": key})


async def bring_branch_back(place: Place | None, sandbox: Sandbox | None, key: str) -> list[str]:
    """A worktree thread's branch into the workspace's repository (after a turn): where the
    operator and other threads see it. A failure is logged; the thread carries on. The note
    for the answer's end: the new commits' one-line stat, when the turn committed."""
    if place is None or place.repo is None or place.branch is None:
        return []
    try:
        before = await branch_tip(place.repo, place.branch)
        await bring_back(place.repo, place.workdir, place.branch, sandbox=sandbox)
        return await commits_stat(place.repo, place.branch, before)
    except (WorktreeError, OSError):
        log.warning(
            "could not bring a thread's branch back", exc_info=True, extra={"chat_thread": key}
        )
        return []


async def ensure_saved(
    message: StoredMessage, adapter: ChatAdapter, store: Store, place: Place, max_bytes: int
) -> StoredMessage:
    """The message with its attachments saved in the thread's session directory."""
    if message.ready:
        return message
    saved = await save_attachments(
        adapter,
        message.attachments,
        place.session_dir / ATTACHMENTS_DIR,
        f"{message.id:06d}",
        max_bytes,
        # The sessions' folder is the bridge's own (hidden from every sandbox).
        root=place.session_dir.parent,
    )
    await store.set_saved(message.id, saved)
    return message.model_copy(update={"saved": saved})

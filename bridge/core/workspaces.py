"""Where each thread's agent works, and where its session directory lives."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from bridge.config import Config, WorkspaceSection
from bridge.core.events import ThreadRef
from bridge.safe_files import read_small

# A workspace's notes become a rule file (refused over 24,000 bytes): more is never read.
NOTES_MAX_BYTES = 256 * 1024


@dataclass(frozen=True)
class Place:
    workdir: Path
    session_dir: Path
    notes: str
    workspace: WorkspaceSection | None
    # Set when the thread works in a repository of its own made from the workspace's.
    repo: Path | None = None
    branch: str | None = None


def thread_slug(ref: ThreadRef) -> str:
    """A short stable name for a thread, safe as a path component."""
    digest = hashlib.sha256(ref.key.encode()).hexdigest()[:16]
    return f"{ref.platform}-{digest}"


def find_workspace(config: Config, ref: ThreadRef) -> WorkspaceSection | None:
    default = None
    for workspace in config.workspaces:
        if workspace.is_default:
            default = workspace
        elif ref.platform == "slack" and workspace.channel == ref.channel:
            return workspace
        elif ref.platform == "matrix" and workspace.room == ref.channel:
            return workspace
        elif workspace.channel and workspace.channel == ref.channel:
            return workspace
    return default


def move_places(config: Config, old: ThreadRef, new: ThreadRef) -> None:
    """A thread moved to another key: its session directory (agy's private state with its
    conversation) and its own workspace follow it. A configured workspace is the same for
    both; a worktree of one stays where it is (its branch keeps the old name) and the new key
    starts its own."""
    data_dir = config.bridge.data_dir.resolve()
    folders = ["sessions"]
    if find_workspace(config, old) is None and find_workspace(config, new) is None:
        folders.append("workspaces")
    for folder in folders:
        source, dest = data_dir / folder / thread_slug(old), data_dir / folder / thread_slug(new)
        if source.is_dir() and not source.is_symlink() and not os.path.lexists(dest):
            os.replace(source, dest)


def workspace_at(config: Config, path: str) -> WorkspaceSection | None:
    """The [[workspaces]] entry whose path is ``path``."""
    wanted = Path(path).expanduser()
    return next((w for w in config.workspaces if w.path.expanduser() == wanted), None)


def place_for(config: Config, ref: ThreadRef, workspace_path: str | None = None) -> Place:
    """``workspace_path``: the thread's own [[workspaces]] entry (a schedule's), else the one
    of its channel."""
    data_dir = config.bridge.data_dir.resolve()  # once: resolving reads every path component
    slug = thread_slug(ref)
    session_dir = data_dir / "sessions" / slug
    chosen = workspace_at(config, workspace_path) if workspace_path else None
    workspace = chosen or find_workspace(config, ref)
    repo = branch = None
    if workspace is None:
        workdir = data_dir / "workspaces" / slug
    elif workspace.worktree:
        repo = workspace.path.expanduser().resolve()
        branch = f"agy/{slug}"
        workdir = data_dir / "worktrees" / slug
    else:
        workdir = workspace.path.expanduser().resolve()
    notes = ""
    if workspace is not None and workspace.notes_file is not None:
        # It may lie in the workspace, where the agent could swap it for a FIFO or a link:
        # read without blocking, size-capped, and never through a link at its last step.
        path = workspace.notes_file.expanduser()
        folder = Path(os.path.realpath(path.parent))
        notes = read_small(folder / path.name, NOTES_MAX_BYTES).decode("utf-8")
    return Place(
        workdir=workdir,
        session_dir=session_dir,
        notes=notes,
        workspace=workspace,
        repo=repo,
        branch=branch,
    )

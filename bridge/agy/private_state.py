"""Each thread's own agy state: a private directory in place of each of agy's state directories.

agy keeps everything in its state directory (``~/.gemini``): its login, its configuration
(global rules, MCP servers, settings, cached tool schemas) and every conversation. A sandbox
that bound the operator's directory read-write let one thread's agent leave configuration
there that every other thread's agy then loaded, and read every other conversation. So each
thread's sandbox shows, where agy expects each state directory, a private directory of that
thread, and inside it only the login entries of the shared directory, read-only: whatever agy
(or the agent) writes stays in the thread; a write to a login entry fails.

Where the private directories live:

- ``<session>/agy-state/<name>-<hash>``: beside the thread's session, kept across idle and
  restarts (so ``--conversation`` resumes);
- ``<state dir>/.agy-bridge-threads/<thread>`` with ``[store] shared_agy_state``: on the
  storage every instance shares, so another instance taking the thread over resumes it.

Inside the sandbox a private directory is read-only but for :data:`WRITABLE`, what agy itself
must write (its conversations and their artifacts, its scratch folder, cached MCP tool
schemas): everything agy reads as configuration or instructions there (``GEMINI.md``,
``settings.json``, ``mcp_config.json``, ``hooks.json``, plugins, skills, commands, rules) is the
bridge's. Before every start the bridge prepares it: whatever lies in the private directory
outside :data:`WRITABLE` and the login entries' places is removed (a file left by an agent, or
by agy before this layout, changes nothing at the next start).

The bridge also checks that the path down to the private directory, and to each login entry's
and writable folder's place in it, is made of real directories (the agent could have put a
symlink there while it ran, through its session directory or a writable folder; bubblewrap
would follow it on the host), creates those mount points, and, the first time, moves the
thread's conversation out of the shared directory (the layout before private state).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict

log = logging.getLogger(__name__)

PRIVATE_DIR = "agy-state"
THREADS_DIR = ".agy-bridge-threads"
# Where one conversation's files lie in a state directory, as far as each layout is known:
# the simulator's (conversations/<id>.json, brain/<id>/) and agy's: antigravity-cli/brain/<id>/
# is recorded (transcriptPath, artifactDirectoryPath); antigravity-cli/conversations/<id>.pb is
# the layout of Antigravity's own conversations, assumed for the CLI (docs/agy.md).
CONVERSATION_FILES = (
    "conversations/{id}.json",
    "brain/{id}",
    "antigravity-cli/brain/{id}",
    "antigravity-cli/conversations/{id}.pb",
)
# What agy must write in its state directory (relative to it), writable in the sandbox; all else
# of the private directory is read-only there. Folders only: a file agy replaces atomically
# (write, then rename) cannot be a mount point. The simulator's (``conversations``, ``brain``)
# and agy's (``antigravity-cli/brain`` holds each conversation's transcript and artifacts,
# ``conversations`` their records, ``scratch`` the agent's own folder, ``mcp`` the tool schemas
# agy caches; docs/agy.md).
WRITABLE = (
    "conversations",
    "brain",
    "antigravity-cli/brain",
    "antigravity-cli/conversations",
    "antigravity-cli/scratch",
    "antigravity-cli/mcp",
)
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class StateLayout(BaseModel):
    """agy's shared state directories, its login in them, and where private ones live."""

    model_config = ConfigDict(frozen=True)

    shared: tuple[Path, ...] = ()  # absolute, resolved
    login_entries: tuple[str, ...] = ()
    on_shared_storage: bool = False

    def private_dir(self, shared: Path, session_dir: Path) -> Path:
        if self.on_shared_storage:
            return shared / THREADS_DIR / session_dir.name
        return session_dir / PRIVATE_DIR / _label(shared)

    def anchor(self, shared: Path, session_dir: Path) -> Path:
        """The directory the bridge made, under which the agent could have changed things."""
        return shared / THREADS_DIR if self.on_shared_storage else session_dir


def _label(shared: Path) -> str:
    """A stable folder name per shared directory (two can share a base name)."""
    digest = hashlib.sha256(str(shared).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_-]", "_", shared.name.lstrip(".")) or "state"
    return f"{name}-{digest}"


@dataclass(frozen=True)
class StateBind:
    """One private directory bound where agy expects ``shared``, with the login entries."""

    private: Path
    shared: Path
    login: tuple[Path, ...]  # the shared login entries there are, to bind read-only on top


def binds(layout: StateLayout, session_dir: Path) -> list[StateBind]:
    """What each sandbox of this session binds for agy's state (reads, never writes)."""
    found = []
    for shared in layout.shared:
        login = tuple(
            shared / entry for entry in layout.login_entries if os.path.exists(shared / entry)
        )
        found.append(StateBind(layout.private_dir(shared, session_dir), shared, login))
    return found


def prepare(layout: StateLayout, session_dir: Path, conversation: str | None = None) -> list[str]:
    """Make every private directory of this session safe to bind, before each start.

    Returns the conversation files moved out of the shared directories (relative paths), which
    happens once: when a private directory is first made and the thread has a conversation.
    """
    moved: list[str] = []
    for bind in binds(layout, session_dir):
        bind.shared.mkdir(mode=0o700, parents=True, exist_ok=True)
        anchor = layout.anchor(bind.shared, session_dir)
        anchor.mkdir(mode=0o700, parents=True, exist_ok=True)
        first = not os.path.lexists(bind.private)
        _real_dirs(anchor, bind.private)
        login = [source.relative_to(bind.shared) for source in bind.login]
        _reset(bind.private, [*login, *map(Path, WRITABLE)])
        for writable in WRITABLE:
            _real_dirs(bind.private, bind.private / writable)
        for source, entry in zip(bind.login, login, strict=True):
            mount_point(bind.private, entry, source.is_dir())
        if first and conversation:
            moved += _adopt(bind, conversation)
    return moved


def _real_dirs(anchor: Path, target: Path) -> None:
    """Every component from ``anchor`` down to ``target`` a real directory (made if missing);
    a symlink or a file in the way is removed."""
    current = str(anchor)
    for part in target.relative_to(anchor).parts:
        current = os.path.join(current, part)
        try:
            is_dir = stat.S_ISDIR(os.lstat(current).st_mode)  # one call: a link is no folder
        except FileNotFoundError:
            os.mkdir(current, 0o700)
            continue
        if not is_dir:
            os.unlink(current)
            os.mkdir(current, 0o700)


def _reset(private: Path, kept: list[Path]) -> None:
    """Remove from ``private`` everything but the ``kept`` paths (relative) and their parents:
    what is read-only in the sandbox is the bridge's, whoever wrote it before. Never follows a
    link (a link is removed as itself)."""
    keep = {Path(*entry.parts[: i + 1]) for entry in kept for i in range(len(entry.parts))}

    def walk(folder: Path, relative: Path) -> None:
        for child in sorted(os.listdir(folder)):
            path, rel = folder / child, relative / child
            if rel in kept:
                continue
            if rel not in keep:
                _remove(path)
            elif path.is_dir() and not path.is_symlink():
                walk(path, rel)

    walk(private, Path())


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _clear_unless_dir(path: Path) -> None:
    if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
        path.unlink()


def mount_point(private: Path, entry: Path, is_dir: bool) -> None:
    """The place of one login entry in a private directory: real parents, and a file (or a
    directory) that is not a symlink, for bubblewrap to bind the shared entry onto."""
    _real_dirs(private, private / entry.parent)
    place = private / entry
    if place.is_symlink():
        place.unlink()
    elif is_dir and os.path.lexists(place) and not place.is_dir():
        place.unlink()
    elif not is_dir and place.is_dir():
        shutil.rmtree(place)
    if is_dir:
        place.mkdir(mode=0o700, exist_ok=True)
    elif not os.path.lexists(place):
        place.touch(mode=0o600)


def _adopt(bind: StateBind, conversation: str) -> list[str]:
    """Move one conversation's files from the shared directory into the private one."""
    if not _SAFE_ID.match(conversation):
        return []
    moved = []
    for relative in _conversation_files(conversation):
        source, dest = bind.shared / relative, bind.private / relative
        if not os.path.lexists(source) or source.is_symlink() or os.path.lexists(dest):
            continue
        _real_dirs(bind.private, dest.parent)
        try:
            shutil.move(source, dest)
        except OSError as exc:
            log.warning("could not move a conversation file into the thread's state: %s", exc)
            continue
        moved.append(relative)
    return moved


def _conversation_files(conversation: str) -> Iterator[str]:
    for pattern in CONVERSATION_FILES:
        yield str(PurePosixPath(pattern.format(id=conversation)))

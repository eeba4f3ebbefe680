"""Each thread's own agy state: a private directory in place of each of agy's state directories.

agy keeps everything in its state directory (``~/.gemini``): its login, its configuration
(global rules, MCP servers, settings, cached tool schemas) and every conversation. A sandbox
that bound the operator's directory read-write let one thread's agent leave configuration
there that every other thread's agy then loaded, and read every other conversation. So each
thread's sandbox shows, where agy expects each state directory, a private directory of that
thread, and inside it only the login entries of the shared directory, read-only: whatever agy
(or the agent) writes stays in the thread; a write to a login entry fails.

Where the private directories live, so that every instance that may take a thread over finds
its conversation (the lease decides which one runs it; see docs/architecture.md):

- ``<state dir>/.agy-bridge-threads/<thread>`` by default: inside agy's own state directory,
  so on one host every instance of the bridge (whatever its ``data_dir``) finds it, and on
  storage several hosts share when agy's state directory is there;
- ``<state_root>/<thread>/<name>-<hash>`` with ``[agy] state_root``: one folder for all of a
  thread's private directories, on storage the operator chooses (shared across hosts).

Earlier layouts are moved in (:func:`migrate`, and again before a thread's start): the private
directories once kept beside each session, ``<session>/agy-state/<name>-<hash>``, where only the
instance whose data directory held them could resume the conversation, and, when a root is set,
the per-state-directory folders above.

Only the agy of the instance holding the thread's lease may use these files: agy is started
holding a lock on the thread's private state (:func:`lock_paths`, a file beside it that the
sandbox does not show), which it and everything it started keep until they are gone; an agy of
another instance waits for it, so a takeover never runs two agy on one conversation's files.

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

import errno
import fcntl
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

# Beside each session (the layout before private state followed the lease): moved out.
PRIVATE_DIR = "agy-state"
THREADS_DIR = ".agy-bridge-threads"
LOCK_SUFFIX = ".lock"
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
    # ``[agy] state_root`` (absolute, resolved): None keeps them inside each state directory.
    root: Path | None = None

    def private_dir(self, shared: Path, session_dir: Path) -> Path:
        if self.root is not None:
            return self.root / session_dir.name / _label(shared)
        return shared / THREADS_DIR / session_dir.name

    def anchor(self, shared: Path, session_dir: Path) -> Path:
        """The directory the bridge made, under which the agent could have changed things."""
        return self.root if self.root is not None else shared / THREADS_DIR

    def lock_path(self, shared: Path, session_dir: Path) -> Path:
        """Held by the thread's running agy: beside its private directory, never inside it."""
        private = self.private_dir(shared, session_dir)
        return private.with_name(private.name + LOCK_SUFFIX)

    def earlier_places(self, shared: Path, session_dir: Path) -> list[tuple[Path, Path]]:
        """(the folder an earlier layout made, a directory of it that must be real) for one
        thread's private directory: moved in at its first start here."""
        places = [(session_dir / PRIVATE_DIR / _label(shared), session_dir)]
        if self.root is not None:
            places.append((shared / THREADS_DIR / session_dir.name, shared))
        return places


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
    A private directory an earlier layout kept elsewhere is moved into place first.
    """
    moved: list[str] = []
    for bind in binds(layout, session_dir):
        bind.shared.mkdir(mode=0o700, parents=True, exist_ok=True)
        anchor = _made_anchor(layout, bind.shared, session_dir)
        _move_in(layout, bind, session_dir)
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


def _move_in(layout: StateLayout, bind: StateBind, session_dir: Path) -> bool:
    """The thread's private directory from where an earlier layout kept it, when it is not in
    place yet. A link on the way is not followed (the agent could have made it)."""
    if os.path.lexists(bind.private):
        return False
    for old, base in layout.earlier_places(bind.shared, session_dir):
        if not _real_path(base, old):
            continue
        anchor = _made_anchor(layout, bind.shared, session_dir)
        _real_dirs(anchor, bind.private.parent)
        try:
            _move(old, bind.private)
        except OSError as exc:
            log.warning("could not move a thread's agy state to %s: %s", bind.private, exc)
            return False
        _remove_if_empty(old.parent, base)
        log.info("moved a thread's agy state from %s to %s", old, bind.private)
        return True
    return False


def _move(old: Path, new: Path) -> None:
    """One rename on one filesystem; across filesystems (a ``state_root`` on shared storage) a
    copy that keeps links as links and leaves out what is neither a file, a folder nor a link
    (the agent could have made a FIFO there: opening it would block the bridge)."""
    try:
        os.rename(old, new)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    try:
        shutil.copytree(old, new, symlinks=True, ignore=_special_files)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)  # no half copy for the next start to use
        raise
    shutil.rmtree(old)


def _special_files(folder: str, names: list[str]) -> set[str]:
    special = set()
    for name in names:
        mode = os.lstat(os.path.join(folder, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            special.add(name)
    return special


def _made_anchor(layout: StateLayout, shared: Path, session_dir: Path) -> Path:
    """The folder of every thread's private directories, made; inside a state directory it is
    the bridge's own, so a link there is removed (a configured root is resolved already)."""
    anchor = layout.anchor(shared, session_dir)
    if layout.root is None:
        _clear_unless_dir(anchor)
    anchor.mkdir(mode=0o700, parents=True, exist_ok=True)
    return anchor


def _real_path(base: Path, path: Path) -> bool:
    """``path`` and every directory from ``base`` down to it are real directories."""
    try:
        parts = path.relative_to(base).parts
    except ValueError:
        return False
    current = base
    for part in ("", *parts):
        current = current / part if part else current
        if current.is_symlink() or not current.is_dir():
            return False
    return True


def _remove_if_empty(folder: Path, base: Path) -> None:
    if folder == base or not folder.is_relative_to(base):
        return
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty (another state directory's folder is still there), or gone


def migrate(layout: StateLayout, sessions: Path) -> int:
    """Move every thread's private state an earlier layout kept under ``sessions`` (this
    instance's session directories) to where every instance finds it. Run at start, before any
    thread starts; returns how many private directories moved."""
    if not layout.shared or not sessions.is_dir() or sessions.is_symlink():
        return 0
    count = 0
    for session_dir in sorted(sessions.iterdir()):
        if session_dir.is_symlink() or not (session_dir / PRIVATE_DIR).is_dir():
            continue
        for bind in binds(layout, session_dir):
            count += _move_in(layout, bind, session_dir)
    return count


def lock_paths(layout: StateLayout, session_dir: Path) -> list[Path]:
    """The locks a thread's agy holds while it runs, one per private directory (each once:
    a second flock of the same file by the same agy would wait for the first)."""
    return list(dict.fromkeys(layout.lock_path(shared, session_dir) for shared in layout.shared))


class StateBusy(Exception):
    """Another agy (an earlier process, perhaps of a lost instance) still holds the state."""


def try_lock(paths: list[Path]) -> list[int]:
    """Open and lock every file of ``paths`` (made if missing, never through a link): the
    descriptors to hold, and to hand to agy, while it runs. Raises StateBusy, holding nothing,
    when one is held elsewhere."""
    held: list[int] = []
    try:
        for path in paths:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            held.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise StateBusy(str(path)) from None
                raise
    except BaseException:
        for fd in held:
            os.close(fd)
        raise
    return held


def conversation_reachable(layout: StateLayout, session_dir: Path, conversation: str) -> bool:
    """Whether this instance can resume ``conversation`` of the thread: its files are in the
    thread's private state here, or still in a shared directory (moved in at the first start),
    or the private directory is here in a layout the bridge does not know (agy is asked).
    Before a takeover: keep the conversation, or start one given the thread's history."""
    if not _SAFE_ID.match(conversation):
        return False
    if not layout.shared:
        return True  # no state directory to look in: agy is asked
    for bind in binds(layout, session_dir):
        earlier = [old for old, _ in layout.earlier_places(bind.shared, session_dir)]
        if any(_holds(private, conversation) for private in [bind.private, *earlier]):
            return True
        if _has_files(bind.shared, conversation):
            return True
    return False


def shared_has_conversation(shared_dirs: tuple[Path, ...], conversation: str) -> bool:
    """Without a sandbox agy uses its state directories themselves: the conversation is
    reachable where its files are in one of them (or where the layout is not one the bridge
    knows: agy is asked)."""
    if not _SAFE_ID.match(conversation):
        return False
    if any(_has_files(shared, conversation) for shared in shared_dirs):
        return True
    known = [shared / _top(pattern) for shared in shared_dirs for pattern in CONVERSATION_FILES]
    return not any(folder.exists() for folder in known)


def _holds(state: Path, conversation: str) -> bool:
    if not state.is_dir():
        return False
    if _has_files(state, conversation):
        return True
    return not any((state / _top(pattern)).exists() for pattern in CONVERSATION_FILES)


def _has_files(state: Path, conversation: str) -> bool:
    return any(os.path.lexists(state / f) for f in _conversation_files(conversation))


def _top(pattern: str) -> str:
    return pattern.split("/{id}")[0]


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

"""Every agy process in its own bubblewrap sandbox, so threads cannot see each other.

The sandbox starts from an empty root, binds in only what one thread's agent needs, and then
makes that root read-only (``--remount-ro /``): writes are denied by default. Writable, and
built in one place (:func:`writable_mounts`):

- the thread's working directory (a worktree thread's is a repository of its own, its ``.git``
  inside), the thread's session directory, the writable parts of its private agy state (what
  agy itself must write: conversations, caches; see :mod:`bridge.agy.private_state`), a
  private ``/tmp``, and the workspace's ``read_write`` extras.

Read-only (:func:`protected_mounts` binds them over the writable ones):

- what tools read as configuration or code inside the writable directories: the session's
  plugins (``.agents``), its ``attachments/``, the workspace's ``.agents``, ``.gemini``,
  ``AGENTS.md``/``GEMINI.md``, CI definitions and ``.gitmodules``, and a repository's
  ``config``, ``hooks/``, ``info/`` and ``objects/info/`` (where ``alternates`` lies);
- agy's private state apart from its writable parts (its configuration, prepared by the bridge
  at each start), agy's login (the shared state directories' login entries), the team
  repository's objects for a worktree thread (through ``objects/info/alternates``), the system
  (``/usr``, ``/etc``, ``/bin``, ``/lib*``, …), agy's installation and the workspace's
  ``read_only`` extras; the root itself and the home directory (what of them exists).

Hidden: everything else. Paths listed as hidden (the bridge's data directory, the config file
and its directory) stay hidden even when they lie under a bound directory: an empty tmpfs (or
``/dev/null`` for a file) is mounted over them, and the thread's own directories are bound
back on top.

agy gets its own PID namespace (it cannot see the bridge or other threads' processes in
``/proc``) and ``--die-with-parent``: when the sandbox's first process ends, the kernel ends
every process the agent started, wherever it tried to hide. Its network is its own where the
host allows (``bridge.agy.network``: the internet, not the host's loopback), its processes and
memory are capped (``bridge.agy.limits``), and every tmpfs here has a size.

Nothing here knows about chat: the caller says which directories are the thread's.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bridge.agy import private_state
from bridge.agy.network import Network, shared
from bridge.agy.plugin import agents_dir
from bridge.safe_files import ensure_real_dir, read_small

# The system, visible read-only. Where one of them is a symlink (/bin -> usr/bin on merged-/usr
# systems) the sandbox gets the same symlink.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Namespaces every sandbox gets (the network is deliberately not among them), and no
# capabilities: a bridge running as root would otherwise hand them on (bubblewrap keeps them for
# root), and with them mount or mknod reach every file on the host.
NAMESPACE_ARGS = (
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--die-with-parent",
    "--cap-drop",
    "ALL",
)
# After every mount: the sandbox's root read-only. Writes are denied by default; only the
# mounts of :func:`writable_mounts` (their own mounts, untouched by this) stay writable.
READ_ONLY_ROOT = ("--remount-ro", "/")
PROBE_TIMEOUT = 10.0
# Every tmpfs has a size (bwrap's default is half the host's memory, each): the sandbox's root
# (mount points, and whatever is written outside the binds, a home that is not bound), /dev/shm,
# and the empty folders that hide paths. /tmp's is configured ([agy] tmp_size). Under cgroups
# all of them count against the thread's memory cap too (bridge.agy.limits).
ROOT_TMPFS_BYTES = 256 << 20
SHM_TMPFS_BYTES = 64 << 20
SMALL_TMPFS_BYTES = 1 << 20
DEFAULT_TMP_BYTES = 1 << 30
# A ``.git`` or ``gitdir`` file holds one path; anything longer is not one.
_GIT_FILE_BYTES = 8192
# The session's folder of attachments: the bridge writes there, the agent only reads.
ATTACHMENTS_DIR = "attachments"
# In a thread's working directory, what agy or the team's tools read as configuration or code
# (the gate's protected paths, bridge/core/approvals/paths.py): read-only in every sandbox.
# These folders are made (empty) where missing, so the agent cannot create them either.
PROTECTED_DIRS = (".agents", ".gemini")
# These are bound read-only where they exist (a missing file cannot be bound without leaving
# an empty one in the workspace). Names as git and agy spell them.
PROTECTED_FILES = ("AGENTS.md", "GEMINI.md", ".gitmodules", ".gitlab-ci.yml", ".github/workflows")
# In a git directory: what configures git or names other object stores, read-only.
GIT_CONFIG_PARTS = ("config", "hooks", "info", "objects/info")
# The root a sized tmpfs (before anything is mounted on it); /dev with a sized /dev/shm and
# otherwise read-only (its device nodes still work: a read-only mount refuses only files).
ROOT_ARGS = ("--size", str(ROOT_TMPFS_BYTES), "--tmpfs", "/")
DEV_ARGS = (
    "--dev",
    "/dev",
    "--size",
    str(SHM_TMPFS_BYTES),
    "--tmpfs",
    "/dev/shm",
    "--remount-ro",
    "/dev",
)


class ExtraBinds(BaseModel):
    """The operator's extra paths for the threads of one workspace."""

    model_config = ConfigDict(frozen=True)

    # The workspace directory; a worktree thread matches the repository it was made from.
    root: Path
    read_only: tuple[Path, ...] = ()
    read_write: tuple[Path, ...] = ()


class Sandbox(BaseModel):
    """What every sandbox of one bridge shows and hides. All paths absolute."""

    model_config = ConfigDict(frozen=True)

    bwrap: str
    # Never visible, even under a bound directory (data directory, config file, its folder).
    hidden: tuple[Path, ...] = ()
    # agy's own state directories: each thread sees a private directory in each one's place,
    # with these entries of the shared one (agy's login) bound in read-only.
    state_dirs: tuple[Path, ...] = ()
    login_entries: tuple[str, ...] = ()
    # ``[agy] state_root``: where the private directories live (None: in each state directory).
    state_root: Path | None = None
    # agy's installation, read-only.
    install: tuple[Path, ...] = ()
    extras: tuple[ExtraBinds, ...] = ()
    # The repositories of ``worktree = true`` workspaces: never writable from a sandbox.
    repos: tuple[Path, ...] = ()
    # The size of the sandbox's /tmp.
    tmp_size: int = DEFAULT_TMP_BYTES

    def extras_for(self, workdir: Path, repo: Path | None = None) -> ExtraBinds | None:
        """The operator's extras for a thread working in ``workdir`` (a worktree thread's
        ``repo`` is the workspace's repository)."""
        roots = {workdir.resolve()}
        if repo is not None:
            roots.add(repo.resolve())
        return next((extra for extra in self.extras if extra.root.resolve() in roots), None)


MountKind = Literal["ro", "rw", "ro-try", "rw-try", "tmpfs", "hide-file", "symlink"]


@dataclass(frozen=True)
class Mount:
    kind: MountKind
    dest: Path
    source: Path | None = None
    # A tmpfs's size in bytes (None: small, SMALL_TMPFS_BYTES).
    size: int | None = None

    @property
    def depth(self) -> int:
        return len(self.dest.parts)

    def args(self) -> list[str]:
        flag = {
            "ro": "--ro-bind",
            "rw": "--bind",
            "ro-try": "--ro-bind-try",
            "rw-try": "--bind-try",
            "hide-file": "--ro-bind",
            "symlink": "--symlink",
        }.get(self.kind)
        if self.kind == "tmpfs":
            return ["--size", str(self.size or SMALL_TMPFS_BYTES), "--tmpfs", str(self.dest)]
        assert flag is not None and self.source is not None
        return [flag, str(self.source), str(self.dest)]


# Where two mounts sit at the same depth, binds go first and hiding last, so hiding wins.
_RANK = {"symlink": 0, "ro": 1, "ro-try": 1, "rw": 2, "rw-try": 2, "tmpfs": 3, "hide-file": 3}


def _under(path: Path, parent: Path) -> bool:
    """``path`` is ``parent`` or lies below it (both absolute and normalised, as every mount's
    path is). On strings: called for every pair of mounts, ``Path.parents`` is too slow."""
    inside, folder = str(path), str(parent)
    return inside == folder or inside.startswith(folder if folder == "/" else folder + "/")


def git_common_dir(workdir: Path) -> Path | None:
    """For a git worktree (``.git`` is a file), the repository's shared git directory.

    The agent can write that ``.git`` file, so it is believed only when git's own linkage holds
    both ways: ``gitdir:`` names ``<common>/worktrees/<name>``, whose ``gitdir`` file names this
    worktree back, and ``<common>`` looks like a git directory. Anything else binds nothing.
    """
    workdir = workdir.resolve()
    dotgit = workdir / ".git"
    try:
        # Read without blocking and size-capped: the agent may have made either file a FIFO.
        line = read_small(dotgit, _GIT_FILE_BYTES).decode("utf-8").strip()
        if not line.startswith("gitdir:"):
            return None
        gitdir = (workdir / line.removeprefix("gitdir:").strip()).resolve()
        back = Path(read_small(gitdir / "gitdir", _GIT_FILE_BYTES).decode("utf-8").strip())
    except (OSError, UnicodeDecodeError):
        return None
    common = gitdir.parent.parent
    if gitdir.parent.name != "worktrees" or (gitdir.parent / "..").resolve() != common:
        return None
    if (gitdir / back).resolve() != dotgit:
        return None
    if not ((common / "HEAD").is_file() and (common / "objects").is_dir()):
        return None
    return common


def system_mounts() -> list[Mount]:
    mounts = []
    for name in SYSTEM_PATHS:
        path = Path(name)
        if path.is_symlink():
            mounts.append(Mount("symlink", path, Path(os.readlink(path))))
        elif path.is_dir():
            mounts.append(Mount("ro", path))
    # DNS: /etc/resolv.conf often points into /run (systemd-resolved), which is not bound.
    resolv = Path("/etc/resolv.conf")
    if resolv.is_symlink():
        target = resolv.resolve()
        if target.exists() and not _under(target, Path("/etc")):
            mounts.append(Mount("ro", target))
    return mounts


def plan(
    sandbox: Sandbox, *, workdir: Path, session_dir: Path, repo: Path | None = None
) -> list[Mount]:
    """Every mount of one thread's sandbox, in the order bubblewrap must apply them.

    ``repo``: for a worktree thread, the workspace's repository, whose objects its own
    repository reads (read-only) through ``objects/info/alternates``.
    """
    workdir = workdir.resolve()
    session_dir = session_dir.resolve()
    mounts = system_mounts()
    mounts += [Mount("ro", path) for path in _resolved(sandbox.install)]
    extra = sandbox.extras_for(workdir, repo)
    if extra is not None:
        mounts += [Mount("ro-try", path) for path in _resolved(extra.read_only)]
    hidden_paths = _resolved(sandbox.hidden)
    mounts += writable_mounts(sandbox, workdir=workdir, session_dir=session_dir, repo=repo)
    mounts += protected_mounts(workdir=workdir, session_dir=session_dir)
    mounts += shared_git_mounts(workdir, repo, hidden_paths)
    mounts += state_mounts(sandbox, session_dir)
    mounts = _without_redundant(mounts, hidden_paths)
    return ordered(mounts, hidden_paths)


def writable_mounts(
    sandbox: Sandbox, *, workdir: Path, session_dir: Path, repo: Path | None = None
) -> list[Mount]:
    """Everything a thread's sandbox may write, in one list (all else is read-only or absent):
    a private ``/tmp``, the working directory, the session directory, the workspace's
    ``read_write`` extras and what agy must write of its private state. The read-only parts
    inside them are :func:`protected_mounts` and the state's configuration."""
    mounts = [
        Mount("tmpfs", Path("/tmp"), size=sandbox.tmp_size),
        Mount("rw", workdir),
        Mount("rw", session_dir),
    ]
    extra = sandbox.extras_for(workdir, repo)
    if extra is not None:
        mounts += [Mount("rw-try", path) for path in _resolved(extra.read_write)]
    mounts += state_writable_mounts(sandbox, session_dir)
    return mounts


def protected_mounts(*, workdir: Path, session_dir: Path) -> list[Mount]:
    """Read-only inside the writable directories: what configures agy, git or CI there.

    Each must be a real file or folder (a bind follows links, and would show a link's target):
    :func:`prepare_binds` makes the folders real before a start; a link found in the place of
    one of the others is not bound (and the agent could not have made it: the place is
    read-only from the start on).
    """
    # The session's plugins: the agent must not rewrite its hooks (the approval gate) nor
    # write into a rule file, which may be a hard link shared with other sessions. ``.agents``
    # rather than the plugin folder: a mount point cannot be renamed, its parent could be.
    mounts = [Mount("ro", agents_dir(session_dir)), *attachment_mounts(session_dir)]
    mounts += [Mount("ro", workdir / name) for name in protected_names(workdir)]
    gitdir = workdir / ".git"
    if _is_real_dir(gitdir):
        # The repository's own git directory stays writable (its commits, its refs) but for
        # what configures git; where one of those is not real, none of it is writable.
        mounts += [m for m in git_dir_mounts(gitdir) if m.kind == "ro"]
    return mounts


def protected_names(workdir: Path) -> list[str]:
    """The protected folders and files at the top of ``workdir`` as they are spelt there (git
    and agy on a case-insensitive disk read ``agents.md`` too), real files or folders only."""
    wanted = {name.lower() for name in (*PROTECTED_DIRS, *PROTECTED_FILES) if "/" not in name}
    try:
        found = [name for name in os.listdir(workdir) if name.lower() in wanted]
    except OSError:
        found = []
    nested = [name for name in PROTECTED_FILES if "/" in name]
    return [name for name in [*found, *nested] if _is_real(workdir / name)]


def shared_git_mounts(workdir: Path, repo: Path | None, hidden: Sequence[Path]) -> list[Mount]:
    """Read-only: the team repository's objects for a worktree thread (its own repository
    reads them through ``objects/info/alternates``, which the bridge writes); for a working
    directory that is a linked worktree of another repository (``.git`` a file, an operator's
    own layout), that repository's git directory, so that git reads work there. Neither is
    ever writable: nothing a thread writes moves another's refs or changes its objects."""
    commons = []
    if repo is not None:
        commons.append(team_git_dir(repo) / "objects")
    common = git_common_dir(workdir)
    if common is not None:
        commons.append(common)
    return [
        Mount("ro", path)
        for path in commons
        if _is_real_dir(path) and not any(_under(path, h) or _under(h, path) for h in hidden)
    ]


def team_git_dir(repo: Path) -> Path:
    """The git directory of a workspace's repository (``<repo>/.git``, or ``repo`` itself
    when it is a bare repository)."""
    repo = repo.resolve()
    return repo / ".git" if _is_real_dir(repo / ".git") else repo


def ordered(mounts: list[Mount], hidden_paths: Sequence[Path]) -> list[Mount]:
    """``mounts`` with the hidden paths hidden wherever a bind would show them, in the order
    bubblewrap must apply them."""
    mounts = list(mounts)
    binds = [m for m in mounts if m.kind in ("ro", "rw", "ro-try", "rw-try")]
    for hidden in hidden_paths:
        # Hiding matters only where a bind would show the path; elsewhere it is not there.
        if not any(_under(hidden, bind.dest) for bind in binds):
            continue
        # Inside another hidden folder it is gone already, unless a bind shows it again;
        # hiding it twice would put its mount point (an empty file or folder of that name)
        # into the other's empty tmpfs, for every thread to list.
        if any(_hides(parent, hidden, binds) for parent in hidden_paths):
            continue
        if hidden.is_dir():
            mounts.append(Mount("tmpfs", hidden))
        elif hidden.exists():
            mounts.append(Mount("hide-file", hidden, Path("/dev/null")))
    # Parents before children: a thread's own directory inside a hidden one is bound back on top.
    mounts.sort(key=lambda m: (m.depth, _RANK[m.kind]))
    return [Mount(m.kind, m.dest, m.source or m.dest, m.size) for m in mounts]


def git_dir_mounts(gitdir: Path) -> list[Mount]:
    """A git directory's configuration read-only (``config``, ``hooks/``, ``info/``,
    ``objects/info/``), for a sandbox that writes the rest of it. Each must be a real file or
    folder (a bind follows links); when one is not, the whole git directory is bound
    read-only instead."""
    readonly = [gitdir / name for name in GIT_CONFIG_PARTS]
    if not all(_is_real(path) for path in readonly):
        return [Mount("ro", gitdir)]
    return [Mount("rw", gitdir), *(Mount("ro", path) for path in readonly)]


def _is_real(path: Path) -> bool:
    try:
        mode = path.lstat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def attachment_mounts(session_dir: Path) -> list[Mount]:
    """The session's attachments, read-only: the agent reads what teammates sent, and cannot
    swap the folder for a link the bridge's next download would follow."""
    return [Mount("ro", session_dir / ATTACHMENTS_DIR)]


def prepare_binds(
    sandbox: Sandbox, *, workdir: Path, session_dir: Path, repo: Path | None = None
) -> None:
    """Make what the sandbox binds read-only exist as real folders (a missing path cannot be
    bound; a link there would be followed), before bubblewrap starts. Blocking: run it off the
    event loop."""
    del sandbox, repo  # the same for every sandbox and thread
    session_dir = session_dir.resolve()
    workdir = workdir.resolve()
    ensure_real_dir(session_dir, ATTACHMENTS_DIR)
    for name in PROTECTED_DIRS:
        ensure_real_dir(workdir, name)
    gitdir = workdir / ".git"
    if not _is_real_dir(gitdir):
        return
    ensure_real_dir(gitdir, "objects")
    for parent, name in ((gitdir, "hooks"), (gitdir, "info"), (gitdir / "objects", "info")):
        ensure_real_dir(parent, name)
    config = gitdir / "config"
    if not _is_real(config):
        if os.path.lexists(config):
            config.unlink()
        config.touch(mode=0o600)


def _hides(parent: Path, hidden: Path, binds: list[Mount]) -> bool:
    """Whether the hidden folder ``parent`` already hides ``hidden`` (no bind below ``parent``
    shows it again)."""
    if parent == hidden or not _under(hidden, parent) or not parent.is_dir():
        return False
    return not any(
        _under(bind.dest, parent) and bind.dest != parent and _under(hidden, bind.dest)
        for bind in binds
    )


def _without_redundant(mounts: list[Mount], hidden: list[Path]) -> list[Mount]:
    """Drop read-only binds already visible through a broader one (agy under /usr, say)."""
    kept: list[Mount] = []
    for mount in mounts:
        covered = (
            mount.kind == "ro"
            and mount.source in (None, mount.dest)
            and any(
                other is not mount
                and other.kind == "ro"
                and other.source in (None, other.dest)
                and mount.dest != other.dest
                and _under(mount.dest, other.dest)
                and not any(_under(mount.dest, h) and _under(h, other.dest) for h in hidden)
                # A writable bind in between (a session directory) makes it writable again.
                and not any(
                    between.kind != "ro"
                    and _under(mount.dest, between.dest)
                    and _under(between.dest, other.dest)
                    for between in mounts
                )
                for other in mounts
            )
        )
        duplicate = any(m.kind == mount.kind and m.dest == mount.dest for m in kept)
        if not covered and not duplicate:
            kept.append(mount)
    return kept


# --- agy's state: a private directory per thread, the shared login read-only -----------------


def state_layout(sandbox: Sandbox) -> private_state.StateLayout:
    # Each state directory once: the same one named twice (a configured path and the default
    # under the home) would be locked twice by one agy, which then waits for itself.
    return private_state.StateLayout(
        shared=tuple(dict.fromkeys(_resolved(sandbox.state_dirs))),
        login_entries=sandbox.login_entries,
        root=Path(os.path.realpath(sandbox.state_root)) if sandbox.state_root else None,
    )


def state_mounts(sandbox: Sandbox, session_dir: Path) -> list[Mount]:
    """Each private state directory where agy expects the shared one, read-only (agy's
    configuration in it is the bridge's, prepared at each start), and the login on top of it
    read-only. The folder of every thread's private directories is seen nowhere else: inside a
    state directory it is covered by the private bind; a ``state_root`` is among the hidden
    paths. The writable parts are :func:`state_writable_mounts`."""
    mounts = []
    for bind in private_state.binds(state_layout(sandbox), session_dir):
        mounts.append(Mount("ro", bind.shared, bind.private))
        mounts += [Mount("ro", entry) for entry in bind.login]
    return mounts


def make_mount_points(mounts: Sequence[Mount], prepared: Iterable[Path] = ()) -> None:
    """The mount points of binds below a directory bound from elsewhere (a private state
    directory, read-only in the sandbox: bubblewrap cannot make them there), made in that
    directory on the host, of real folders (a link in the way is removed, not followed).
    ``prepared``: mount points made just before (the state's own), skipped."""
    done = {str(path) for path in prepared}
    outers = [m for m in mounts if m.kind in ("ro", "rw") and m.source not in (None, m.dest)]
    inners = [m for m in mounts if str(m.dest) not in done]
    for outer in outers:
        assert outer.source is not None
        for inner in inners:
            if inner.dest == outer.dest or not _under(inner.dest, outer.dest):
                continue
            if inner.kind == "tmpfs":
                is_dir = True
            elif inner.kind == "hide-file":
                is_dir = False
            else:
                is_dir = (inner.source or inner.dest).is_dir()
            private_state.mount_point(outer.source, inner.dest.relative_to(outer.dest), is_dir)


def prepared_mount_points(sandbox: Sandbox, session_dir: Path) -> set[Path]:
    """Where :func:`prepare_state` made the mount points (in the private directories): the
    writable folders and the login entries, as the sandbox sees them."""
    return {
        path
        for bind in private_state.binds(state_layout(sandbox), session_dir.resolve())
        for path in (*(bind.shared / entry for entry in private_state.WRITABLE), *bind.login)
    }


def state_writable_mounts(sandbox: Sandbox, session_dir: Path) -> list[Mount]:
    """What agy must write of its private state (conversations, caches), writable."""
    return [
        Mount("rw", bind.shared / entry, bind.private / entry)
        for bind in private_state.binds(state_layout(sandbox), session_dir)
        for entry in private_state.WRITABLE
    ]


def prepare_state(sandbox: Sandbox, session_dir: Path, conversation: str | None) -> list[str]:
    """Before a start: the private directories made safe to bind (see ``private_state``)."""
    return private_state.prepare(state_layout(sandbox), session_dir.resolve(), conversation)


def _resolved(paths: Iterable[Path]) -> list[Path]:
    return [Path(os.path.realpath(path.expanduser())) for path in paths]


def wrap(
    sandbox: Sandbox,
    argv: Sequence[str],
    *,
    workdir: Path,
    session_dir: Path,
    conversation: str | None = None,
    repo: Path | None = None,
    network: Sequence[str] = (),
) -> list[str]:
    """The bubblewrap command line that runs ``argv`` in this thread's sandbox.

    ``conversation``: the one the thread resumes, moved into its private state the first time.
    ``repo``: a worktree thread's workspace repository (its objects are read through
    alternates).
    ``network``: bubblewrap's arguments for a network of its own (``bridge.agy.network``).
    """
    prepare_state(sandbox, session_dir, conversation)
    # Written by the plugin before agy starts; a session without one still gets it read-only.
    agents_dir(session_dir.resolve()).mkdir(mode=0o700, parents=True, exist_ok=True)
    prepare_binds(sandbox, workdir=workdir, session_dir=session_dir, repo=repo)
    args = [sandbox.bwrap, *NAMESPACE_ARGS, *network, *ROOT_ARGS, "--proc", "/proc", *DEV_ARGS]
    mounts = plan(sandbox, workdir=workdir, session_dir=session_dir, repo=repo)
    make_mount_points(mounts, prepared_mount_points(sandbox, session_dir))
    for mount in mounts:
        args += mount.args()
    # Last: the root (and what bubblewrap made in it: the home, mount points) read-only.
    args += READ_ONLY_ROOT
    args += ["--chdir", str(workdir.resolve()), "--", *argv]
    return args


def sandboxed_pid(bwrap_pid: int) -> int | None:
    """The host PID of the command bubblewrap started (agy), for signals such as SIGINT.

    bubblewrap does not forward signals: a SIGINT to it would kill the whole sandbox instead of
    interrupting agy's turn. Its first child is the namespace's init; agy is that init's oldest
    child (orphans of the agent's commands are re-parented to the init later).
    """
    children = _children(bwrap_pid)
    if not children:
        return None
    init = children[0]
    inside = _children(init)
    if not inside:
        return None
    return min(inside, key=lambda pid: _start_time(pid) or 0)


def _children(pid: int) -> list[int]:
    try:
        raw = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(part) for part in raw.split()]
    except (OSError, ValueError):
        pass
    # Kernels without CONFIG_PROC_CHILDREN: scan every process's parent.
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _stat_fields(int(entry.name))[1:2] == [str(pid)]:
            found.append(int(entry.name))
    return sorted(found)


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, …"""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return raw[raw.rfind(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    fields = _stat_fields(pid)
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


# --- does bubblewrap work on this host? ---------------------------------------------------------


def bwrap_problem(bwrap: str | None) -> str | None:
    """Why bubblewrap cannot sandbox agy here, or None when it can (a real sandbox is tried).

    Synchronous and quick (a few milliseconds): it runs once, at start.
    """
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    argv = [bwrap, *NAMESPACE_ARGS, *ROOT_ARGS, "--ro-bind", "/", "/", "--proc", "/proc"]
    argv += [*DEV_ARGS, "--size", str(SMALL_TMPFS_BYTES), "--tmpfs", "/tmp", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return f"bubblewrap ({bwrap}) did not finish a test sandbox within {PROBE_TIMEOUT:g} s"
    except OSError as exc:
        return f"bubblewrap ({bwrap}) cannot be run: {exc}"
    if done.returncode == 0:
        return None
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    detail = said[-1] if said else f"exit code {done.returncode}"
    return f"bubblewrap ({bwrap}) cannot create a sandbox on this host: {detail}"


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


@dataclass(frozen=True)
class Isolation:
    """Whether agy processes run sandboxed, and if not, why: for start, doctor and !status."""

    sandbox: Sandbox | None
    # Why threads are not isolated (empty when they are).
    problem: str = ""
    # The sandboxes' network (bridge.agy.network).
    network: Network = field(default_factory=lambda: shared("threads are not sandboxed"))

    @property
    def isolated(self) -> bool:
        return self.sandbox is not None

    def warning(self) -> str:
        """The loud sentence for logs and doctor when threads are not isolated."""
        return (
            "threads are NOT isolated from each other: every agent can read other threads' "
            "workspaces and session directories, the bridge's store and its config "
            f"({self.problem})"
        )

    def status_line(self) -> str:
        """One line for a thread's ``!status``."""
        if self.isolated:
            return "• 🔒 Isolated: this thread's agent sees only its own workspace (bubblewrap)"
        return (
            "• ⚠️ Not isolated: the agent can read other threads' files, the bridge's store and "
            f"its config ({self.problem})"
        )


def not_isolated(problem: str) -> Isolation:
    return Isolation(sandbox=None, problem=problem)


# --- can this sandbox work at all? (checked at start and by doctor) -----------------------------


def sandbox_problems(sandbox: Sandbox, executables: Sequence[Path] = ()) -> list[str]:
    """Why threads could not work in ``sandbox``, in words for the operator (empty: they can).

    ``executables`` are agy's command as the host finds it (the path and its target). Each of
    these would otherwise fail every thread with bubblewrap's terse error, or show a thread
    what the sandbox exists to hide.
    """
    problems: list[str] = []
    hidden = _resolved(sandbox.hidden)
    for path in [*_resolved(executables), *_resolved(sandbox.install)]:
        for folder in hidden:
            if _under(path, folder):
                problems.append(
                    f"agy's installation ({path}) lies inside {folder}, which every sandbox "
                    "hides (the bridge's data directory, its config file or the config's "
                    "folder): move the config file or the data directory out of agy's folder"
                )
                break
    for state in sandbox.state_dirs:
        if not state.expanduser().is_dir():
            problems.append(
                f"agy's state directory {state} does not exist (log in to agy once as the "
                "bridge's user, or fix [agy] state_dirs)"
            )
    for extra in sandbox.extras:
        for path in _resolved(extra.read_write):
            for folder in hidden:
                if _under(path, folder) or _under(folder, path):
                    problems.append(
                        f"the workspace {extra.root} lists {path} as read_write, which "
                        f"overlaps {folder} (the bridge's data directory or config): a thread "
                        "must never write there"
                    )
                    break
    problems += weakening_problems(sandbox)
    return list(dict.fromkeys(problems))


def weakening_problems(sandbox: Sandbox) -> list[str]:
    """A layout that would silently weaken what the sandbox promises (docs/host-safety.md),
    each naming the path: a writable extra that makes the root, the home directory, agy's
    state (its configuration) or a worktree workspace's repository writable; a login entry
    that would show what agy writes (conversations) from the shared directory."""
    problems = []
    # Neither may lie inside a writable extra (a folder below the home is the operator's
    # choice; the home itself is not)...
    containers = [(Path("/"), "the whole system"), (Path.home().resolve(), "the home directory")]
    # ...nor overlap one either way.
    overlaps = [
        *(
            (state, "agy's state directory, its configuration")
            for state in _resolved(sandbox.state_dirs)
        ),
        *((team_git_dir(repo), "the repository of a worktree workspace") for repo in sandbox.repos),
    ]
    for extra in sandbox.extras:
        for path in _resolved(extra.read_write):
            for place, what in [*containers, *overlaps]:
                inside = (place, what) in overlaps and _under(path, place)
                if _under(place, path) or inside:
                    problems.append(
                        f"the workspace {extra.root} lists {path} as read_write, which would "
                        f"make {place} ({what}) writable from every thread's sandbox"
                    )
    for entry in sandbox.login_entries:
        for writable in private_state.WRITABLE:
            if _under(Path(entry), Path(writable)) or _under(Path(writable), Path(entry)):
                problems.append(
                    f"[agy] login_entries names {entry}, which holds or lies in {writable} "
                    "(what agy writes, its conversations): every thread would see the shared one"
                )
    return problems

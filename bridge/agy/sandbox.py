"""Every agy process in its own bubblewrap sandbox, so threads cannot see each other.

The sandbox starts from an empty root and binds in only what one thread's agent needs:

- read-write: the thread's working directory (for a git worktree also the repository's git
  directory, where commits land), the thread's session directory, the thread's private agy
  state directories (bound where agy expects its state, see :mod:`bridge.agy.private_state`),
  and a private ``/tmp``;
- read-only: the session directory's plugins (``.agents``: the hooks that gate tool calls, and
  rule files that may be hard links shared with other sessions), agy's login (the login
  entries of the shared state directories, inside the private ones), the system (``/usr``,
  ``/etc``, ``/bin``, ``/lib*``, …), agy's installation and whatever the operator lists for the
  workspace;
- hidden: everything else. Paths listed as hidden (the bridge's data directory, the config file
  and its directory) stay hidden even when they lie under a bound directory: an empty tmpfs (or
  ``/dev/null`` for a file) is mounted over them, and the thread's own directories are bound
  back on top.

agy gets its own PID namespace (it cannot see the bridge or other threads' processes in
``/proc``) and ``--die-with-parent``: when the sandbox's first process ends, the kernel ends
every process the agent started, wherever it tried to hide. The network is shared: agy needs
its model API, and the bridge's listener is on loopback.

Nothing here knows about chat: the caller says which directories are the thread's.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bridge.agy import private_state
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
PROBE_TIMEOUT = 10.0
# A ``.git`` or ``gitdir`` file holds one path; anything longer is not one.
_GIT_FILE_BYTES = 8192
# The session's folder of attachments: the bridge writes there, the agent only reads.
ATTACHMENTS_DIR = "attachments"


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

    def extras_for(self, workdir: Path) -> ExtraBinds | None:
        workdir = workdir.resolve()
        roots = {workdir}
        common = git_common_dir(workdir)
        if common is not None and common.name == ".git":
            roots.add(common.parent)
        return next((extra for extra in self.extras if extra.root.resolve() in roots), None)


MountKind = Literal["ro", "rw", "ro-try", "rw-try", "tmpfs", "hide-file", "symlink"]


@dataclass(frozen=True)
class Mount:
    kind: MountKind
    dest: Path
    source: Path | None = None

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
            return ["--tmpfs", str(self.dest)]
        assert flag is not None and self.source is not None
        return [flag, str(self.source), str(self.dest)]


# Where two mounts sit at the same depth, binds go first and hiding last, so hiding wins.
_RANK = {"symlink": 0, "ro": 1, "ro-try": 1, "rw": 2, "rw-try": 2, "tmpfs": 3, "hide-file": 3}


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


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


def plan(sandbox: Sandbox, *, workdir: Path, session_dir: Path) -> list[Mount]:
    """Every mount of one thread's sandbox, in the order bubblewrap must apply them."""
    workdir = workdir.resolve()
    session_dir = session_dir.resolve()
    mounts = [Mount("tmpfs", Path("/tmp"))]
    mounts += system_mounts()
    mounts += [Mount("ro", path) for path in _resolved(sandbox.install)]
    extra = sandbox.extras_for(workdir)
    if extra is not None:
        mounts += [Mount("ro-try", path) for path in _resolved(extra.read_only)]
        mounts += [Mount("rw-try", path) for path in _resolved(extra.read_write)]
    own = [workdir, session_dir]
    hidden_paths = _resolved(sandbox.hidden)
    common = git_common_dir(workdir)
    git_mounts: list[Mount] = []
    if common is not None and not any(
        _under(common, hidden) or _under(hidden, common) for hidden in hidden_paths
    ):
        git_mounts = git_dir_mounts(common)
    mounts += [Mount("rw", path) for path in own]
    mounts += git_mounts
    mounts += attachment_mounts(session_dir)
    # The session's plugins, read-only inside its read-write session directory: the agent must
    # not rewrite its hooks (the approval gate) nor write into a rule file, which may be a hard
    # link shared with other sessions. ``.agents`` rather than the plugin folder: a mount point
    # cannot be renamed, its parent could be (and a new plugin folder put in its place).
    mounts.append(Mount("ro", agents_dir(session_dir)))
    mounts += state_mounts(sandbox, session_dir)
    mounts = _without_redundant(mounts, hidden_paths)
    return ordered(mounts, hidden_paths)


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
    return [Mount(m.kind, m.dest, m.source or m.dest) for m in mounts]


def git_dir_mounts(common: Path) -> list[Mount]:
    """The repository's git directory for a worktree thread: objects and refs writable (so the
    agent can commit), what configures git read-only (so it cannot plant a hook or a
    ``core.fsmonitor`` command for the next git that runs, the bridge's or another thread's).

    Every file bound read-only must be a real file or folder: a bind follows links, so a link
    planted there would show its target. When one is a link, the git directory is not bound at
    all (the thread still works; its git does not).
    """
    readonly = [common / "config", common / "hooks", common / "info"]
    worktrees = common / "worktrees"
    try:
        entries = sorted(worktrees.iterdir()) if _is_real_dir(worktrees) else []
    except OSError:
        entries = []
    for entry in entries:
        if not _is_real_dir(entry):
            continue
        readonly += [
            entry / name
            for name in ("config.worktree", "commondir", "gitdir")
            if os.path.lexists(entry / name)
        ]
    if not all(_is_real(path) for path in readonly):
        return []
    return [Mount("rw", common), *(Mount("ro", path) for path in readonly)]


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


def prepare_binds(sandbox: Sandbox, *, workdir: Path, session_dir: Path) -> None:
    """Make what the sandbox binds read-only exist as real folders (a missing path cannot be
    bound; a link there would be followed), before bubblewrap starts. Blocking: run it off the
    event loop."""
    session_dir = session_dir.resolve()
    ensure_real_dir(session_dir, ATTACHMENTS_DIR)
    common = git_common_dir(workdir)
    if common is None:
        return
    for name in ("hooks", "info"):
        try:
            ensure_real_dir(common, name)
        except OSError:
            return  # git_dir_mounts then finds no real folder and binds nothing


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
        covered = mount.kind == "ro" and any(
            other is not mount
            and other.kind == "ro"
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
        duplicate = any(m.kind == mount.kind and m.dest == mount.dest for m in kept)
        if not covered and not duplicate:
            kept.append(mount)
    return kept


# --- agy's state: a private directory per thread, the shared login read-only -----------------


def state_layout(sandbox: Sandbox) -> private_state.StateLayout:
    return private_state.StateLayout(
        shared=tuple(_resolved(sandbox.state_dirs)),
        login_entries=sandbox.login_entries,
        root=Path(os.path.realpath(sandbox.state_root)) if sandbox.state_root else None,
    )


def state_mounts(sandbox: Sandbox, session_dir: Path) -> list[Mount]:
    """Each private state directory where agy expects the shared one, and the login on top of it
    read-only (a file bind inside a writable bind is read-only). The folder of every thread's
    private directories is seen nowhere else: inside a state directory it is covered by the
    private bind; a ``state_root`` is among the hidden paths."""
    mounts = []
    for bind in private_state.binds(state_layout(sandbox), session_dir):
        mounts.append(Mount("rw", bind.shared, bind.private))
        mounts += [Mount("ro", entry) for entry in bind.login]
    return mounts


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
) -> list[str]:
    """The bubblewrap command line that runs ``argv`` in this thread's sandbox.

    ``conversation``: the one the thread resumes, moved into its private state the first time.
    """
    prepare_state(sandbox, session_dir, conversation)
    # Written by the plugin before agy starts; a session without one still gets it read-only.
    agents_dir(session_dir.resolve()).mkdir(mode=0o700, parents=True, exist_ok=True)
    prepare_binds(sandbox, workdir=workdir, session_dir=session_dir)
    args = [sandbox.bwrap, *NAMESPACE_ARGS, "--proc", "/proc", "--dev", "/dev"]
    for mount in plan(sandbox, workdir=workdir, session_dir=session_dir):
        args += mount.args()
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
    argv = [bwrap, *NAMESPACE_ARGS, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--tmpfs", "/tmp", "--", "true"]
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
    return list(dict.fromkeys(problems))

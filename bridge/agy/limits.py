"""Process and memory caps per sandbox: a cgroup per agy process, or rlimits where none can be.

One thread's agent must not take the host (or the other threads) down by starting thousands of
processes or eating all memory. Each agy process, with everything it starts, runs in a cgroup
of its own under the bridge's cgroup, with a ``pids`` and a ``memory`` limit; the kernel refuses
the fork or kills inside that cgroup only. tmpfs pages written inside the sandbox are charged
to the cgroup too, so the sandbox's temporary space counts against its memory cap.

Where cgroups are:

- **v2** (one unified hierarchy at ``/sys/fs/cgroup``): the bridge's own cgroup must have the
  ``pids`` and ``memory`` controllers in its ``cgroup.subtree_control`` (systemd: ``Delegate=yes``
  and the service in a leaf of its own), or be able to enable them there;
- **v1** (a hierarchy per controller, ``/sys/fs/cgroup/pids`` and ``/sys/fs/cgroup/memory``):
  the bridge must be able to create a folder under its own cgroup in both (root can).

Where neither works the fallback is rlimits, set on the sandbox's first process and inherited
by everything it starts: ``RLIMIT_NPROC`` (which counts every process of the bridge's user,
not of one sandbox, and which the kernel does not apply to root) and ``RLIMIT_AS`` (each
process's address space, not the sandbox's total). :meth:`Enforcement.gaps` says so in words.

A process joins its cgroup before it runs anything else: the command is started through a
short ``sh`` that writes its own PID into the cgroup's ``cgroup.procs`` and then ``exec``s the
sandbox (one exec, about a millisecond). So what a bridge killed mid-start leaves (a sandbox
that outlived it) is in a cgroup named as that bridge's, where :meth:`Enforcement.sweep` ends
it; rlimits leave no such trace. Nothing here knows about chat.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Every cgroup the bridge makes starts with this (leftovers of a crashed run are found by it).
PREFIX = "agy-bridge."
# How long closing waits for the processes of a cgroup to be gone before it gives up removing it.
_CLOSE_PATIENCE = 2.0

# Joins each cgroup named before "--" (writing its own PID), then becomes the command after it.
_JOIN = (
    'for f do case $f in --) shift; break;; esac; echo $$ > "$f" || exit 125; shift; done; '
    'exec "$@"'
)
# Sets the rlimits, then becomes the command (bash spells the process limit -u, dash -p).
_RLIMITS = (
    'n=$1; v=$2; shift 3; { ulimit -u "$n" || ulimit -p "$n"; } 2>/dev/null; '
    '[ "$v" = 0 ] || ulimit -v "$v" || exit 125; exec "$@"'
)

Mechanism = Literal["cgroup2", "cgroup1", "rlimits", "off"]


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use. 0: no cap of that kind."""

    max_processes: int = 0
    max_memory: int = 0

    @property
    def any(self) -> bool:
        return bool(self.max_processes or self.max_memory)


def size_words(size: int) -> str:
    """``2147483648`` -> ``2 GiB``."""
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return (
                f"{value:.0f} {unit}"
                if unit == "bytes" or value == int(value)
                else (f"{value:.1f} {unit}")
            )
        value /= 1024
    raise AssertionError("unreachable")


# --- one sandbox's confinement ------------------------------------------------------------------


@dataclass
class Confinement:
    """The cgroup (or rlimits) of one agy process: how to start it inside, what it hit, the end."""

    limits: Limits
    mechanism: Mechanism
    # The cgroup folders of this process (one for v2, one per controller for v1).
    dirs: tuple[Path, ...] = ()
    # Event counts already reported, so each hit is told once.
    _seen: dict[str, int] = field(default_factory=dict)

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started inside this confinement."""
        if self.mechanism in ("cgroup1", "cgroup2"):
            procs = [str(folder / "cgroup.procs") for folder in self.dirs]
            return ["/bin/sh", "-c", _JOIN, "sh", *procs, "--", *argv]
        if self.mechanism == "rlimits":
            kib = self.limits.max_memory // 1024
            nproc = self.limits.max_processes or "unlimited"
            return ["/bin/sh", "-c", _RLIMITS, "sh", str(nproc), str(kib), "--", *argv]
        return list(argv)

    def _counters(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for folder in self.dirs:
            for name in ("pids.events", "memory.events", "memory.oom_control"):
                for key, value in _keyed(folder / name).items():
                    if (name, key) in (
                        ("pids.events", "max"),
                        ("memory.events", "oom_kill"),
                        ("memory.oom_control", "oom_kill"),
                    ):
                        counts[f"{name}:{key}"] = value
        return counts

    def hits(self) -> list[str]:
        """What the sandbox ran into since the last call, in words a user understands."""
        counts = self._counters()
        new = {key: value - self._seen.get(key, 0) for key, value in counts.items()}
        self._seen.update(counts)
        notes = []
        if new.get("pids.events:max", 0) > 0:
            notes.append(
                f"This thread's sandbox reached its limit of {self.limits.max_processes} "
                "processes: some commands could not start. Other threads are not affected."
            )
        if any(
            new.get(f"{name}:oom_kill", 0) > 0 for name in ("memory.events", "memory.oom_control")
        ):
            notes.append(
                "This thread's sandbox ran out of memory (its limit is "
                f"{size_words(self.limits.max_memory)}, files in /tmp included): the system "
                "stopped a process inside it. Other threads are not affected."
            )
        return notes

    def memory_used(self) -> int | None:
        for folder in self.dirs:
            for name in ("memory.current", "memory.usage_in_bytes"):
                value = _read_int(folder / name)
                if value is not None:
                    return value
        return None

    def close(self) -> None:
        """Kill whatever is left inside, then remove the cgroup. Blocking (at most about two
        seconds, when something will not die): run it off the event loop."""
        _end(self.dirs)


def _end(dirs: Sequence[Path]) -> int:
    """Kill every process in ``dirs`` (one cgroup: its folder per hierarchy), then remove them.
    Returns how many folders were removed. Blocking, at most about two seconds."""
    if not dirs:
        return 0
    for folder in dirs:
        kill = folder / "cgroup.kill"  # v2 since Linux 5.14: forks racing the kill included
        if kill.exists():
            try:
                kill.write_text("1")
            except OSError:
                pass  # by PID below, as on v1
    deadline = time.monotonic() + _CLOSE_PATIENCE
    while True:
        left = {pid for folder in dirs for pid in _pids(folder)}
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            log.warning("processes %s of a sandbox would not end", sorted(left)[:5])
            return 0
        time.sleep(0.01)
    return sum(_remove(folder) for folder in dirs)


def end_strays(sandbox_pid: int, agy_pid: int) -> int:
    """SIGKILL every process in the sandbox started by ``sandbox_pid`` (bubblewrap) that is not
    agy or one of agy's own descendants: what a stopped turn's commands left running (their
    background jobs, re-parented to the sandbox's init). Returns how many. Blocking."""
    killed = 0
    for _ in range(5):  # what forks while it is being killed is found in the next round
        inits = _children(sandbox_pid)
        if not inits:
            break
        keep = {inits[0], *_tree(agy_pid)}
        strays = [pid for pid in _tree(inits[0]) if pid not in keep]
        if not strays:
            break
        for pid in strays:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return killed


def _children(pid: int) -> list[int]:
    children: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return children
    for task in tasks:
        children += [int(w) for w in _words(task / "children") if w.isdigit()]
    return children


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += _children(current)
    return found


# --- how this host enforces limits --------------------------------------------------------------


@dataclass(frozen=True)
class Enforcement:
    """How the caps are enforced on this host (decided once, at start), and how to confine."""

    limits: Limits
    mechanism: Mechanism
    # v2: the bridge's cgroup; v1: the bridge's cgroup in the pids and memory hierarchies.
    parents: tuple[Path, ...] = ()
    # Why cgroups are not used (empty when they are).
    problem: str = ""
    _names: Callable[[], int] = field(default_factory=lambda: itertools.count(1).__next__)
    # Several bridges may run in one process (tests, benchmarks): their cgroups differ by it.
    _run: str = field(default_factory=lambda: secrets.token_hex(4))

    def open(self) -> Confinement:
        """A new confinement for one agy process (creates its cgroup). Raises OSError."""
        if self.mechanism not in ("cgroup1", "cgroup2"):
            return Confinement(self.limits, self.mechanism)
        name = f"{owner_tag(os.getpid())}.{self._run}.{self._names()}"
        dirs: list[Path] = []
        try:
            for parent in self.parents:
                folder = parent / name
                folder.mkdir()
                dirs.append(folder)
                _configure(folder, self.limits, self.mechanism)
        except OSError:
            for folder in dirs:
                _remove(folder)
            raise
        return Confinement(self.limits, self.mechanism, tuple(dirs))

    def describe(self) -> str:
        """One line: which caps hold and how (for the banner, doctor and !status)."""
        caps = []
        if self.limits.max_processes:
            caps.append(f"{self.limits.max_processes} processes")
        if self.limits.max_memory:
            caps.append(f"{size_words(self.limits.max_memory)} of memory")
        what = " and ".join(caps) or "nothing"
        if self.mechanism == "off":
            return (
                "no process or memory cap per thread ([agy] max_processes_per_thread and "
                "max_memory_per_thread are 0)"
            )
        if self.mechanism == "rlimits":
            return f"each thread capped at {what} by rlimits only ({self.problem})"
        version = "v2" if self.mechanism == "cgroup2" else "v1"
        return f"each thread capped at {what} (cgroup {version})"

    def gaps(self) -> list[str]:
        """What the enforcement in use does not cover, in doctor's words."""
        if self.mechanism != "rlimits":
            return []
        gaps = [
            "without cgroups the memory cap is per process (RLIMIT_AS), not per thread: "
            "many processes together can still use more, and files in /tmp are bounded "
            "only by /tmp's own size",
        ]
        if os.geteuid() == 0:
            gaps.append(
                "the bridge runs as root, and the kernel does not apply the process limit "
                "(RLIMIT_NPROC) to root: processes are not capped at all"
            )
        else:
            gaps.append(
                "the process limit (RLIMIT_NPROC) counts every process of the bridge's user, "
                "all threads and the bridge together, not one thread's"
            )
        return gaps

    def sweep(self) -> int:
        """End what earlier bridges left in their sandboxes' cgroups, then remove those: a
        crashed or killed bridge's sandbox that outlived it (bubblewrap killed while it set up
        never binds its child to die with it), and whatever that held, a thread's state lock
        above all. A live bridge's cgroups are never touched. Returns how many folders were
        removed. Blocking (a directory listing; up to about two seconds per cgroup whose
        processes will not die): run it off the event loop."""
        dead: dict[str, list[Path]] = {}
        for parent in self.parents:
            try:
                entries = [p for p in parent.iterdir() if p.name.startswith(PREFIX)]
            except OSError:
                continue
            for entry in entries:
                owner = _owner(entry.name)
                if owner == "dead":
                    dead.setdefault(entry.name, []).append(entry)
                elif owner == "gone" and not _pids(entry):
                    dead.setdefault(entry.name, []).append(entry)  # empty: nothing is killed
        return sum(_end(dirs) for dirs in dead.values())


def owner_tag(pid: int) -> str:
    """How a bridge process is named in its sandboxes' cgroups: ``PREFIX``, its PID, its start
    time (clock ticks since boot: a later process given the PID has another) and its PID
    namespace (where that PID means that process)."""
    return f"{PREFIX}{pid}.{_start_ticks(pid)}.{_pid_namespace(pid)}"


def _owner(name: str) -> Literal["alive", "dead", "gone"]:
    """Whether the bridge that made the cgroup ``name`` still runs. "gone": its PID does not
    run here, but the name cannot tell more (made by a bridge that did not record its start
    and PID namespace, or in another PID namespace, where the PID means another process):
    such a cgroup is removed only when empty, nothing in it is killed."""
    parts = name.removeprefix(PREFIX).split(".")
    if not parts[0].isdigit() or int(parts[0]) == os.getpid():
        return "alive"
    pid = int(parts[0])
    recorded = len(parts) >= 5 and all(part.isdigit() for part in parts[1:3])
    if not recorded or int(parts[2]) != _pid_namespace(os.getpid()):
        return "alive" if _alive(pid) else "gone"
    if not _alive(pid):
        return "dead"
    started = _start_ticks(pid)
    return "dead" if started is not None and started != int(parts[1]) else "alive"


def _pid_namespace(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``'s 22nd field)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        return int(raw[raw.rfind(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def enforcement(
    limits: Limits,
    *,
    root: Path = CGROUP_ROOT,
    self_cgroup: Path = Path("/proc/self/cgroup"),
) -> Enforcement:
    """How ``limits`` can be enforced here: a cgroup per sandbox if the bridge may create one,
    else rlimits. Blocking (a few file reads and one test cgroup): call it once, at start."""
    if not limits.any:
        return Enforcement(limits, "off")
    try:
        memberships = _memberships(self_cgroup.read_text())
    except OSError as exc:
        return Enforcement(limits, "rlimits", problem=f"cannot read {self_cgroup}: {exc}")
    problems = []
    for attempt in (_v2, _v1):
        found = attempt(limits, root, memberships)
        if isinstance(found, Enforcement):
            return found
        if found:
            problems.append(found)
    return Enforcement(limits, "rlimits", problem="; ".join(problems) or "no cgroups here")


def _memberships(text: str) -> dict[str, str]:
    """``/proc/self/cgroup``: controller (or "" for v2) -> path."""
    found = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            found[controller] = parts[2]
    return found


def _v2(limits: Limits, root: Path, memberships: dict[str, str]) -> Enforcement | str:
    if "" not in memberships or not (root / "cgroup.controllers").is_file():
        return ""
    parent = root / memberships[""].lstrip("/")
    wanted = {"pids", "memory"}
    enabled = set(_words(parent / "cgroup.subtree_control"))
    if not wanted <= enabled:
        try:
            (parent / "cgroup.subtree_control").write_text("+pids +memory")
        except OSError as exc:
            return (
                f"cgroup v2: the pids and memory controllers are not delegated to the bridge's "
                f"cgroup {parent} ({exc.strerror or exc}); under systemd set Delegate=yes"
            )
    return _tried(Enforcement(limits, "cgroup2", (parent,)))


def _v1(limits: Limits, root: Path, memberships: dict[str, str]) -> Enforcement | str:
    parents = []
    for controller in ("pids", "memory"):
        hierarchy = root / controller
        if controller not in memberships or not (hierarchy / "cgroup.procs").is_file():
            return f"cgroup v1: no {controller} hierarchy at {hierarchy}"
        parents.append(hierarchy / memberships[controller].lstrip("/"))
    return _tried(Enforcement(limits, "cgroup1", tuple(parents)))


def _tried(candidate: Enforcement) -> Enforcement | str:
    """``candidate`` when a cgroup can really be made and configured there."""
    try:
        candidate.open().close()
    except OSError as exc:
        where = ", ".join(str(p) for p in candidate.parents)
        return f"cannot create a cgroup under {where} ({exc.strerror or exc})"
    candidate.sweep()
    return candidate


def _configure(folder: Path, limits: Limits, mechanism: Mechanism) -> None:
    """Write the caps into whichever controller files this cgroup folder has (a v1 folder has
    one controller's, a v2 folder both)."""
    files: dict[str, int] = {}
    if limits.max_processes:
        files["pids.max"] = limits.max_processes
    if limits.max_memory:
        files["memory.max"] = limits.max_memory  # v2
        files["memory.swap.max"] = 0  # v2: a cap that swap could dodge is no cap
        files["memory.limit_in_bytes"] = limits.max_memory  # v1
    for name, value in files.items():
        path = folder / name
        if path.exists():
            path.write_text(str(value))
    if mechanism == "cgroup2" and limits.max_memory and not (folder / "memory.max").exists():
        raise OSError(errno.ENOENT, "the memory controller is not enabled", str(folder))


def _keyed(path: Path) -> dict[str, int]:
    values = {}
    for words in (line.split() for line in _lines(path)):
        if len(words) == 2 and words[1].isdigit():
            values[words[0]] = int(words[1])
    return values


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _words(path: Path) -> list[str]:
    return [word for line in _lines(path) for word in line.split()]


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pids(folder: Path) -> list[int]:
    return [int(word) for word in _words(folder / "cgroup.procs") if word.isdigit()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(folder: Path) -> int:
    try:
        folder.rmdir()
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.warning("could not remove the cgroup %s: %s", folder, exc)
        return 0
    return 1


def limits_line(enforced: Enforcement) -> str:
    """One line for ``!status`` and the banner."""
    if enforced.mechanism in ("cgroup1", "cgroup2"):
        return f"• 📏 Limits: {enforced.describe()}"
    return f"• ⚠️ Limits: {enforced.describe()}"

"""Running git on a repository an agent can write, safely: the one place the bridge runs git.

A worktree thread's agent writes a repository of its own (its commits land there; the team
repository's objects are read through ``objects/info/alternates``, read-only), and git runs
commands named in what it reads: hooks, ``core.fsmonitor``, a pager, a credential helper,
filters from the config. So every git the bridge runs

- is told to run no hook and no fsmonitor (``-c core.hooksPath=/dev/null -c
  core.fsmonitor=false``), to use no pager and no credential helper, and reads no system or
  global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``); a repository's
  own ``config``, ``hooks/``, ``info/`` and ``objects/info/`` are read-only inside every
  sandbox, so the agent cannot have changed them;
- gets a small environment (no token of the bridge's, no ``GIT_*`` of the caller's) and a
  deadline, and runs off the event loop (``anyio.run_process``);
- runs inside a bubblewrap sandbox of its own when the bridge has one, since it reads objects
  and files the agent wrote: it sees the system, the repository and the folders it must write,
  and nothing of the bridge (an ``objects/info/alternates`` pointing elsewhere finds nothing).

docs/host-safety.md lists the operations and why each is safe.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import anyio

from bridge.agy.sandbox import (
    NAMESPACE_ARGS,
    READ_ONLY_ROOT,
    Mount,
    Sandbox,
    git_dir_mounts,
    ordered,
    system_mounts,
)

GIT_TIMEOUT = 60.0
SAFE_OPTIONS = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.pager=cat",
    "-c",
    "credential.helper=",
    "-c",
    "core.sshCommand=false",
    "-c",
    "protocol.allow=never",
    "--no-pager",
)
_PASSED = ("PATH", "LANG", "LC_ALL", "TZ")


class GitError(Exception):
    """git refused, failed or took too long; the message carries git's own words."""


def git_env(base: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if base is None else base
    env = {name: environ[name] for name in _PASSED if name in environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_TERMINAL_PROMPT="0",
        GIT_PAGER="cat",
        PAGER="cat",
        GIT_OPTIONAL_LOCKS="0",
        HOME="/nonexistent",
    )
    return env


def git_argv(repo: Path, args: Sequence[str], options: Sequence[str] = ()) -> list[str]:
    return ["git", *SAFE_OPTIONS, *options, "-C", str(repo), *args]


def sandboxed_argv(
    sandbox: Sandbox,
    argv: Sequence[str],
    *,
    repo: Path,
    readable: Sequence[Path] = (),
    writable: Sequence[Path] = (),
    git_dirs: Sequence[Path] = (),
) -> list[str]:
    """``argv`` in a bubblewrap sandbox (no network, read-only root) showing the system,
    ``repo`` and ``readable`` read-only, ``writable`` and the git directories ``git_dirs``
    writable (their configuration read-only); nothing else."""
    mounts: list[Mount] = [Mount("tmpfs", Path("/tmp")), *system_mounts()]
    mounts += [Mount("ro", path) for path in (repo, *readable)]
    mounts += [Mount("rw", path) for path in writable]
    for gitdir in git_dirs:
        mounts += git_dir_mounts(gitdir)
    hidden = [Path(os.path.realpath(path)) for path in sandbox.hidden]
    args = [sandbox.bwrap, *NAMESPACE_ARGS, "--unshare-net", "--proc", "/proc", "--dev", "/dev"]
    for mount in ordered(mounts, hidden):
        args += mount.args()
    return [*args, *READ_ONLY_ROOT, "--chdir", str(repo), "--", *argv]


async def run_git(
    repo: Path,
    *args: str,
    sandbox: Sandbox | None = None,
    readable: Sequence[Path] = (),
    writable: Sequence[Path] = (),
    git_dirs: Sequence[Path] = (),
    options: Sequence[str] = (),
    deadline: float = GIT_TIMEOUT,
) -> str:
    """Run ``git -C repo args…`` safely (see the module); its stdout. Raises GitError.

    With a sandbox: ``readable``, ``writable`` and ``git_dirs`` are what it shows besides the
    system and ``repo`` (see :func:`sandboxed_argv`). ``options``: more ``-c`` settings, after
    the safe ones (one operation's own, such as ``transfer.fsckObjects``).
    """
    argv = git_argv(repo, args, options)
    if sandbox is not None:
        argv = sandboxed_argv(
            sandbox, argv, repo=repo, readable=readable, writable=writable, git_dirs=git_dirs
        )
    what = f"git {' '.join(args[:2])}"
    try:
        with anyio.fail_after(deadline):
            done = await anyio.run_process(argv, env=git_env(), check=False)
    except TimeoutError:
        raise GitError(f"{what} took longer than {deadline:g} s") from None
    except OSError as exc:
        raise GitError(f"{what} could not run: {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        raise GitError(f"{what} failed: {detail}")
    return done.stdout.decode("utf-8", "replace").strip()

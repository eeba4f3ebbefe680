"""Running git on a repository an agent can write, safely: the one place the bridge runs git.

A worktree thread's agent writes the repository's git directory (its commits land there), and
git runs commands named in what it reads: hooks, ``core.fsmonitor``, a pager, a credential
helper, filters from the config. So every git the bridge runs

- is told to run no hook and no fsmonitor (``-c core.hooksPath=/dev/null -c
  core.fsmonitor=false``), to use no pager and no credential helper, and reads no system or
  global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``); the repository's
  own ``config``, ``hooks/`` and ``info/`` are read-only inside every sandbox, so the agent
  cannot have changed them;
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


def git_argv(repo: Path, args: Sequence[str]) -> list[str]:
    return ["git", *SAFE_OPTIONS, "-C", str(repo), *args]


def sandboxed_argv(
    sandbox: Sandbox,
    argv: Sequence[str],
    *,
    repo: Path,
    common: Path | None,
    writable: Sequence[Path] = (),
) -> list[str]:
    """``argv`` in a bubblewrap sandbox showing the system, ``repo`` (read-only), its git
    directory (config and hooks read-only) and ``writable``; nothing else."""
    mounts: list[Mount] = [Mount("tmpfs", Path("/tmp")), *system_mounts()]
    mounts.append(Mount("ro", repo))
    if common is not None:
        mounts += git_dir_mounts(common)
    mounts += [Mount("rw", path) for path in writable]
    hidden = [Path(os.path.realpath(path)) for path in sandbox.hidden]
    args = [sandbox.bwrap, *NAMESPACE_ARGS, "--unshare-net", "--proc", "/proc", "--dev", "/dev"]
    for mount in ordered(mounts, hidden):
        args += mount.args()
    return [*args, "--chdir", str(repo), "--", *argv]


async def run_git(
    repo: Path,
    *args: str,
    sandbox: Sandbox | None = None,
    common: Path | None = None,
    writable: Sequence[Path] = (),
    deadline: float = GIT_TIMEOUT,
) -> str:
    """Run ``git -C repo args…`` safely (see the module); its stdout. Raises GitError."""
    argv = git_argv(repo, args)
    if sandbox is not None:
        argv = sandboxed_argv(sandbox, argv, repo=repo, common=common, writable=writable)
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

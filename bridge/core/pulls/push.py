"""The bridge's push of a thread's branch to the forge's git remote, and nothing else.

The push runs on the bridge's side (never inside the agent's sandbox) from the team repository,
after the thread's branch was brought home with every object checked (``worktrees.bring_back``),
with :mod:`bridge.core.git`'s hardened git and:

- one refspec, ``refs/heads/agy/<thread>`` to itself: no other branch or tag can leave;
- ``--force-with-lease`` naming the commit the bridge pushed last (or that the branch must not
  exist yet): a branch someone else pushed to is never overwritten, the push is refused;
- the token handed to git through a credential helper that reads it from a pipe the bridge
  writes (an inherited descriptor): it is in no process's argv and in no environment;
- the remote URL the operator configured (the team repository's ``origin``), never a remote a
  thread's own repository names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio

from bridge.agy.sandbox import Sandbox
from bridge.core.git import GitError, git_argv, git_env, run_git
from bridge.core.worktrees import bring_back

PUSH_TIMEOUT = 120.0
# Files whose change runs on the forge with the repository's secrets: named before a push.
CI_PATHS = (".github/workflows/", ".gitlab-ci.yml")


class PushRefused(Exception):
    """The push did not happen; the message says why in words for the thread."""


@dataclass(frozen=True)
class Pushed:
    sha: str
    # Changed CI definitions in what was pushed (since the last push, or the base).
    ci_files: tuple[str, ...]
    # Nothing new: the remote already had this commit.
    unchanged: bool = False


def repo_from_remote(url: str) -> str:
    """``owner/name`` from a remote URL (https://host/owner/name.git, git@host:owner/name)."""
    if "://" in url:
        path = urlsplit(url).path
    else:
        path = url.partition(":")[2]
    path = path.strip("/").removesuffix(".git")
    # GitLab's subgroups keep every segment; an API prefix some hosts put first is not part.
    return path


async def remote_url(team: Path) -> str:
    """The push URL the operator configured: the team repository's ``origin``."""
    try:
        url = await run_git(team, "config", "--get", "remote.origin.url")
    except GitError:
        raise PushRefused(
            f"the workspace repository `{team}` has no `origin` remote to push to"
        ) from None
    scheme = urlsplit(url).scheme
    if scheme not in ("https", "http"):
        raise PushRefused(
            f"the workspace repository's `origin` is `{scheme or 'ssh'}`: the bridge pushes "
            "over HTTPS with the forge token only"
        )
    return url


def _credential_options(fd: int, scheme: str) -> list[str]:
    # The helper prints what the bridge wrote into the pipe, once, for `get`; git reads
    # username and password from it. No token is part of this text.
    helper = f'!f() {{ test "$1" = get && cat /dev/fd/{fd}; }}; f'
    return [
        "-c",
        f"credential.helper={helper}",
        "-c",
        f"protocol.{scheme}.allow=always",
        "-c",
        "http.followRedirects=false",
        "-c",
        "push.recurseSubmodules=no",
    ]


async def _changed_ci(team: Path, since: str | None, base_ref: str | None, sha: str) -> list[str]:
    if since:
        start = since
    elif base_ref:
        try:
            start = await run_git(team, "merge-base", base_ref, sha)
        except GitError:
            return []
    else:
        return []
    try:
        names = await run_git(team, "diff", "--no-ext-diff", "--name-only", start, sha, "--")
    except GitError:
        return []
    return [n for n in names.splitlines() if n == CI_PATHS[1] or n.startswith(CI_PATHS[0])]


async def plan_push(
    team: Path,
    workdir: Path,
    branch: str,
    *,
    since: str | None,
    base_ref: str | None,
    sandbox: Sandbox | None,
) -> Pushed:
    """The thread's branch brought home; what a push would send (its commit, CI files)."""
    await bring_back(team, workdir, branch, sandbox=sandbox)
    try:
        sha = await run_git(team, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
    except GitError:
        raise PushRefused(f"the thread's branch `{branch}` has no commit yet") from None
    ci = await _changed_ci(team, since, base_ref, sha)
    return Pushed(sha=sha, ci_files=tuple(ci), unchanged=since == sha)


async def push(
    team: Path, branch: str, sha: str, url: str, token: str, username: str, expected: str | None
) -> None:
    """Push ``sha`` to ``refs/heads/<branch>`` at ``url``, leasing on ``expected`` (None: the
    branch must not exist there). Raises PushRefused with git's words."""
    ref = f"refs/heads/{branch}"
    lease = f"--force-with-lease={ref}:{expected or ''}"
    scheme = urlsplit(url).scheme
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(write_end, "w", closefd=True) as pipe:
            pipe.write(f"username={username}\npassword={token}\n\n")
        options = _credential_options(read_end, scheme)
        argv = git_argv(
            team, ["push", "--porcelain", "--no-verify", lease, url, f"{sha}:{ref}"], options
        )
        try:
            with anyio.fail_after(PUSH_TIMEOUT):
                done = await anyio.run_process(
                    argv, env=git_env(), check=False, pass_fds=(read_end,)
                )
        except TimeoutError:
            raise PushRefused(f"the push took longer than {PUSH_TIMEOUT:g} s") from None
    finally:
        os.close(read_end)
    if done.returncode == 0:
        return
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    if "stale info" in out or "fetch first" in out or "already exists" in out:
        raise PushRefused(
            f"`{branch}` on the remote has commits the bridge did not push: not overwritten "
            "(push refused). Someone else pushed to it; move their work into this thread's "
            "branch or delete the remote branch."
        )
    lines = [line for line in out.splitlines() if line.strip() and "password" not in line]
    raise PushRefused("the push was rejected: " + " / ".join(lines[-6:]))

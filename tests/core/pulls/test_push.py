"""The bridge's push of a thread's branch (bridge/core/pulls/push.py) to a real git remote over
smart HTTP with credentials: only that branch, never over commits the bridge did not push, CI
files named, and the token in no process's argv or environment while git runs."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import anyio
import pytest

from bridge.core.pulls.push import PushRefused, plan_push, push, remote_url, repo_from_remote
from bridge.core.worktrees import ensure_worktree
from tests.forge.conftest import REPO, TOKEN, Remote
from tests.forge.git_http import git

pytestmark = pytest.mark.anyio
BRANCH = "agy/slack-0123456789abcdef"


async def thread_repo(remote: Remote, tmp_path: Path) -> Path:
    work = tmp_path / "worktrees" / "t1"
    await ensure_worktree(remote.team, work, BRANCH)
    return work


async def home(remote: Remote, work: Path) -> None:
    """The branch brought into the team repository, as before every push."""
    await plan_push(remote.team, work, BRANCH, since=None, base_ref=None, sandbox=None)


def agent_commits(work: Path, name: str, text: str) -> str:
    (work / name).parent.mkdir(parents=True, exist_ok=True)
    (work / name).write_text(text)
    git("-C", str(work), "add", name)
    git("-C", str(work), "commit", "-q", "-m", f"agent: {name}")
    return git("-C", str(work), "rev-parse", "HEAD")


def test_repo_parsed_from_the_operators_remote() -> None:
    assert repo_from_remote("https://github.com/team/app.git") == "team/app"
    assert repo_from_remote("git@github.com:team/app.git") == "team/app"
    assert repo_from_remote("https://gitlab.example/group/sub/app") == "group/sub/app"


async def test_push_only_the_thread_branch_then_follow_up_commits(
    remote: Remote, tmp_path: Path
) -> None:
    work = await thread_repo(remote, tmp_path)
    sha = agent_commits(work, "a.txt", "one")
    # Another local branch of the thread's repository never leaves.
    git("-C", str(work), "branch", "side")
    url = await remote_url(remote.team)
    plan = await plan_push(
        remote.team, work, BRANCH, since=None, base_ref="refs/heads/main", sandbox=None
    )
    assert plan.sha == sha and plan.ci_files == ()
    await push(remote.team, BRANCH, plan.sha, url, TOKEN, "x-access-token", None)
    assert remote.git.branch_sha(REPO, BRANCH) == sha
    assert remote.git.branch_sha(REPO, "side") is None
    # The first request had no credentials (401), the helper gave them, then it went through.
    assert any(not auth for _, _, auth in remote.git.requests)
    assert any(auth for _, _, auth in remote.git.requests)
    second = agent_commits(work, ".github/workflows/ci.yml", "on: push")
    plan2 = await plan_push(
        remote.team, work, BRANCH, since=sha, base_ref="refs/heads/main", sandbox=None
    )
    assert plan2.ci_files == (".github/workflows/ci.yml",)
    await push(remote.team, BRANCH, plan2.sha, url, TOKEN, "x-access-token", sha)
    assert remote.git.branch_sha(REPO, BRANCH) == second


async def test_a_push_over_someone_elses_commits_is_refused(remote: Remote, tmp_path: Path) -> None:
    work = await thread_repo(remote, tmp_path)
    sha = agent_commits(work, "a.txt", "one")
    url = await remote_url(remote.team)
    await home(remote, work)
    await push(remote.team, BRANCH, sha, url, TOKEN, "x-access-token", None)
    theirs = remote.push_branch(BRANCH, "someone else's work")
    mine = agent_commits(work, "b.txt", "two")
    plan = await plan_push(
        remote.team, work, BRANCH, since=sha, base_ref="refs/heads/main", sandbox=None
    )
    with pytest.raises(PushRefused, match="did not push"):
        await push(remote.team, BRANCH, plan.sha, url, TOKEN, "x-access-token", sha)
    assert remote.git.branch_sha(REPO, BRANCH) == theirs != mine
    # A first push onto a branch that already exists there is refused the same way.
    other = BRANCH + "-x"
    remote.push_branch(other, "pre-existing")
    with pytest.raises(PushRefused, match="did not push"):
        await push(remote.team, other, mine, url, TOKEN, "x-access-token", None)


async def test_a_wrong_token_is_refused_with_gits_words(remote: Remote, tmp_path: Path) -> None:
    work = await thread_repo(remote, tmp_path)
    sha = agent_commits(work, "a.txt", "one")
    url = await remote_url(remote.team)
    await home(remote, work)
    with pytest.raises(PushRefused, match=r"rejected.*(Authentication failed|401)"):
        await push(remote.team, BRANCH, sha, url, "ghp_wrong", "x-access-token", None)
    assert remote.git.branch_sha(REPO, BRANCH) is None


def _scan(secret: bytes, seen: list[str], found: list[str], stop: threading.Event) -> None:
    """Read every process's argv and environment until stopped: where ``secret`` shows."""
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            for part in ("cmdline", "environ"):
                try:
                    data = Path(f"/proc/{pid}/{part}").read_bytes()
                except OSError:
                    continue
                if part == "cmdline" and data.startswith(b"git") and b"push" in data:
                    seen.append(pid)
                if secret in data:
                    found.append(f"{pid}/{part}: {data[:120]!r}")


async def test_the_token_is_in_no_process_argv_or_environment(
    remote: Remote, tmp_path: Path
) -> None:
    work = await thread_repo(remote, tmp_path)
    sha = agent_commits(work, "a.txt", "one")
    url = await remote_url(remote.team)
    await home(remote, work)
    seen: list[str] = []
    found: list[str] = []
    stop = threading.Event()
    # The scanner finds a secret where one is: a token in a process's argv and environment
    # (how a token in the remote URL or in GIT_ASKPASS's environment would show).
    canary = "canary-not-the-token-" + TOKEN[::-1]
    argv = [sys.executable, "-c", "import time; time.sleep(30)", canary]
    held = await anyio.open_process(argv, env={"X": canary})
    try:
        probe: list[str] = []
        await anyio.to_thread.run_sync(_scan_once, canary.encode(), probe)
        assert any("cmdline" in p for p in probe) and any("environ" in p for p in probe)
    finally:
        held.kill()
        await held.wait()
    remote.git.delay = 0.3  # each request answered slowly: the push is seen while it runs
    scanner = threading.Thread(target=_scan, args=(TOKEN.encode(), seen, found, stop))
    scanner.start()
    try:
        await push(remote.team, BRANCH, sha, url, TOKEN, "x-access-token", None)
    finally:
        stop.set()
        scanner.join()
    assert remote.git.branch_sha(REPO, BRANCH) == sha
    assert seen, "the scan never saw the push running"
    assert found == []


def _scan_once(secret: bytes, found: list[str]) -> None:
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    _scan(secret, [], found, stop)
    timer.cancel()


async def test_a_push_the_remote_declines_carries_its_words(remote: Remote, tmp_path: Path) -> None:
    hook = remote.git.root / f"{REPO}.git" / "hooks" / "pre-receive"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\necho 'GH006: Protected branch update failed' >&2\nexit 1\n")
    hook.chmod(0o755)
    work = await thread_repo(remote, tmp_path)
    sha = agent_commits(work, "a.txt", "one")
    await home(remote, work)
    with pytest.raises(PushRefused, match=r"rejected.*GH006: Protected branch update failed"):
        await push(
            remote.team, BRANCH, sha, await remote_url(remote.team), TOKEN, "x-access-token", None
        )

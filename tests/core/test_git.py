"""The bridge's own git on a repository an agent configured: nothing planted runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bridge.core.git import GitError, git_env, run_git
from tests.doubles import one_commit_repository

pytestmark = pytest.mark.anyio


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


async def test_hooks_fsmonitor_and_pagers_the_repository_names_never_run(tmp_path: Path) -> None:
    repo = one_commit_repository(tmp_path / "repo", "f", "x")
    marks = tmp_path / "marks"
    marks.mkdir()
    for key in ("core.fsmonitor", "core.pager", "credential.helper", "core.sshCommand"):
        _git(repo, "config", key, f"touch {marks}/{key}")
    for hook in ("post-checkout", "reference-transaction"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\ntouch {marks}/{hook}\n")
        path.chmod(0o755)
    # Without a sandbox (isolation off): the options alone keep every command from running.
    await run_git(repo, "worktree", "add", "-q", "-b", "agy/t", str(tmp_path / "tree"))
    await run_git(repo, "status")
    assert (tmp_path / "tree" / "f").exists()  # the worktree was made
    assert list(marks.iterdir()) == []


def test_gits_environment_holds_no_secret_and_no_other_config() -> None:
    env = git_env({"PATH": "/usr/bin", "SLACK_BOT_TOKEN": "xoxb-1", "GIT_DIR": "/elsewhere"})
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert "SLACK_BOT_TOKEN" not in env and "GIT_DIR" not in env
    assert env["PATH"] == "/usr/bin"


async def test_a_git_that_hangs_is_given_up(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    # A FIFO as the index (an agent can make one): git blocks reading it; the deadline ends it.
    os.mkfifo(repo / ".git" / "index")
    with pytest.raises(GitError, match="longer than"):
        await run_git(repo, "status", deadline=1)

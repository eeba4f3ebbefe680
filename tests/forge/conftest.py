"""A git remote over smart HTTP and a fake GitHub in front of it, for the forge tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.forge.git_http import GitHttpServer, git
from tests.forge.github_fake import FakeGitHub

TOKEN = "ghp_testtoken1234567890abcdef"
REPO = "team/app"


@dataclass
class Remote:
    git: GitHttpServer
    github: FakeGitHub
    # The operator's clone (the team repository, origin = the HTTP remote).
    team: Path

    def push_branch(self, branch: str, content: str) -> str:
        """A commit on ``branch`` pushed by someone else (with the token): its sha."""
        work = self.team.parent / f"other-{branch.replace('/', '-')}"
        if not work.exists():
            git("clone", "-q", self.team.as_posix(), work.as_posix())
        git("-C", str(work), "checkout", "-q", "-B", branch)
        (work / "other.txt").write_text(content)
        git("-C", str(work), "add", "other.txt")
        git("-C", str(work), "commit", "-q", "-m", f"other: {content}")
        bare = self.git.root / f"{REPO}.git"
        git("-C", str(work), "push", "-q", "-f", str(bare), f"{branch}:refs/heads/{branch}")
        return git("-C", str(work), "rev-parse", "HEAD")


def make_team_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", str(path))
    (path / "README.md").write_text("team app\n")
    git("-C", str(path), "add", "README.md")
    git("-C", str(path), "commit", "-q", "-m", "first")
    return path


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[Remote]:
    server = GitHttpServer(tmp_path / "remote", TOKEN)
    await server.start()
    team = make_team_repo(tmp_path / "team")
    server.create(REPO, seed=team)
    git("-C", str(team), "remote", "add", "origin", server.remote(REPO))
    github = FakeGitHub(TOKEN, server.branch_sha)
    await github.start()
    github.add_repo(REPO)
    try:
        yield Remote(server, github, team)
    finally:
        await github.close()
        await server.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client

"""Doctor's forge lines: the token's scopes and the repository, one line each, for GitLab and
GitHub, against the fakes (and a workspace whose repository comes from its `origin`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.config import build_config
from bridge.doctor import Report
from bridge.doctor_forge import check_forges
from tests.forge.conftest import REPO as GH_REPO
from tests.forge.conftest import TOKEN as GH_TOKEN
from tests.forge.conftest import Remote
from tests.forge.conftest import remote as remote
from tests.forge.fake_gitlab import READ_TOKEN, TOKEN, serve_fake_gitlab
from tests.forge.git_http import git

pytestmark = pytest.mark.anyio


def config(tmp_path: Path, forge: dict[str, Any], **extra: Any) -> Any:
    raw = {"bridge": {"data_dir": str(tmp_path / "data")}, "forge": forge, **extra}
    return build_config(raw, environ={})


async def test_gitlab_scopes_and_reachability(tmp_path: Path) -> None:
    async with serve_fake_gitlab() as gitlab:
        gitlab.add_project("team/app", default_branch="trunk")
        base = {"kind": "gitlab", "api_url": gitlab.api_url, "repo": "team/app"}
        report = Report()
        await check_forges(config(tmp_path, {**base, "token": TOKEN}), report)
        assert report.lines == [
            "✓ GitLab token scopes: api, read_api, write_repository",
            "✓ GitLab repository team/app reachable (default branch trunk)",
        ]
        report = Report()
        hooked = {**base, "token": TOKEN, "webhook_secret": "s"}
        await check_forges(config(tmp_path, hooked, admin={"port": 9999}), report)
        assert report.lines[-1] == (
            "✓ GitLab webhooks: served at http://127.0.0.1:9999/forge/gitlab (the [admin] "
            "listener; the forge reaches it through your reverse proxy)"
        )
        report = Report()
        await check_forges(config(tmp_path, {**base, "token": READ_TOKEN}), report)
        assert report.lines[0] == ("✗ GitLab token scopes: read_api; !pr and !merge need api")
        assert report.failed == 1
        report = Report()
        await check_forges(config(tmp_path, {**base, "token": "glpat-revoked"}), report)
        assert report.failed == 2 and all("401: 401 Unauthorized" in line for line in report.lines)
        report = Report()
        await check_forges(config(tmp_path, {**base, "repo": "team/gone", "token": TOKEN}), report)
        assert report.lines[1].startswith(
            "✗ GitLab repository team/gone: 404: 404 Project Not Found"
        )
        report = Report()
        await check_forges(config(tmp_path, {k: v for k, v in base.items()}), report)
        assert report.lines == [
            "✗ GitLab team/app: no token: set [forge] token or AGY_BRIDGE_FORGE_TOKEN"
        ]


async def test_github_scopes_and_the_repository_from_origin(tmp_path: Path, remote: Remote) -> None:
    forge = {"kind": "github", "api_url": remote.github.url, "token": GH_TOKEN}
    workspaces = [{"path": str(remote.team), "worktree": True}]
    report = Report()
    await check_forges(config(tmp_path, forge, workspaces=workspaces), report)
    assert report.lines == [
        "✓ GitHub token scopes: repo, workflow",
        f"✓ GitHub repository {GH_REPO} reachable (default branch main)",
    ]
    remote.github.scopes = "read:org"
    git("-C", str(remote.team), "remote", "remove", "origin")
    report = Report()
    await check_forges(config(tmp_path, {**forge, "repo": GH_REPO}), report)
    assert (
        report.lines[0]
        == "✗ GitHub token scopes: read:org; !pr and !merge need repo (or public_repo)"
    )
    report = Report()
    await check_forges(config(tmp_path, forge, workspaces=workspaces), report)
    assert report.lines == [
        "✗ GitHub: no repository: set [forge] repo, or an `origin` remote on the workspace "
        "repository"
    ]

"""What a pull request step needs, refused in words for the thread when missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bridge.config import build_config
from bridge.core.events import Author, ThreadRef
from bridge.core.pulls.target import Refused, co_author, target_for, thread_link
from bridge.core.store.opening import open_store
from bridge.forge_settings import ForgeSection
from tests.forge.git_http import git

pytestmark = pytest.mark.anyio
THREAD = ThreadRef(platform="slack", channel="C1", thread="1700000000.000100")


def team(tmp_path: Path, origin: str | None) -> Path:
    path = tmp_path / "team"
    path.mkdir()
    git("init", "-q", "-b", "main", str(path))
    if origin:
        git("-C", str(path), "remote", "add", "origin", origin)
    return path


async def refusal(tmp_path: Path, raw: dict[str, Any]) -> str:
    config = build_config({"bridge": {"data_dir": str(tmp_path / "data")}, **raw}, {})
    async with (
        open_store(f"sqlite:///{tmp_path / 's.db'}") as store,
        aiohttp.ClientSession() as http,
    ):
        with pytest.raises(Refused) as refused:
            await target_for(config, store, THREAD, http)
    return str(refused.value)


async def test_no_forge(tmp_path: Path) -> None:
    repo = team(tmp_path, "https://github.com/team/app.git")
    text = await refusal(tmp_path, {"workspaces": [{"path": str(repo), "worktree": True}]})
    assert text.startswith("No forge is configured")


async def test_not_a_worktree_thread(tmp_path: Path) -> None:
    repo = team(tmp_path, "https://github.com/team/app.git")
    raw = {"workspaces": [{"path": str(repo)}], "forge": {"token": "t0ken-123"}}
    assert "no branch of its own" in await refusal(tmp_path, raw)


async def test_no_token(tmp_path: Path) -> None:
    repo = team(tmp_path, "https://github.com/team/app.git")
    raw = {"workspaces": [{"path": str(repo), "worktree": True}], "forge": {}}
    assert "has no token" in await refusal(tmp_path, raw)


async def test_ssh_origin_is_not_pushed_to(tmp_path: Path) -> None:
    repo = team(tmp_path, "git@github.com:team/app.git")
    raw = {"workspaces": [{"path": str(repo), "worktree": True}], "forge": {"token": "t0ken-1"}}
    assert "pushes over HTTPS" in await refusal(tmp_path, raw)


async def test_no_origin(tmp_path: Path) -> None:
    repo = team(tmp_path, None)
    raw = {"workspaces": [{"path": str(repo), "worktree": True}], "forge": {"token": "t0ken-1"}}
    assert "no `origin` remote" in await refusal(tmp_path, raw)


def test_co_authors_and_link() -> None:
    github = ForgeSection(users={"alice-gh": "@alice:x"})
    assert co_author(Author(id="U1", display_name="Al", email="al@x.org"), github) == (
        "Co-authored-by: Al <al@x.org>"
    )
    assert co_author(Author(id="@alice:x", display_name="Alice"), github) == (
        "Co-authored-by: Alice <alice-gh@users.noreply.github.com>"
    )
    assert co_author(Author(id="@bob:x", display_name="Bob <b>"), github) == (
        "Co-authored-by: Bob b <@bob:x>"
    )
    assert thread_link(THREAD) == "https://slack.com/archives/C1/p1700000000000100"
    room = ThreadRef(platform="matrix", channel="!r:x", thread="$e")
    assert thread_link(room) == "https://matrix.to/#/!r:x/$e"

"""What a pull request step needs, refused in words for the thread when missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bridge.config import build_config
from bridge.core.events import Author, ThreadRef
from bridge.core.pulls.target import Refused, co_author, co_authors, target_for, thread_link
from bridge.core.store.opening import open_store
from bridge.forge.base import ForgeError
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
    # With the account's id: GitHub's private address since 2017, ID+login.
    assert co_author(Author(id="@alice:x", display_name="Alice"), github, 583231) == (
        "Co-authored-by: Alice <583231+alice-gh@users.noreply.github.com>"
    )
    assert co_author(Author(id="@bob:x", display_name="Bob <b>"), github) == (
        "Co-authored-by: Bob b <@bob:x>"
    )
    assert thread_link(THREAD) == "https://slack.com/archives/C1/p1700000000000100"
    room = ThreadRef(platform="matrix", channel="!r:x", thread="$e")
    assert thread_link(room) == "https://matrix.to/#/!r:x/$e"


class Users:
    """A forge that knows some users' ids and fails for one login."""

    def __init__(self, ids: dict[str, int]) -> None:
        self.ids = ids

    async def user_id(self, login: str) -> int | None:
        if login == "broken":
            raise ForgeError(503, "Service Unavailable")
        return self.ids.get(login)


async def test_gitlab_co_authors_use_the_private_commit_address() -> None:
    gitlab = ForgeSection(
        kind="gitlab",
        users={"alice-gl": "U1", "ghost": "U2", "broken": "U3"},
    )
    forge: Any = Users({"alice-gl": 4711})
    lines = await co_authors(
        [
            Author(id="U1", display_name="Alice"),
            Author(id="U2", display_name="Ghost"),
            Author(id="U3", display_name="Bert"),
            Author(id="U4", display_name="Eve", email="eve@x.org"),
        ],
        gitlab,
        forge,
    )
    assert lines == [
        "Co-authored-by: Alice <4711-alice-gl@users.noreply.gitlab.com>",
        # No such user, or the lookup failed: GitLab has no address without the id.
        "Co-authored-by: Bert <U3>",
        "Co-authored-by: Eve <eve@x.org>",
        "Co-authored-by: Ghost <U2>",
    ]


def test_matrix_permalink_names_a_server_to_find_the_room_through() -> None:
    from bridge.chat.matrix.adapter import MatrixAdapter, matrix_to
    from bridge.chat.slack.adapter import SlackAdapter
    from bridge.core.capabilities import Permalinks

    room = ThreadRef(platform="matrix", channel="!r:example.org", thread="$e")
    assert matrix_to(room) == "https://matrix.to/#/!r:example.org/$e?via=example.org"
    assert issubclass(MatrixAdapter, Permalinks) and issubclass(SlackAdapter, Permalinks)

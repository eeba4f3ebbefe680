"""!diff's reading of a thread's branch (bridge/core/pulls/diff.py): commits, stat, the patch,
and uncommitted changes apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.core.pulls.diff import branch_diff, diff_text, local_base
from bridge.core.worktrees import bring_back, ensure_worktree
from tests.forge.conftest import make_team_repo
from tests.forge.git_http import git

pytestmark = pytest.mark.anyio
BRANCH = "agy/matrix-00112233"


async def test_commits_stat_patch_and_uncommitted_apart(tmp_path: Path) -> None:
    team = make_team_repo(tmp_path / "team")
    work = tmp_path / "wt"
    await ensure_worktree(team, work, BRANCH)
    for n in (1, 2):
        (work / f"f{n}.py").write_text(f"print({n})\n")
        git("-C", str(work), "add", f"f{n}.py")
        git("-C", str(work), "commit", "-qm", f"add f{n}")
    (work / "README.md").write_text("changed, not committed\n")
    (work / "scratch.txt").write_text("new\n")
    await bring_back(team, work, BRANCH, sandbox=None)
    found = await branch_diff(team, work, BRANCH, await local_base(team), None)
    assert found.base == "main"
    assert [c.split(" ", 1)[1] for c in found.commits] == ["add f2", "add f1"]
    assert "2 files changed, 2 insertions(+)" in found.shortstat
    assert "+print(1)" in found.patch and "+print(2)" in found.patch
    assert "not committed" not in found.patch
    assert found.uncommitted == [" M README.md", "?? scratch.txt"]
    text = diff_text(found, BRANCH)
    assert "2 commit(s):" in text and "add f1" in text
    assert "Uncommitted in the thread's working tree (not in the patch):" in text
    assert "?? scratch.txt" in text


async def test_no_commits_yet(tmp_path: Path) -> None:
    team = make_team_repo(tmp_path / "team")
    work = tmp_path / "wt"
    await ensure_worktree(team, work, BRANCH)
    git("-C", str(team), "branch", "-f", BRANCH, "main")
    found = await branch_diff(team, work, BRANCH, "main", None)
    assert found.commits == [] and found.patch == ""
    assert "No commits on this branch yet." in diff_text(found, BRANCH)

"""A thread's repository of its own: made, migrated from a linked worktree, brought back into
the team repository (verified), removed only when clean."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bridge.agy.sandbox import Sandbox
from bridge.core.worktrees import (
    WorktreeError,
    bring_back,
    ensure_worktree,
    remove_worktree,
)
from tests.agy.sandboxed import require_bwrap
from tests.doubles import one_commit_repository

pytestmark = pytest.mark.anyio

BRANCH = "agy/t1"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture(params=["bwrap", "none"])
def sandbox(request: pytest.FixtureRequest) -> Sandbox | None:
    if request.param == "none":
        return None
    require_bwrap()
    return Sandbox(bwrap="bwrap")


async def test_a_thread_repository_reads_the_team_objects_and_writes_its_own(
    tmp_path: Path, sandbox: Sandbox | None
) -> None:
    repo = one_commit_repository(tmp_path / "repo")
    tree = tmp_path / "data" / "worktrees" / "t1"
    assert await ensure_worktree(repo, tree, BRANCH, sandbox=sandbox)
    assert not await ensure_worktree(repo, tree, BRANCH, sandbox=sandbox)  # made once
    assert (tree / ".git").is_dir() and (tree / "README.md").read_text() == "the main checkout\n"
    alternates = (tree / ".git" / "objects" / "info" / "alternates").read_text()
    assert alternates.strip() == str(repo.resolve() / ".git" / "objects")
    assert git(tree, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    (tree / "new.txt").write_text("work\n")
    git(tree, "add", "new.txt")
    git(tree, "commit", "-qm", "thread work")
    git(tree, "branch", "-f", "main", "HEAD")  # its own main: nobody else's
    objects_before = sorted(p.name for p in (repo / ".git" / "objects").rglob("*"))
    await bring_back(repo, tree, BRANCH, sandbox=sandbox)
    assert git(repo, "log", "--format=%s", BRANCH).splitlines() == ["thread work", "first"]
    assert git(repo, "log", "--format=%s", "main") == "first"
    assert objects_before != sorted(p.name for p in (repo / ".git" / "objects").rglob("*"))
    git(repo, "fsck", "--strict")


async def test_a_malformed_object_is_not_brought_back(
    tmp_path: Path, sandbox: Sandbox | None
) -> None:
    repo = one_commit_repository(tmp_path / "repo")
    tree = tmp_path / "data" / "worktrees" / "t1"
    await ensure_worktree(repo, tree, BRANCH, sandbox=sandbox)
    git(tree, "update-ref", f"refs/heads/{BRANCH}", forged_commit(tree))
    with pytest.raises(WorktreeError, match="missingAuthor"):
        await bring_back(repo, tree, BRANCH, sandbox=sandbox)
    assert not has_ref(repo, BRANCH)  # never made in the team repository


def forged_commit(tree: Path) -> str:
    """A commit git itself would never write (no author), which fsck refuses."""
    head_tree = git(tree, "rev-parse", "HEAD^{tree}")
    bad = f"tree {head_tree}\ncommitter x <x@x> 1 +0000\n\nforged\n"
    return subprocess.run(
        ["git", "-C", str(tree), "hash-object", "-t", "commit", "-w", "--literally", "--stdin"],
        input=bad,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def has_ref(repo: Path, ref: str) -> bool:
    found = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "-q", "--verify", ref], capture_output=True
    )
    return found.returncode == 0


async def test_a_linked_worktree_from_before_becomes_a_repository_of_its_own_with_its_work(
    tmp_path: Path, sandbox: Sandbox | None
) -> None:
    """The upgrade: a thread's worktree as the bridge made it before (``git worktree add``),
    with commits, staged and unstaged changes and a new file, migrated in place."""
    repo = one_commit_repository(tmp_path / "repo")
    tree = tmp_path / "data" / "worktrees" / "t1"
    git(repo, "worktree", "add", "-q", "-b", BRANCH, str(tree))
    (tree / "committed.txt").write_text("committed\n")
    git(tree, "add", "committed.txt")
    git(tree, "commit", "-qm", "before the upgrade")
    (tree / "staged.txt").write_text("staged\n")
    git(tree, "add", "staged.txt")
    (tree / "README.md").write_text("changed, not staged\n")
    (tree / "untracked.txt").write_text("new\n")
    status = git(tree, "status", "--porcelain")
    admin = repo / ".git" / "worktrees" / "t1"
    assert admin.is_dir()
    assert not await ensure_worktree(repo, tree, BRANCH, sandbox=sandbox)
    assert (tree / ".git").is_dir()
    assert not admin.exists() and git(repo, "worktree", "list").count("\n") == 0
    assert git(tree, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    assert git(tree, "log", "--format=%s").splitlines() == ["before the upgrade", "first"]
    assert git(tree, "status", "--porcelain") == status  # staged, unstaged, untracked: kept
    # It carries on: a commit, brought back into the team repository.
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "after the upgrade")
    await bring_back(repo, tree, BRANCH, sandbox=sandbox)
    assert git(repo, "log", "-1", "--format=%s", BRANCH) == "after the upgrade"
    assert git(repo, "show", f"{BRANCH}:staged.txt") == "staged"


async def test_a_forged_worktree_link_is_not_migrated(tmp_path: Path) -> None:
    repo = one_commit_repository(tmp_path / "repo")
    other = one_commit_repository(tmp_path / "other")
    tree = tmp_path / "data" / "worktrees" / "t1"
    git(other, "worktree", "add", "-q", "-b", BRANCH, str(tree))
    with pytest.raises(WorktreeError, match="not a worktree of"):
        await ensure_worktree(repo, tree, BRANCH)
    assert (tree / ".git").is_file()  # left as it was


async def test_removal_keeps_uncommitted_work_and_brings_the_branch_back_first(
    tmp_path: Path, sandbox: Sandbox | None
) -> None:
    repo = one_commit_repository(tmp_path / "repo")
    tree = tmp_path / "data" / "worktrees" / "t1"
    await ensure_worktree(repo, tree, BRANCH, sandbox=sandbox)
    (tree / "wip.txt").write_text("not committed\n")
    assert not await remove_worktree(repo, tree, sandbox=sandbox, branch=BRANCH)
    assert (tree / "wip.txt").exists()
    git(tree, "add", "wip.txt")
    git(tree, "commit", "-qm", "done")
    assert await remove_worktree(repo, tree, sandbox=sandbox, branch=BRANCH)
    assert not tree.exists()
    assert git(repo, "log", "-1", "--format=%s", BRANCH) == "done"
    # The thread comes back later: its repository is made again from its branch.
    assert await ensure_worktree(repo, tree, BRANCH, sandbox=sandbox)
    assert (tree / "wip.txt").read_text() == "not committed\n"


async def test_a_removal_that_another_one_finished_first_is_a_removal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clean-ups of one merged pull request (the `!merge` and the forge's word of the
    merge) may both remove the thread's repository; the slower one finds it gone, part way or
    whole, and must say "removed", not fail (a failure lost the thread's "Merged" message)."""
    from bridge.core import worktrees

    repo = one_commit_repository(tmp_path / "repo")
    tree = tmp_path / "data" / "worktrees" / "t1"
    await ensure_worktree(repo, tree, BRANCH)
    real = worktrees.bring_back

    async def and_the_other_one_removes_it(*args: object, **kwargs: object) -> None:
        await real(*args, **kwargs)  # type: ignore[arg-type]
        shutil.rmtree(tree)

    monkeypatch.setattr(worktrees, "bring_back", and_the_other_one_removes_it)
    assert await remove_worktree(repo, tree, branch=BRANCH)
    assert not tree.exists()

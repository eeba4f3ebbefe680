"""Per-thread repositories, so two threads in one channel never edit the same files, and no
thread can change another's (or the operator's) refs, objects or index.

Each thread of a ``worktree = true`` workspace works in a repository of its own on its own
branch (``agy/<thread slug>``): its own ``.git`` (refs, index, the objects it writes), reading
the team repository's objects through ``objects/info/alternates``. Inside a thread's sandbox
the team repository's objects are read-only and nothing else of it is there, so a thread that
moves ``main``, rewrites a branch or replaces an object changes only its own repository.

The bridge brings a thread's branch into the team repository (after each turn, and before
removing the thread's repository) with a fetch that verifies every object it takes
(``transfer.fsckObjects``) and updates only ``refs/heads/agy/<thread>``. Removing a thread's
repository never loses work: the branch is brought back first, and a repository with
uncommitted changes is kept.

Threads made before this layout worked in linked worktrees of the team repository (``.git`` a
file): :func:`migrate_worktree` turns such a worktree into a repository of its own in place,
with its branch, its index and its uncommitted files, at the thread's next start.

git runs through :mod:`bridge.core.git` (no hooks, no fsmonitor, no pager or credential helper,
a deadline); the operations that read what an agent wrote run in a sandbox of their own when
the bridge has one.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from bridge.agy.sandbox import Sandbox, git_common_dir, team_git_dir
from bridge.core.git import GitError, run_git
from bridge.safe_files import ensure_real_dir, read_small

log = logging.getLogger(__name__)

# The fetch that brings a thread's branch home: every object checked, from a local path only.
FETCH_OPTIONS = (
    "-c",
    "transfer.fsckObjects=true",
    "-c",
    "protocol.file.allow=always",
    "-c",
    "fetch.writeCommitGraph=false",
)
_MIGRATING = ".agy-bridge-migrating"


class WorktreeError(GitError):
    """git refused; the message carries git's own words."""


async def _git(repo: Path, *args: str, **kwargs: object) -> str:
    try:
        return await run_git(repo, *args, **kwargs)  # type: ignore[arg-type]
    except GitError as exc:
        raise WorktreeError(str(exc)) from None


async def common_dir(repo: Path) -> Path:
    """The repository's git directory (``.git`` of the main checkout), absolute."""
    raw = await _git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    return Path(raw)


async def is_repository(path: Path) -> bool:
    try:
        return await _git(path, "rev-parse", "--is-inside-work-tree") == "true"
    except (WorktreeError, OSError):
        return False


def has_own_repository(path: Path) -> bool:
    dotgit = path / ".git"
    return dotgit.is_dir() and not dotgit.is_symlink()


async def ensure_worktree(
    repo: Path, path: Path, branch: str, *, sandbox: Sandbox | None = None
) -> bool:
    """Make ``path`` a repository of its own on ``branch``, reading ``repo``'s objects; True
    when it was just created. A linked worktree from before is migrated in place."""
    dotgit = path / ".git"
    if has_own_repository(path):
        write_alternates(dotgit, team_git_dir(repo))  # the bridge's line, whatever was there
        return False
    if os.path.lexists(dotgit):
        await migrate_worktree(repo, path, sandbox=sandbox)
        return False
    team = team_git_dir(repo)
    # The branch when the team repository has it (a thread whose repository was removed),
    # else what the team repository has checked out.
    existing = await _git(repo, "branch", "--list", branch)
    start = await _git(
        repo, "rev-parse", "--verify", f"{branch if existing else 'HEAD'}^{{commit}}"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.parent / f"{path.name}{_MIGRATING}"
    if os.path.lexists(staging):
        shutil.rmtree(staging)
    await _git(path.parent, "init", "-q", "--template=", "-b", branch, str(staging))
    write_alternates(staging / ".git", team)
    # The checkout reads objects agents wrote (brought home verified): in a sandbox of its own
    # that shows the team's objects read-only and writes only the new repository.
    await _git(
        staging,
        "reset",
        "-q",
        "--hard",
        start,
        sandbox=sandbox,
        readable=(team / "objects",),
        writable=(staging,),
    )
    if os.path.lexists(path):
        _move_into(staging, path)
    else:
        os.replace(staging, path)
    return True


def _move_into(staging: Path, path: Path) -> None:
    """``path`` exists (an empty folder, say): the staged repository's contents moved in."""
    for name in os.listdir(staging):
        os.replace(staging / name, path / name)
    staging.rmdir()


def write_alternates(gitdir: Path, team: Path) -> None:
    """The thread's repository reads the team's objects: the bridge's own line, rewritten
    before each start (inside the sandbox ``objects/info`` is read-only)."""
    # Real folders on the way (a link there is removed, never followed).
    info = ensure_real_dir(ensure_real_dir(gitdir, "objects"), "info")
    # A new file renamed into place: whatever was there (a link, a hard link to another
    # file) is replaced, never written through.
    fresh = info / f"alternates.{os.getpid()}.new"
    if os.path.lexists(fresh):
        os.unlink(fresh)
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{team / 'objects'}\n")
    os.replace(fresh, info / "alternates")


async def bring_back(repo: Path, path: Path, branch: str, *, sandbox: Sandbox | None) -> None:
    """The thread's branch into the team repository: a fetch of that one branch (every object
    checked), which moves no other ref. Sandboxed: the thread's repository read-only, the
    team's git directory writable (its configuration read-only)."""
    if not has_own_repository(path):
        return
    team = team_git_dir(repo)
    ref = f"refs/heads/{branch}"
    # Most turns commit nothing: the refs alone (no object read, no command run) say so.
    ours, theirs = await _tip(path, ref), await _tip(team, ref)
    if ours is None or ours == theirs:
        return
    await _git(
        team,
        "fetch",
        "-q",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        str(path),
        f"+{ref}:{ref}",
        sandbox=sandbox,
        readable=(path,),
        git_dirs=(team,),
        options=FETCH_OPTIONS,
    )


async def branch_tip(repo: Path, branch: str) -> str | None:
    """The team repository's commit of ``branch`` (None: none yet)."""
    return await _tip(team_git_dir(repo), f"refs/heads/{branch}")


async def commits_stat(repo: Path, branch: str, before: str | None) -> list[str]:
    """The one-line stat of the commits ``branch`` gained since ``before`` (brought home: every
    object checked), or nothing when it gained none."""
    team = team_git_dir(repo)
    after = await _tip(team, f"refs/heads/{branch}")
    if after is None or after == before:
        return []
    if before is None:
        # The branch's first commits: counted from where it left the team's checked-out branch.
        try:
            before = await _git(team, "merge-base", "HEAD", after)
        except WorktreeError:
            return []
    count = await _git(team, "rev-list", "--count", f"{before}..{after}", "--")
    stat = await _git(
        team, "diff", "--no-ext-diff", "--no-textconv", "--shortstat", before, after, "--"
    )
    if not stat or count == "0":
        return []
    return [f"`{branch}`: {count} new commit(s), {stat.strip()} (`!diff` shows them)"]


async def _tip(repo: Path, ref: str) -> str | None:
    """The commit a ref names (read from the ref itself), or None when there is none."""
    try:
        return await _git(repo, "rev-parse", "-q", "--verify", ref) or None
    except WorktreeError:
        return None


async def remove_worktree(
    repo: Path, path: Path, *, sandbox: Sandbox | None = None, branch: str | None = None
) -> bool:
    """Remove a clean thread repository (its branch brought home first). False when kept."""
    if not has_own_repository(path):
        return False
    try:
        # Checking that the tree is clean reads the agent's files: sandboxed, read-only.
        dirty = await _git(
            path,
            "status",
            "--porcelain",
            "--untracked-files=normal",
            sandbox=sandbox,
            readable=(team_git_dir(repo) / "objects",),
        )
        if dirty:
            log.info("kept %s: it has uncommitted changes", path)
            return False
        if branch is not None:
            await bring_back(repo, path, branch, sandbox=sandbox)
    except WorktreeError as exc:
        log.info("kept %s: %s", path, exc)
        return False
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        # Another clean-up of the same thread (a merged pull request is cleaned by `!merge` and
        # by the forge's word of the merge) removed it, in whole or in part, meanwhile.
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            raise OSError(f"could not remove {path}") from None
    return True


async def migrate_worktree(repo: Path, path: Path, *, sandbox: Sandbox | None = None) -> None:
    """A linked worktree of the team repository (the layout before) made a repository of its
    own in place: the same branch at the same commit, its index (what was staged) and every
    file of the tree (uncommitted work) kept; the team's administrative folder for it removed.
    """
    common = git_common_dir(path)  # the linkage checked both ways; an agent can write .git
    team = team_git_dir(repo)
    if common is None or common.resolve() != team.resolve():
        raise WorktreeError(f"{path} is not a worktree of {repo}: cannot migrate it")
    admin = Path(read_small(path / ".git", 8192).decode().strip().removeprefix("gitdir:").strip())
    admin = (path / admin).resolve()
    head = read_small(admin / "HEAD", 8192).decode().strip()
    if head.startswith("ref: refs/heads/"):
        branch = head.removeprefix("ref: refs/heads/")
        commit = await _git(repo, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
    else:
        branch, commit = "", await _git(repo, "rev-parse", "--verify", f"{head}^{{commit}}")
    staging = path.parent / f"{path.name}{_MIGRATING}"
    if os.path.lexists(staging):
        shutil.rmtree(staging)
    init = ["init", "-q", "--template=", *(["-b", branch] if branch else []), str(staging)]
    await _git(path.parent, *init)
    gitdir = staging / ".git"
    write_alternates(gitdir, team)
    if branch:
        await _git(staging, "update-ref", f"refs/heads/{branch}", commit)
    else:
        (gitdir / "HEAD").write_text(f"{commit}\n")
    index = admin / "index"
    if index.is_file() and not index.is_symlink():
        shutil.copyfile(index, gitdir / "index")
    # The switch: the worktree's `.git` file replaced by the new git directory.
    os.unlink(path / ".git")
    os.replace(gitdir, path / ".git")
    staging.rmdir()
    shutil.rmtree(admin, ignore_errors=True)
    log.info("migrated the worktree %s to a repository of its own", path)

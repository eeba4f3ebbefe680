"""What a thread's branch changed against its base: commits, a stat, the patch, and the
uncommitted files apart (``!diff``, and the one-line stat after a turn that changed files).

Read from the team repository after the branch was brought home (every object checked), with
:mod:`bridge.core.git`'s hardened git and no external diff or text conversion; the thread's own
working tree (uncommitted changes) is read in a sandbox, as the agent wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bridge.agy.sandbox import Sandbox, team_git_dir
from bridge.core.git import GitError, run_git

DIFF_OPTIONS = ("--no-ext-diff", "--no-textconv", "--no-color")
# The most commits listed in the message (the patch file has them all).
MAX_COMMITS = 30


@dataclass(frozen=True)
class BranchDiff:
    base: str
    commits: list[str]  # "abc1234 subject", newest first
    stat: str  # git's --stat, its summary line last
    shortstat: str  # " 3 files changed, 10 insertions(+), 2 deletions(-)"
    patch: str
    uncommitted: list[str]  # porcelain lines of the thread's working tree


async def base_ref(team: Path, base: str) -> str | None:
    """The team repository's ref for ``base``: its local branch, else origin's."""
    for ref in (f"refs/heads/{base}", f"refs/remotes/origin/{base}"):
        try:
            await run_git(team, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}")
            return ref
        except GitError:
            continue
    return None


async def local_base(team: Path) -> str:
    """The branch the team repository has checked out (the base when no forge says one)."""
    try:
        return await run_git(team, "symbolic-ref", "--short", "HEAD")
    except GitError:
        return "main"


async def branch_diff(
    team: Path, workdir: Path, branch: str, base: str, sandbox: Sandbox | None
) -> BranchDiff:
    """The branch (already brought home) against ``base``. Raises GitError."""
    ref = await base_ref(team, base)
    if ref is None:
        raise GitError(f"the workspace repository has no branch `{base}` to compare with")
    head = f"refs/heads/{branch}"
    span = f"{ref}...{head}"
    log = await run_git(
        team,
        "log",
        "--no-color",
        "--format=%h %s",
        f"--max-count={MAX_COMMITS + 1}",
        f"{ref}..{head}",
    )
    stat = await run_git(team, "diff", *DIFF_OPTIONS, "--stat=100", span, "--")
    short = await run_git(team, "diff", *DIFF_OPTIONS, "--shortstat", span, "--")
    patch = await run_git(team, "diff", *DIFF_OPTIONS, "--patch", "--stat", span, "--")
    uncommitted = await run_git(
        workdir,
        "status",
        # v2: every line starts with its kind (run_git strips the output, and v1's first line
        # may start with a space).
        "--porcelain=v2",
        "--untracked-files=normal",
        sandbox=sandbox,
        readable=(team_git_dir(team) / "objects",),
    )
    return BranchDiff(
        base=base,
        commits=[line for line in log.splitlines() if line],
        stat=stat,
        shortstat=short.strip(),
        patch=patch + "\n" if patch else "",
        uncommitted=[short for line in uncommitted.splitlines() if (short := _short(line))],
    )


def _short(line: str) -> str:
    """A ``git status --porcelain=v2`` line as the short form people read (`` M path``)."""
    kind, _, rest = line.partition(" ")
    if kind == "?":
        return f"?? {rest}"
    if kind in ("1", "2", "u"):
        fields = rest.split(" ", {"1": 7, "2": 8, "u": 9}[kind])
        xy = fields[0].replace(".", " ")
        return f"{xy} {fields[-1].split(chr(9))[0]}"
    return ""


def diff_text(diff: BranchDiff, branch: str) -> str:
    """The ``!diff`` message: commits and stat; the uncommitted files apart."""
    lines = [f"**`{branch}`** against `{diff.base}`"]
    if not diff.commits:
        lines.append("No commits on this branch yet.")
    else:
        shown = diff.commits[:MAX_COMMITS]
        more = " (and more: see the patch)" if len(diff.commits) > MAX_COMMITS else ""
        lines.append(f"{len(shown)} commit(s){more}:")
        lines += [
            f"• `{c.split(' ', 1)[0]}` {c.split(' ', 1)[1] if ' ' in c else ''}" for c in shown
        ]
        lines += ["```", diff.stat, "```"]
    if diff.uncommitted:
        lines.append("Uncommitted in the thread's working tree (not in the patch):")
        lines += ["```", *diff.uncommitted[:40], "```"]
    return "\n".join(lines)

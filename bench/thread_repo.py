"""A worktree thread's first start: its repository of its own against the linked worktree it
replaces, on a repository of many files.

Before, a thread of a ``worktree = true`` workspace got ``git worktree add`` (a linked worktree,
its git directory shared with every thread). Now it gets a repository of its own: ``git init``,
``objects/info/alternates`` naming the team repository's objects, ``git reset --hard`` to the
start commit (:func:`bridge.core.worktrees.ensure_worktree`). Both run as the bridge runs them
(its hardened git, in a bubblewrap sandbox of their own where bubblewrap works), in turns, the
order swapped each round after a warm-up round; each is timed from the call to a checked-out
tree. Goal: the repository of its own costs no more than a few hundred milliseconds over the
worktree (300 ms at p50).

Then what a turn adds: the branch brought back into the team repository (a fetch of one branch,
every object checked), after a commit of one changed file.

    python -m bench.thread_repo [--files 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from bench.common import machine, ms, percentile, ratio, table
from bridge.agy.sandbox import Sandbox, bwrap_problem, find_bwrap
from bridge.core.git import run_git
from bridge.core.worktrees import bring_back, common_dir, ensure_worktree

FILES = 10_000
ROUNDS = 5
GOAL_MS = 300.0
BRANCH = "agy/bench"


def make_repository(path: Path, files: int) -> Path:
    """A repository of ``files`` small files in 100 folders, one commit."""
    for number in range(files):
        folder = path / f"d{number % 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{number:05d}.txt").write_text(f"file {number}\n" * 4)
    env_git = ["git", "-C", str(path), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*env_git[:3], "init", "-q", "-b", "main"], check=True)
    subprocess.run([*env_git, "add", "-A"], check=True)
    subprocess.run([*env_git, "commit", "-qm", "many files"], check=True)
    return path


async def linked_worktree(repo: Path, tree: Path, sandbox: Sandbox | None) -> None:
    """What the bridge did before: ``git worktree add`` in a sandbox that writes the team
    repository's git directory."""
    await run_git(repo, "worktree", "prune")
    await run_git(repo, "branch", "--list", BRANCH)
    tree.parent.mkdir(parents=True, exist_ok=True)
    common = await common_dir(repo)
    await run_git(
        repo,
        "worktree",
        "add",
        "-q",
        "-b",
        BRANCH,
        str(tree),
        sandbox=sandbox,
        git_dirs=(common,),
        writable=(tree.parent,),
    )


async def own_repository(repo: Path, tree: Path, sandbox: Sandbox | None) -> None:
    await ensure_worktree(repo, tree, BRANCH, sandbox=sandbox)


async def reset(repo: Path, tree: Path) -> None:
    """Between two starts: the thread's tree and branch gone from the team repository."""
    shutil.rmtree(tree, ignore_errors=True)
    await run_git(repo, "worktree", "prune")
    await anyio.run_process(["git", "-C", str(repo), "branch", "-q", "-D", BRANCH], check=False)


async def drive(files: int, rounds: int) -> int:
    bwrap = find_bwrap()
    problem = await anyio.to_thread.run_sync(bwrap_problem, bwrap)
    sandbox = Sandbox(bwrap=bwrap) if problem is None and bwrap is not None else None
    print(machine())
    where = "in bubblewrap" if sandbox is not None else f"without a sandbox ({problem})"
    print(f"a thread's first start on a repository of {files} files, {where}\n")
    Start = Callable[[Path, Path, Sandbox | None], Awaitable[None]]
    variants: list[tuple[str, Start]] = [
        ("linked worktree (before)", linked_worktree),
        ("repository of its own (now)", own_repository),
    ]
    samples: dict[str, list[float]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory(prefix="agy-bench-repo-") as tmp:
        repo = make_repository(Path(tmp) / "repo", files)
        tree = Path(tmp) / "worktrees" / "t"
        for number in range(rounds + 1):
            order = variants if number % 2 == 0 else variants[::-1]
            for name, start in order:
                await reset(repo, tree)
                began = time.perf_counter()
                await start(repo, tree, sandbox)
                elapsed = time.perf_counter() - began
                assert (tree / "d00" / "f00000.txt").is_file()
                if number:
                    samples[name].append(elapsed)
        # What a turn adds afterwards: one changed file committed, the branch brought back.
        await reset(repo, tree)
        await own_repository(repo, tree, sandbox)
        back: list[float] = []
        for number in range(rounds):
            (tree / "d00" / "f00000.txt").write_text(f"turn {number}\n")
            identity = ["-c", "user.name=b", "-c", "user.email=b@b"]
            await anyio.run_process(
                ["git", "-C", str(tree), *identity, "commit", "-qam", f"turn {number}"]
            )
            began = time.perf_counter()
            await bring_back(repo, tree, BRANCH, sandbox=sandbox)
            back.append(time.perf_counter() - began)
    base = percentile(samples[variants[0][0]], 0.5)
    rows = []
    for name, times in samples.items():
        p50 = percentile(times, 0.5)
        added = "-" if name == variants[0][0] else f"{(p50 - base) * 1000:.1f}"
        rows.append([name, str(len(times)), ms(p50), ms(max(times)), added, ratio(p50, base)])
    print(table(["first start", "starts", "p50 ms", "max ms", "added p50 ms", "ratio"], rows))
    added_ms = (percentile(samples[variants[1][0]], 0.5) - base) * 1000
    verdict = "met" if added_ms < GOAL_MS else "NOT met"
    print(f"\ngoal: a repository of its own adds under {GOAL_MS:g} ms to a first start: {verdict}")
    p50_back = ms(percentile(back, 0.5))
    print(f"bringing the branch back after a turn (fetch, fsck): p50 {p50_back} ms")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.thread_repo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--files", type=int, default=FILES, help="files in the repository")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="measured starts each")
    parser.add_argument("--quick", action="store_true", help="smallest run (smoke test)")
    args = parser.parse_args(argv)
    files, rounds = (200, 1) if args.quick else (args.files, args.rounds)
    return anyio.run(drive, files, rounds, backend="asyncio")


if __name__ == "__main__":
    raise SystemExit(main())

"""Pull requests from a thread (docs/pull-requests.md): how long the bridge's own part takes.

Against a real git remote over smart HTTP (``git http-backend`` behind Basic credentials) and
the local GitHub fake, on loopback:

- **`!pr` → link posted**: the push of a thread's branch (brought home, credential helper on a
  pipe, lease) and the PR opened, until the thread is told the link. The agent's description
  turn is left out (it is a turn like any other: bench.overhead measures those); the baseline
  is a plain `git push` with the token in the URL and one POST to open the PR.
- **check change → thread message**: a check changes on the forge until the thread is told,
  by polling (first wait ``poll_seconds``, so about half of it plus one look) and through
  ``report_checks`` (a webhook's path: one look, no wait).

``python -m bench.pull_requests [--rounds N] [--poll SECONDS] [--quick]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from bench.common import machine, ms, percentile, ratio, table
from bridge.config import build_config
from bridge.core.events import Author, ThreadRef
from bridge.core.leases import LocalLeases
from bridge.core.pulls.follow import CheckFollower
from bridge.core.pulls.service import PullRequests
from bridge.core.store.opening import open_store
from bridge.core.workspaces import place_for
from bridge.core.worktrees import ensure_worktree
from bridge.forge.base import Check
from tests.forge.conftest import REPO, TOKEN, make_team_repo
from tests.forge.git_http import GitHttpServer, git
from tests.forge.github_fake import FakeGitHub

BOB = Author(id="U0BOB", display_name="Bob", email="bob@example.org")


class Told:
    """The thread's messages, with when each came."""

    def __init__(self) -> None:
        self.said: list[tuple[float, str]] = []
        self.changed = anyio.Event()

    async def say(self, thread: ThreadRef, text: str) -> None:
        self.said.append((time.monotonic(), text))
        self.changed.set()
        self.changed = anyio.Event()

    async def when(self, text: str, after: float) -> float:
        with anyio.fail_after(60):
            while True:
                for at, said in self.said:
                    if at >= after and text in said:
                        return at
                await self.changed.wait()


async def run(rounds: int, poll: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = GitHttpServer(root / "remote", TOKEN)
        await server.start()
        team = make_team_repo(root / "team")
        server.create(REPO, seed=team)
        git("-C", str(team), "remote", "add", "origin", server.remote(REPO))
        github = FakeGitHub(TOKEN, server.branch_sha)
        await github.start()
        github.add_repo(REPO)
        raw: dict[str, Any] = {
            "bridge": {"data_dir": str(root / "data")},
            "workspaces": [{"path": str(team), "worktree": True}],
            "forge": {
                "api_url": github.url,
                "token": TOKEN,
                "poll_seconds": poll,
                "poll_max_seconds": poll,
            },
        }
        config = build_config(raw, {})
        told = Told()

        async def purpose(thread: ThreadRef, author: Author) -> str:
            return "Bench change\n\nWhat it does."

        async def no_turn(*_: Any) -> None:
            return None

        try:
            async with (
                open_store(f"sqlite:///{root / 's.db'}") as store,
                aiohttp.ClientSession() as http,
            ):
                pulls = PullRequests(
                    config, store, http, told.say, purpose, no_turn, None, lambda: None, scrub=str
                )
                follower = CheckFollower(pulls, LocalLeases("bench"))
                pr_times, base_times, poll_times, hook_times = [], [], [], []
                async with anyio.create_task_group() as tg:
                    tg.start_soon(follower.run)
                    for n in range(rounds):
                        thread = ThreadRef(platform="slack", channel="C1", thread=f"1.{n}")
                        place = place_for(config, thread)
                        assert place.branch is not None
                        await ensure_worktree(team, place.workdir, place.branch)
                        (place.workdir / f"f{n}.txt").write_text("x\n" * 100)
                        git("-C", str(place.workdir), "add", "-A")
                        git("-C", str(place.workdir), "commit", "-qm", f"change {n}")
                        start = time.monotonic()
                        await pulls.open_or_update(thread, BOB, "")
                        pr_times.append(await told.when("Opened pull request", start) - start)
                        follower.wake(thread.key)  # as !pr does
                        base_times.append(await _baseline(server, team, n, github, http))
                        sha = server.branch_sha(REPO, place.branch) or ""
                        start = time.monotonic()
                        github.set_check(REPO, sha, "build", "in_progress")
                        poll_times.append(await told.when(f"`{sha[:7]}`", start) - start)
                        start = time.monotonic()
                        github.set_check(REPO, sha, "build", "completed", "success")
                        await follower.report_checks(
                            thread.key, sha, [Check(name="build", state="passed")]
                        )
                        hook_times.append(await told.when("all checks passed", start) - start)
                    tg.cancel_scope.cancel()
        finally:
            await github.close()
            await server.close()
    base = percentile(base_times, 0.5)
    rows = [
        [
            "`!pr` → link posted",
            ms(percentile(pr_times, 0.5)),
            ms(percentile(pr_times, 0.95)),
            ratio(percentile(pr_times, 0.5), base),
        ],
        ["plain push + POST (baseline)", ms(base), ms(percentile(base_times, 0.95)), "1.00x"],
        [
            f"check change → message, polling every {poll:g} s",
            ms(percentile(poll_times, 0.5)),
            ms(percentile(poll_times, 0.95)),
            "-",
        ],
        [
            "check change → message, report_checks (webhook path)",
            ms(percentile(hook_times, 0.5)),
            ms(percentile(hook_times, 0.95)),
            "-",
        ],
    ]
    print(machine())
    print(f"{rounds} rounds on loopback\n")
    print(table(["path", "median ms", "p95 ms", "vs baseline"], rows))


async def _baseline(
    server: GitHttpServer, team: Path, n: int, github: FakeGitHub, http: aiohttp.ClientSession
) -> float:
    """What any client does: a push with the token in the URL, one POST for the PR."""
    branch = f"base/{n}"
    work = team
    git("-C", str(work), "checkout", "-q", "-B", branch, "main")
    (team / f"b{n}.txt").write_text("y\n" * 100)
    git("-C", str(work), "add", "-A")
    git("-C", str(work), "commit", "-qm", f"base {n}")
    url = server.remote(REPO).replace("http://", f"http://x-access-token:{TOKEN}@")
    start = time.monotonic()
    await anyio.run_process(["git", "-C", str(work), "push", "-q", url, f"{branch}:{branch}"])
    async with http.post(
        f"{github.url}/repos/{REPO}/pulls",
        json={"title": "t", "head": branch, "base": "main", "body": ""},
        headers={"Authorization": f"token {TOKEN}", "User-Agent": "bench"},
    ) as answer:
        assert answer.status == 201, await answer.text()
    took = time.monotonic() - start
    git("-C", str(work), "checkout", "-q", "main")
    return took


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pull_requests", description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--poll", type=float, default=1.0, help="[forge] poll_seconds")
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    args = parser.parse_args(argv)
    anyio.run(run, 3 if args.quick else args.rounds, args.poll)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))

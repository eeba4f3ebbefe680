"""!pr, !merge and !fix's steps (bridge/core/pulls/service.py) against the GitHub fake and a
real git remote: the same PR updated, the description scrubbed, the forge's words on refusal."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from bridge.config import build_config
from bridge.core.approvals.secrets import scrubber_for
from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.leases import LocalLeases
from bridge.core.pulls.cleanup import merge_and_tell, merged_on_forge
from bridge.core.pulls.follow import CheckFollower
from bridge.core.pulls.service import PullRequests
from bridge.core.pulls.target import Refused
from bridge.core.store.opening import open_store
from bridge.core.workspaces import place_for
from bridge.core.worktrees import ensure_worktree, has_own_repository
from bridge.forge.base import MergeResult
from bridge.forge.github import GitHubForge
from tests.forge.conftest import REPO, TOKEN, Remote
from tests.forge.git_http import git

pytestmark = pytest.mark.anyio
THREAD = ThreadRef(platform="matrix", channel="!room:x", thread="$root")
CAROL = Author(id="@carol:x", display_name="Carol")
DAN = Author(id="@dan:x", display_name="Dan")


class Harness:
    def __init__(self, remote: Remote, tmp_path: Path, cleanup: str = "keep", **forge: Any) -> None:
        raw = {
            "bridge": {"data_dir": str(tmp_path / "data")},
            "workspaces": [
                {"path": str(remote.team), "worktree": True, "worktree_cleanup": cleanup}
            ],
            "forge": {
                "api_url": remote.github.url,
                "token": TOKEN,
                "users": {"dan-gh": DAN.id},
                **forge,
            },
        }
        self.config = build_config(raw, {})
        self.said: list[str] = []
        self.turns: list[str] = []
        self.purpose = "Greet politely\n\nThe greeting was rude."
        self.audited: list[tuple[str, dict[str, Any]]] = []

    async def append(self, kind: str, **detail: Any) -> None:
        self.audited.append((kind, detail))

    async def say(self, thread: ThreadRef, text: str) -> None:
        self.said.append(text)

    async def ask(self, thread: ThreadRef, author: Author) -> str:
        return self.purpose

    async def turn(self, thread: ThreadRef, author: Author, text: str) -> None:
        self.turns.append(text)

    def pulls(self, store: Any, http: aiohttp.ClientSession) -> PullRequests:
        return PullRequests(
            self.config,
            store,
            http,
            self.say,
            self.ask,
            self.turn,
            self,  # type: ignore[arg-type]
            lambda: None,
            scrub=scrubber_for(self.config),
        )

    async def commit(self, name: str) -> str:
        place = place_for(self.config, THREAD)
        assert place.branch is not None
        await ensure_worktree(place.repo or Path(), place.workdir, place.branch)
        (place.workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (place.workdir / name).write_text(name)
        git("-C", str(place.workdir), "add", name)
        git("-C", str(place.workdir), "commit", "-qm", name)
        return place.branch


async def wrote(store: Any, author: Author, n: int) -> None:
    await store.add_message(
        IncomingMessage(
            thread=THREAD, event_id=f"e{n}", message_id=f"m{n}", author=author, text="hi"
        ),
        record_thread=True,
    )


async def test_pr_opened_then_updated_and_its_description_scrubbed(
    remote: Remote, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    h = Harness(remote, tmp_path)
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        await wrote(store, CAROL, 1)
        await wrote(store, DAN, 2)
        remote.github.users["dan-gh"] = 583231
        pulls = h.pulls(store, session)
        branch = await h.commit("a.txt")
        h.purpose = f"Greet politely\n\nUsed the token {TOKEN} to test."
        first = await pulls.open_or_update(THREAD, CAROL, "")
        pull = remote.github.pulls[(REPO, first.number)]
        assert pull.title == "Greet politely" and pull.head == branch
        assert TOKEN not in pull.body and "Used the token" in pull.body
        assert "Co-authored-by: Carol <@carol:x>" in pull.body
        assert "Co-authored-by: Dan <583231+dan-gh@users.noreply.github.com>" in pull.body
        # No chat link given (no Permalinks capability): the one the bridge builds.
        assert "From the chat thread: https://matrix.to/#/!room:x/$root" in pull.body
        await h.commit(".github/workflows/ci.yml")

        async def permalink(thread: ThreadRef) -> str | None:
            return f"https://chat.example/{thread.key}"

        pulls.permalink = permalink
        again = await pulls.open_or_update(THREAD, CAROL, "Greet politely, v2")
        assert f"From the chat thread: https://chat.example/{THREAD.key}" in pull.body
        warned = next(i for i, text in enumerate(h.said) if "changes CI definitions" in text)
        assert "`.github/workflows/ci.yml`" in h.said[warned]
        assert h.said[warned + 1].startswith("Updated pull request")
        assert again.number == first.number and len(remote.github.pulls) == 1
        assert pull.title == "Greet politely, v2"
        row = await store.pull(THREAD.key)
        assert row is not None and row.pushed_sha == remote.git.branch_sha(REPO, branch)
        assert h.said[0].startswith(f"Opened pull request #{first.number}:")
        assert h.said[-1].startswith(f"Updated pull request #{first.number}:")


async def test_merge_waits_for_configured_checks_and_uses_the_method(
    remote: Remote, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    h = Harness(remote, tmp_path, required_checks=["build", "lint"], merge_method="rebase")
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        pulls = h.pulls(store, session)
        branch = await h.commit("a.txt")
        opened = await pulls.open_or_update(THREAD, CAROL, "t")
        sha = remote.git.branch_sha(REPO, branch) or ""
        remote.github.set_check(REPO, sha, "build", "completed", "success")
        with pytest.raises(Refused, match="`lint` not reported"):
            await pulls.merge(THREAD, CAROL)
        remote.github.set_check(REPO, sha, "lint", "completed", "failure", log="E lint\n")
        with pytest.raises(Refused, match="`lint` failed"):
            await pulls.merge(THREAD, CAROL)
        failing = await pulls.fix(THREAD, CAROL)
        assert [c.name for c in failing] == ["lint"] and "E lint" in h.turns[-1]
        remote.github.set_check(REPO, sha, "lint", "completed", "success")
        merged = await pulls.merge(THREAD, CAROL)
        assert merged.told and merged.by_us and merged.pull.state == "merged"
        assert remote.github.pulls[(REPO, opened.number)].merge_call["merge_method"] == "rebase"
        with pytest.raises(Refused, match="is merged: nothing to merge"):
            await pulls.merge(THREAD, CAROL)
        # The thread carries on: its next PR goes over the merged branch the bridge pushed.
        await h.commit("c.txt")
        second = await pulls.open_or_update(THREAD, CAROL, "more")
        assert second.number == opened.number + 1
        assert remote.git.branch_sha(REPO, branch) == second.head_sha
        # And when the forge deleted the merged branch (GitHub's auto-delete), a first push.
        remote.github.set_check(REPO, second.head_sha, "build", "completed", "success")
        remote.github.set_check(REPO, second.head_sha, "lint", "completed", "success")
        await pulls.merge(THREAD, CAROL)
        git("--git-dir", str(remote.git.root / f"{REPO}.git"), "branch", "-D", branch)
        await h.commit("d.txt")
        third = await pulls.open_or_update(THREAD, CAROL, "even more")
        assert third.number == second.number + 1
        assert remote.git.branch_sha(REPO, branch) == third.head_sha


async def test_the_forges_own_words_when_it_refuses(
    remote: Remote, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    h = Harness(remote, tmp_path)
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        pulls = h.pulls(store, session)
        await h.commit("a.txt")
        remote.github.scopes = "read:user"
        with pytest.raises(Refused) as refused:
            await pulls.open_or_update(THREAD, CAROL, "t")
        assert str(refused.value) == (
            "The forge refused: Resource not accessible by personal access token (HTTP 403)"
        )
        with pytest.raises(Refused, match="no pull request"):
            await pulls.merge(THREAD, CAROL)


async def test_a_pr_merged_on_the_forge_cleans_the_workspace_once(
    remote: Remote, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    h = Harness(remote, tmp_path, cleanup="remove")
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        pulls = h.pulls(store, session)
        await h.commit("a.txt")
        opened = await pulls.open_or_update(THREAD, CAROL, "t")
        place = place_for(h.config, THREAD)
        assert has_own_repository(place.workdir)
        # Merged on the forge's own page, not through !merge.
        fake = remote.github.pulls[(REPO, opened.number)]
        fake.merged, fake.state = True, "closed"

        async def merged(target: Any, row: Any) -> None:
            await merged_on_forge(pulls, None, target, row)

        one = CheckFollower(pulls, LocalLeases("here"), merged)
        two = CheckFollower(pulls, LocalLeases("here"), merged)
        row = await store.pull(THREAD.key)
        assert row is not None
        assert await one._look(row)
        assert await two._look(row)  # the webhook's wake-up, or another instance: told once
        told = [t for t in h.said if "was merged" in t]
        assert told == [
            f"Pull request #{opened.number} was merged. This thread's repository was removed "
            "(its branch stays in the workspace's repository)."
        ]
        assert not place.workdir.exists()
        cleaned = [d for k, d in h.audited if k == "forge.cleanup"]
        assert len(cleaned) == 1 and cleaned[0]["person"] == "forge" and cleaned[0]["removed"]
        assert (await store.pull(THREAD.key)).state == "merged"  # type: ignore[union-attr]


async def test_merge_after_a_merge_on_the_forge_page_tells_and_cleans_it(
    remote: Remote, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    """Merged on the forge's page, and ``!merge`` comes before the follower noticed: the
    thread is told the merge and its repository cleaned (the follower no longer looks at a PR
    that is not open), once; a second ``!merge`` has nothing to merge."""
    h = Harness(remote, tmp_path, cleanup="remove")
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        pulls = h.pulls(store, session)
        await h.commit("a.txt")
        opened = await pulls.open_or_update(THREAD, CAROL, "t")
        remote.github.pulls[(REPO, opened.number)].merged = True
        await merge_and_tell(pulls, None, THREAD, CAROL)
        assert [t for t in h.said if "erged" in t] == [
            f"Pull request #{opened.number} was merged. This thread's repository was removed "
            "(its branch stays in the workspace's repository)."
        ]
        assert not place_for(h.config, THREAD).workdir.exists()
        assert [k for k, _ in h.audited].count("forge.merged") == 0
        with pytest.raises(Refused, match="is merged: nothing to merge"):
            await merge_and_tell(pulls, None, THREAD, CAROL)
        assert [k for k, _ in h.audited].count("forge.cleanup") == 1
        assert await store.open_pulls() == []


async def test_a_merge_the_forge_queued_is_told_once_when_it_is_done(
    remote: Remote, tmp_path: Path, session: aiohttp.ClientSession, monkeypatch: Any
) -> None:
    """GitLab may answer a merge with the request still ``opened`` (merged a moment later):
    ``!merge`` says so and the follower tells the merge when the forge reports it, once."""
    h = Harness(remote, tmp_path, cleanup="remove")
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        pulls = h.pulls(store, session)
        await h.commit("a.txt")
        opened = await pulls.open_or_update(THREAD, CAROL, "t")

        async def queued(*_: Any) -> MergeResult:
            return MergeResult(merged=False, message="opened")

        monkeypatch.setattr(GitHubForge, "merge", queued)
        await merge_and_tell(pulls, None, THREAD, CAROL)
        assert h.said[-1] == (
            f"The forge took the merge of pull request #{opened.number} but has not merged it "
            "yet: this thread is told when it does."
        )
        assert [r.number for r in await store.open_pulls()] == [opened.number]
        remote.github.pulls[(REPO, opened.number)].merged = True

        async def merged(target: Any, seen: Any) -> None:
            await merged_on_forge(pulls, None, target, seen)

        follower = CheckFollower(pulls, LocalLeases("here"), merged)
        (row,) = await store.open_pulls()
        assert await follower._look(row)
        assert await follower.tick() > 0  # nothing open is left to look at
        assert [t for t in h.said if t.startswith(("Merged", "Pull request"))] == [
            f"Pull request #{opened.number} was merged. This thread's repository was removed "
            "(its branch stays in the workspace's repository)."
        ]


class Paused:
    """The store, with each record of a PR's new state held until the test lets it go: the
    path that makes it has read the forge's state and not yet recorded it."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.gates: list[tuple[anyio.Event, anyio.Event]] = []  # (go, recorded), by arrival
        self.arrived = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def waiting(self, count: int) -> None:
        """Until ``count`` records are held."""
        while len(self.gates) < count:
            self.arrived = anyio.Event()
            await self.arrived.wait()

    async def release(self, index: int) -> None:
        """Let the ``index``-th held record go, and wait until it is in the store."""
        go, recorded = self.gates[index]
        go.set()
        await recorded.wait()

    async def _held(self, record: Awaitable[Any]) -> Any:
        go, recorded = anyio.Event(), anyio.Event()
        self.gates.append((go, recorded))
        self.arrived.set()
        await go.wait()
        try:
            return await record
        finally:
            recorded.set()

    async def close_pull(self, thread_key: str, state: str) -> bool:
        return bool(await self._held(self.store.close_pull(thread_key, state)))


@pytest.mark.parametrize("first", ["merge", "forge"])
async def test_a_merge_seen_by_merge_and_by_the_forges_word_at_once_is_told_once(
    remote: Remote, tmp_path: Path, session: aiohttp.ClientSession, first: str
) -> None:
    """``!merge`` merged and the follower (the webhook's ``closed`` wakes it, or its poll)
    read the PR as merged before either recorded it: whichever records first tells the thread
    and cleans its repository, the other neither tells again nor fails."""
    h = Harness(remote, tmp_path, cleanup="remove")
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        paused = Paused(store)
        pulls = h.pulls(paused, session)
        await h.commit("a.txt")
        await pulls.open_or_update(THREAD, CAROL, "t")
        place = place_for(h.config, THREAD)
        row = await store.pull(THREAD.key)
        assert row is not None and row.state == "open"

        async def merged(target: Any, seen: Any) -> None:
            await merged_on_forge(pulls, None, target, seen)

        follower = CheckFollower(pulls, LocalLeases("here"), merged)
        async with anyio.create_task_group() as tg:
            tg.start_soon(merge_and_tell, pulls, None, THREAD, CAROL)
            await paused.waiting(1)  # merged on the forge, not recorded yet
            tg.start_soon(follower._look, row)
            await paused.waiting(2)  # the follower read it merged too
            order = [0, 1] if first == "merge" else [1, 0]
            for index in order:
                await paused.release(index)
        told = [t for t in h.said if "erged" in t]
        assert len(told) == 1, told
        assert told[0].startswith(
            f"Merged pull request #{row.number}"
            if first == "merge"
            else f"Pull request #{row.number} was merged."
        )
        assert told[0].endswith(
            "This thread's repository was removed (its branch stays in the workspace's repository)."
        )
        assert not place.workdir.exists()
        cleaned = [d for k, d in h.audited if k == "forge.cleanup"]
        assert len(cleaned) == 1 and cleaned[0]["removed"]
        assert [k for k, _ in h.audited].count("forge.merged") == 1
        assert (await store.pull(THREAD.key)).state == "merged"  # type: ignore[union-attr]

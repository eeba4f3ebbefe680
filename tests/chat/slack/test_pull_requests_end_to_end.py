"""From a Slack thread to a merged pull request: the Slack fake, the whole bridge with the agy
simulator, a real git remote over smart HTTP with credentials, and the GitHub fake.

The agent commits (the simulator runs a shell command), `!diff` shows the branch, `!pr` pushes
and opens the PR (the agent's description, the co-authors, the link back), a failing then a
passing check are each told once, `!fix` hands the agent the failing job's log, a later commit
is pushed to the same PR, `!merge` is refused to a non-approver and done by an approver, and the
thread's repository is cleaned up."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from bridge.core.team.audit import AuditLog
from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, mention_event, message_event
from tests.chat.slack.fake_slack import FakeSlack
from tests.chat.slack.test_end_to_end import Live, live_bridge
from tests.forge.conftest import REPO, TOKEN, Remote
from tests.forge.conftest import remote as remote

pytestmark = pytest.mark.anyio
COMMIT = "[[tool run_command {cmd}]]"


def commit(name: str, text: str) -> str:
    return COMMIT.format(
        cmd=f"sh -c 'echo {text} > {name} && git add {name} && git commit -qm \"add {name}\"'"
    )


def said(fake: FakeSlack, ts: str, text: str) -> list[str]:
    return [m.visible for m in fake.thread(CHANNEL, ts) if text in m.visible]


async def once(fake: FakeSlack, ts: str, text: str, seconds: float = 30) -> float:
    """Wait for the thread's one message with ``text``; when it came (monotonic)."""
    await fake.wait_for(lambda: bool(said(fake, ts, text)), seconds)
    return time.monotonic()


async def more_looks(remote: Remote, count: int) -> None:
    """The follower looked at the checks ``count`` more times."""

    def looks() -> int:
        return sum(1 for _, path in remote.github.requests if path.endswith("/check-runs"))

    start = looks()
    with anyio.fail_after(30):
        while looks() < start + count:
            await anyio.sleep(0.05)


async def test_thread_to_merged_pull_request(
    fake_slack: FakeSlack, remote: Remote, tmp_path: Path
) -> None:
    remote.github.repos[REPO].protected["main"] = ["build"]
    extra = {
        "workspaces": [{"path": str(remote.team), "worktree": True, "worktree_cleanup": "remove"}],
        "forge": {
            "kind": "github",
            "api_url": remote.github.url,
            "token": TOKEN,
            "poll_seconds": 0.2,
            "poll_max_seconds": 0.4,
        },
        "approvals": {"mode": "off", "approvers": [BOB]},
    }
    async with live_bridge(fake_slack, tmp_path, extra, quicker=10) as live:
        ts = fake_slack.next_ts()
        await fake_slack.push_event(
            mention_event(f"add a greeting {commit('hello.txt', 'hi')}", ts=ts)
        )
        answer = await live.answer(ts, "new commit(s)")
        # The turn that committed ends its answer with the branch's one-line stat.
        assert "1 new commit(s), 1 file changed, 1 insertion(+)" in answer
        key = f"slack|{CHANNEL}|{ts}"

        await say(live, ts, "!diff")
        await once(fake_slack, ts, "1 commit(s)")
        diff = said(fake_slack, ts, "1 commit(s)")[0]
        assert "add hello.txt" in diff and "hello.txt" in diff
        await fake_slack.wait_for(lambda: any(m.files for m in fake_slack.thread(CHANNEL, ts)))

        # Alice may not open the PR: only the approvers may.
        await say(live, ts, "!pr Add a greeting", user=ALICE)
        await once(fake_slack, ts, "only the approvers of this bridge may run `!pr`")
        asked = time.monotonic()
        await say(live, ts, "!pr Add a greeting", user=BOB)
        linked = await once(fake_slack, ts, "Opened pull request #1:", seconds=60)
        pull = remote.github.pulls[(REPO, 1)]
        assert pull.title == "Add a greeting" and pull.head.startswith("agy/slack-")
        assert "Co-authored-by: alice <alice@example.org>" in pull.body
        assert f"Co-authored-by: bob <{BOB}>" in pull.body
        # The link back is Slack's own (chat.getPermalink), not one the bridge built.
        link = f"https://fake.slack.com/archives/{CHANNEL}/p{ts.replace('.', '')}"
        assert f"From the chat thread: {link}" in pull.body
        assert "You said:" in pull.body  # the agent's own description turn
        first_sha = remote.git.branch_sha(REPO, pull.head)
        assert first_sha is not None

        remote.github.set_check(REPO, first_sha, "build", "in_progress")
        await once(fake_slack, ts, "⏳ running: **build**")
        failed_at = time.monotonic()
        remote.github.set_check(
            REPO,
            first_sha,
            "build",
            "completed",
            "failure",
            log="collecting...\nE   AssertionError: greeting is rude",
        )
        told = await once(fake_slack, ts, "❌ failed: **build**")
        await more_looks(remote, 3)
        assert len(said(fake_slack, ts, "❌ failed")) == 1
        assert len(said(fake_slack, ts, "⏳ running")) == 1

        # A merge now is refused: the required check failed.
        await say(live, ts, "!merge", user=BOB)
        await once(fake_slack, ts, "Not merged: required checks have not passed (`build` failed)")

        await say(live, ts, "!fix", user=ALICE)
        await live.answer(ts, "greeting is rude", seconds=60)

        await say(live, ts, f"make it polite {commit('hello.txt', 'hello')}", user=ALICE)
        await once(fake_slack, ts, "to pull request #1", seconds=60)
        second_sha = remote.git.branch_sha(REPO, pull.head)
        assert second_sha not in (None, first_sha)
        assert len(remote.github.pulls) == 1  # the same PR followed the thread

        remote.github.set_check(REPO, second_sha or "", "build", "completed", "success")
        await once(fake_slack, ts, "all checks passed")
        await more_looks(remote, 3)
        assert len(said(fake_slack, ts, "all checks passed")) == 1

        await say(live, ts, "!merge", user=ALICE)
        await once(fake_slack, ts, "only the approvers of this bridge may run `!merge`")
        await say(live, ts, "!merge", user=BOB)
        await once(fake_slack, ts, "Merged pull request #1 into `main`")
        assert pull.merged and pull.merge_call["merge_method"] == "squash"
        assert "Co-authored-by: alice <alice@example.org>" in pull.merge_call["commit_message"]
        trail = await AuditLog(live.bridge.store.database).records()
        kinds = [record.kind for record in trail]
        for kind in ("forge.push", "forge.pr_opened", "forge.fix", "forge.merged"):
            assert kind in kinds
        merged = next(r for r in trail if r.kind == "forge.merged")
        assert merged.person == BOB
        row = await live.bridge.store.pull(key)
        assert row is not None and row.state == "merged"
        workdir = tmp_path / "data" / "worktrees"
        with anyio.fail_after(60):
            while any(workdir.iterdir()):
                await anyio.sleep(0.1)
        print(
            f"\n!pr to link posted: {linked - asked:.2f} s; check change to message: "
            f"{told - failed_at:.2f} s"
        )


async def say(live: Live, ts: str, text: str, user: str = ALICE) -> None:
    await live.fake.push_event(message_event(text, ts=live.fake.next_ts(), thread_ts=ts, user=user))

"""GitHub's webhooks into a Slack thread with a pull request: the Slack fake, the whole bridge on
the agy simulator, the real smart-HTTP remote and the GitHub fake, with signed deliveries sent to
the bridge's listener as GitHub sends them.

Polling is slowed to a minute, so what reaches the thread in time came by webhook: a check run
failing is told once (a redelivery with the same id tells nothing, a forged one is refused), a
review by a mapped teammate is answered, a stranger's comment is shown and not answered, and a
merge made on GitHub is told."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bridge.admin import AdminServer
from bridge.forge.webhooks import GITHUB_PATH, github_signature
from tests.chat.slack.conftest import ALICE, BOB, CHANNEL, mention_event
from tests.chat.slack.fake_slack import FakeSlack
from tests.chat.slack.test_end_to_end import live_bridge
from tests.chat.slack.test_gitlab_end_to_end import commit, once, said, say
from tests.forge.conftest import REPO, TOKEN, Remote
from tests.forge.conftest import remote as remote
from tests.forge.webhook_listener import serving_webhooks

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "gh-webhook-secret-e2e"


async def deliver(
    admin: AdminServer,
    event: str,
    payload: dict[str, Any],
    *,
    delivery: str | None = None,
    secret: str = SECRET,
) -> int:
    body = json.dumps({**payload, "repository": {"full_name": REPO}}).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": github_signature(secret, body),
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(admin.url + GITHUB_PATH, data=body, headers=headers) as resp,
    ):
        return resp.status


async def test_github_webhooks_reach_the_thread(
    fake_slack: FakeSlack, remote: Remote, tmp_path: Path
) -> None:
    extra = {
        "workspaces": [{"path": str(remote.team), "worktree": True}],
        "forge": {
            "kind": "github",
            "api_url": remote.github.url,
            "token": TOKEN,
            "webhook_secret": SECRET,
            "users": {"alice-gh": ALICE},
            "poll_seconds": 60,
            "poll_max_seconds": 120,
        },
        "approvals": {"mode": "off", "approvers": [BOB]},
    }
    async with live_bridge(fake_slack, tmp_path, extra, quicker=10) as live:
        bridge = live.bridge
        async with serving_webhooks(bridge) as admin:
            ts = fake_slack.next_ts()
            await fake_slack.push_event(
                mention_event(f"add a greeting {commit('hello.txt', 'hi')}", ts=ts)
            )
            await live.answer(ts, "add a greeting")
            await say(live, ts, "!pr Add a greeting", user=BOB)
            await once(fake_slack, ts, "Opened pull request #1:", seconds=60)
            pull = remote.github.pulls[(REPO, 1)]
            sha = remote.git.branch_sha(REPO, pull.head) or ""
            link = {"number": 1, "head": {"ref": pull.head, "sha": sha}}

            job = remote.github.set_check(REPO, sha, "build", "completed", "failure")
            run = {
                "id": job,
                "name": "build",
                "head_sha": sha,
                "status": "completed",
                "conclusion": "failure",
                "pull_requests": [link],
            }
            delivery = str(uuid.uuid4())
            payload = {"action": "completed", "check_run": run}
            assert await deliver(admin, "check_run", payload, delivery=delivery) == 200
            await once(fake_slack, ts, "❌ failed: **build**")
            assert await deliver(admin, "check_run", payload, delivery=delivery) == 200
            assert await deliver(admin, "check_run", payload, secret="forged") == 401

            comment = {
                "id": 77,
                "body": "please add a test",
                "user": {"login": "mallory-gh"},
                "html_url": "https://github.example/c/77",
            }
            issue = {"number": 1, "pull_request": {"url": "…"}}
            stranger = {"action": "created", "issue": issue, "comment": comment}
            assert await deliver(admin, "issue_comment", stranger) == 200
            await once(fake_slack, ts, "Unlisted: **mallory-gh**")

            review = {
                "id": 78,
                "body": "greet in French",
                "user": {"login": "alice-gh"},
                "state": "commented",
            }
            teammate = {"action": "submitted", "review": review, "pull_request": link}
            assert await deliver(admin, "pull_request_review", teammate) == 200
            await live.answer(ts, "greet in French", seconds=60)
            answers = said(fake_slack, ts, "You said:")
            assert not any("please add a test" in a for a in answers)
            assert len(said(fake_slack, ts, "❌ failed:")) == 1

            # Merged on GitHub, not through the bridge: the thread is told, the row follows.
            pull.merged = True
            closed = {
                "action": "closed",
                "pull_request": {"number": 1, "merged": True, "head": {"ref": pull.head}},
            }
            assert await deliver(admin, "pull_request", closed) == 200
            await once(fake_slack, ts, "Pull request #1 was merged")
            row = await bridge.store.pull(f"slack|{CHANNEL}|{ts}")
            assert row is not None and row.state == "merged"

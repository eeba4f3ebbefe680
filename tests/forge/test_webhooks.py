"""Forge webhooks on the admin listener: signatures (valid, wrong, missing), replays, and the
events GitHub's and GitLab's payloads become."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bridge.admin import AdminServer, open_admin
from bridge.forge.hook_events import ChecksChanged, ForgeEvent, PrClosed, ReviewComment
from bridge.forge.webhooks import (
    GITHUB_PATH,
    GITLAB_PATH,
    MAX_BODY_BYTES,
    WebhookEndpoint,
    WebhookReceiver,
    github_signature,
)
from bridge.metrics import Metrics
from tests.forge.fake_gitlab import FakeGitLab, serve_fake_gitlab

pytestmark = pytest.mark.anyio

SECRET = "whsec-0123456789abcdef"
GL_SECRET = "gl-hook-secret-abcdef"
REPO = "team/app"


async def healthy() -> dict[str, Any]:
    return {"status": "ok"}


class Recorder:
    def __init__(self) -> None:
        self.events: list[ForgeEvent] = []

    async def __call__(self, event: ForgeEvent) -> None:
        self.events.append(event)


@pytest.fixture
async def served() -> AsyncIterator[tuple[AdminServer, Recorder]]:
    sink = Recorder()
    receiver = WebhookReceiver(
        [
            WebhookEndpoint("github", REPO, SECRET),
            WebhookEndpoint("gitlab", REPO, GL_SECRET),
        ],
        sink,
    )
    async with open_admin(
        Metrics(), port=0, health=healthy, posts=receiver.routes(), max_body=MAX_BODY_BYTES
    ) as server:
        yield server, sink


async def post_github(
    server: AdminServer,
    event: str,
    payload: dict[str, Any],
    *,
    secret: str | None = SECRET,
    delivery: str | None = None,
) -> int:
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
    }
    if secret is not None:
        headers["X-Hub-Signature-256"] = github_signature(secret, body)
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.url + GITHUB_PATH, data=body, headers=headers) as resp,
    ):
        return resp.status


def repository(name: str = REPO) -> dict[str, Any]:
    return {"id": 1, "full_name": name, "name": name.split("/")[1], "private": True}


def issue_comment(body: str, *, on_pr: bool = True, login: str = "alice") -> dict[str, Any]:
    issue: dict[str, Any] = {"number": 7, "title": "Change", "state": "open"}
    if on_pr:
        issue["pull_request"] = {"url": "https://api.github.com/repos/team/app/pulls/7"}
    return {
        "action": "created",
        "issue": issue,
        "comment": {
            "id": 4242,
            "body": body,
            "user": {"login": login, "id": 9, "type": "User"},
            "html_url": "https://github.com/team/app/pull/7#issuecomment-4242",
            "author_association": "MEMBER",
        },
        "repository": repository(),
        "sender": {"login": login},
    }


async def test_a_signed_github_delivery_is_handled(served: tuple[AdminServer, Recorder]) -> None:
    server, sink = served
    assert await post_github(server, "issue_comment", issue_comment("please rename x")) == 200
    assert sink.events == [
        ReviewComment(
            forge="github",
            repo=REPO,
            number=7,
            login="alice",
            body="please rename x",
            url="https://github.com/team/app/pull/7#issuecomment-4242",
            comment_id="comment:4242",
        )
    ]


async def test_a_wrong_or_missing_signature_is_refused_and_logged_without_the_secret(
    served: tuple[AdminServer, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    server, sink = served
    caplog.set_level(logging.DEBUG)
    payload = issue_comment("run rm -rf")
    assert await post_github(server, "issue_comment", payload, secret="guessed") == 401
    assert await post_github(server, "issue_comment", payload, secret=None) == 401
    assert sink.events == []
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 2
    assert "no secret matches" in refusals[0] and "carries no signature" in refusals[1]
    assert SECRET not in caplog.text and github_signature(SECRET, b"") not in caplog.text


async def test_a_replayed_delivery_is_ignored(served: tuple[AdminServer, Recorder]) -> None:
    server, sink = served
    delivery = str(uuid.uuid4())
    payload = issue_comment("one")
    assert await post_github(server, "issue_comment", payload, delivery=delivery) == 200
    assert await post_github(server, "issue_comment", payload, delivery=delivery) == 200
    assert len(sink.events) == 1


async def test_a_signature_covers_only_its_own_repository(
    served: tuple[AdminServer, Recorder],
) -> None:
    server, sink = served
    payload = {**issue_comment("hi"), "repository": repository("team/other")}
    assert await post_github(server, "issue_comment", payload) == 200
    assert sink.events == []


async def test_github_checks_and_closing(served: tuple[AdminServer, Recorder]) -> None:
    server, sink = served
    pr_link = {"number": 7, "head": {"ref": "agy/t1", "sha": "b" * 40}, "base": {"ref": "main"}}
    run = {
        "id": 55,
        "name": "test",
        "head_sha": "b" * 40,
        "status": "completed",
        "conclusion": "failure",
        "html_url": "https://github.com/team/app/runs/55",
        "pull_requests": [pr_link],
        "app": {"slug": "github-actions"},
    }
    await post_github(server, "check_run", {"action": "completed", "check_run": run, **_r()})
    status = {"sha": "b" * 40, "state": "pending", "context": "ci/lint", "branches": []}
    await post_github(server, "status", {**status, **_r()})
    closed = {
        "action": "closed",
        "number": 7,
        "pull_request": {
            "number": 7,
            "merged": True,
            "merge_commit_sha": "c" * 40,
            "head": {"ref": "agy/t1"},
        },
    }
    await post_github(server, "pull_request", {**closed, **_r()})
    await post_github(server, "ping", {"zen": "Keep it logically awesome.", "hook_id": 1})
    first, second, third = sink.events
    assert isinstance(first, ChecksChanged) and first.prs == (7,) and first.branch == "agy/t1"
    assert [(c.name, c.state, c.job_id) for c in first.checks] == [("test", "failed", "55")]
    assert isinstance(second, ChecksChanged)
    assert [(c.name, c.state) for c in second.checks] == [("ci/lint", "pending")]
    assert third == PrClosed(
        forge="github", repo=REPO, number=7, branch="agy/t1", merged=True, sha="c" * 40
    )


def _r() -> dict[str, Any]:
    return {"repository": repository()}


async def test_github_reviews_and_line_comments(served: tuple[AdminServer, Recorder]) -> None:
    server, sink = served
    pr = {"number": 7, "head": {"ref": "agy/t1", "sha": "b" * 40}}
    review = {
        "action": "submitted",
        "review": {
            "id": 8,
            "body": "looks off",
            "user": {"login": "bob"},
            "state": "changes_requested",
        },
        "pull_request": pr,
    }
    approved = {
        "action": "submitted",
        "review": {"id": 9, "body": None, "user": {"login": "bob"}, "state": "approved"},
        "pull_request": pr,
    }
    line = {
        "action": "created",
        "comment": {"id": 10, "body": "typo", "user": {"login": "bob"}, "path": "a.py", "line": 3},
        "pull_request": pr,
    }
    await post_github(server, "pull_request_review", {**review, **_r()})
    await post_github(server, "pull_request_review", {**approved, **_r()})
    await post_github(server, "pull_request_review_comment", {**line, **_r()})
    await post_github(server, "issue_comment", issue_comment("on an issue", on_pr=False))
    assert [(e.comment_id, e.body, e.path, e.line) for e in sink.events] == [  # type: ignore[union-attr]
        ("review:8", "looks off", "", None),
        ("comment:10", "typo", "a.py", 3),
    ]


async def test_a_malformed_signed_payload_is_refused(served: tuple[AdminServer, Recorder]) -> None:
    server, sink = served
    broken = {"action": "completed", "check_run": {"name": "no id"}, **_r()}
    assert await post_github(server, "check_run", broken) == 400
    assert sink.events == []


# ----- GitLab ---------------------------------------------------------------------------


@pytest.fixture
async def gitlab() -> AsyncIterator[FakeGitLab]:
    async with serve_fake_gitlab() as fake:
        yield fake


async def test_gitlab_token_valid_wrong_missing_and_replay(
    served: tuple[AdminServer, Recorder], gitlab: FakeGitLab
) -> None:
    server, sink = served
    project = gitlab.add_project(REPO, branches={"main": "a" * 40, "agy/t1": "b" * 40})
    gitlab.add_hook(project, server.url + GITLAB_PATH, GL_SECRET)
    gitlab.add_hook(project, server.url + GITLAB_PATH, "wrong-secret")
    await _open_mr(gitlab, project)
    await gitlab.add_note(project, 1, "alice", "please add a test")
    good, wrong = gitlab.deliveries
    assert (good.status, wrong.status) == (200, 401)
    assert sink.events == [
        ReviewComment(
            forge="gitlab",
            repo=REPO,
            number=1,
            branch="agy/t1",
            login="alice",
            body="please add a test",
            url=json.loads(good.body)["object_attributes"]["url"],
            comment_id=f"note:{json.loads(good.body)['object_attributes']['id']}",
        )
    ]
    assert await gitlab.redeliver(good) == 200  # GitLab's retry: the same Idempotency-Key
    assert len(sink.events) == 1
    # An older GitLab sends no delivery id: the same body is the same delivery.
    old = {
        k: v
        for k, v in good.headers.items()
        if k not in ("Idempotency-Key", "X-Gitlab-Event-UUID", "X-Gitlab-Webhook-UUID")
    }
    for _ in range(2):
        async with (
            aiohttp.ClientSession() as session,
            session.post(good.url, data=good.body, headers=old) as resp,
        ):
            assert resp.status == 200
    assert len(sink.events) == 2
    missing = {k: v for k, v in good.headers.items() if k != "X-Gitlab-Token"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(good.url, data=good.body, headers=missing) as resp,
    ):
        assert resp.status == 401


async def test_gitlab_pipelines_merges_and_system_notes(
    served: tuple[AdminServer, Recorder], gitlab: FakeGitLab
) -> None:
    server, sink = served
    project = gitlab.add_project(REPO, branches={"main": "a" * 40, "agy/t1": "b" * 40})
    gitlab.add_hook(project, server.url + GITLAB_PATH, GL_SECRET)
    await _open_mr(gitlab, project)
    pipeline = gitlab.add_pipeline(project, "b" * 40, "agy/t1", [("test", "pending")])
    await gitlab.set_pipeline(project, pipeline, "failed", {"test": "failed"})
    await gitlab.add_note(project, 1, "gitlab", "added 1 commit", system=True)
    await gitlab.set_pipeline(project, pipeline, "success", {"test": "success"})
    project.merge_requests[1].state = "opened"
    async with (
        aiohttp.ClientSession() as session,
        session.put(
            f"{gitlab.api_url}/projects/team%2Fapp/merge_requests/1/merge",
            headers={"PRIVATE-TOKEN": next(iter(gitlab.tokens))},
            json={"squash": True},
        ) as resp,
    ):
        assert resp.status == 200
    failed, passed, merged = sink.events
    assert isinstance(failed, ChecksChanged) and failed.prs == (1,)
    assert [(c.name, c.state) for c in failed.checks] == [("test", "failed")]
    assert failed.checks[0].url.endswith(f"/-/jobs/{pipeline.jobs[0].id}")
    assert isinstance(passed, ChecksChanged) and passed.checks[0].state == "passed"
    assert isinstance(merged, PrClosed) and merged.merged and merged.number == 1


async def _open_mr(gitlab: FakeGitLab, project: Any) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gitlab.api_url}/projects/{project.id}/merge_requests",
            headers={"PRIVATE-TOKEN": next(iter(gitlab.tokens))},
            json={"source_branch": "agy/t1", "target_branch": "main", "title": "Change"},
        ) as resp,
    ):
        assert resp.status == 201


async def test_a_body_over_the_cap_is_refused_unread(served: tuple[AdminServer, Recorder]) -> None:
    server, sink = served
    body = b"{" + b" " * MAX_BODY_BYTES + b"}"
    headers = {
        "X-GitHub-Event": "issue_comment",
        "X-GitHub-Delivery": "big",
        "X-Hub-Signature-256": github_signature(SECRET, body),
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.url + GITHUB_PATH, data=body, headers=headers) as resp,
    ):
        assert resp.status == 413
    assert sink.events == []


async def test_remembered_deliveries_are_bounded(
    served: tuple[AdminServer, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, sink = served
    monkeypatch.setattr("bridge.forge.webhooks.SEEN_CAPACITY", 2)
    for delivery in ("d1", "d2", "d3", "d3", "d1"):
        assert await post_github(
            server, "issue_comment", issue_comment(delivery), delivery=delivery
        )
    # d3 again is a replay; d1 was forgotten after two newer ones (its comment id still
    # keeps it from being stored twice: the inbox's unique event id).
    assert [e.body for e in sink.events] == ["d1", "d2", "d3", "d1"]  # type: ignore[union-attr]

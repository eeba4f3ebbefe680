"""The GitLab client against the strict GitLab fake: merge requests, pipelines as checks, job
logs, merges (squash keeps the Co-authored-by trailers), required checks, token scopes and
GitLab's own error texts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from bridge.forge.base import Check, ForgeError
from bridge.forge.gitlab import PIPELINE_CHECK, GitLabForge
from tests.forge.fake_gitlab import READ_TOKEN, TOKEN, FakeGitLab, Project, serve_fake_gitlab

pytestmark = pytest.mark.anyio

REPO = "team/sub/app"
HEAD = "agy/t1"
SHA = "b" * 40


@pytest.fixture
async def gitlab() -> AsyncIterator[FakeGitLab]:
    async with serve_fake_gitlab() as fake:
        fake.add_project(REPO, default_branch="trunk", branches={"trunk": "a" * 40, HEAD: SHA})
        yield fake


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def forge(fake: FakeGitLab, session: aiohttp.ClientSession, token: str = TOKEN) -> GitLabForge:
    return GitLabForge(session, fake.api_url, token, REPO)


async def test_merge_requests_open_find_update(
    gitlab: FakeGitLab, session: aiohttp.ClientSession
) -> None:
    client = forge(gitlab, session)
    assert await client.default_branch() == "trunk"
    assert await client.find_open_pr(HEAD) is None
    pr = await client.open_pr(HEAD, "trunk", "Add x", "Why: y")
    assert (pr.number, pr.head, pr.base, pr.state, pr.head_sha) == (1, HEAD, "trunk", "open", SHA)
    assert pr.url.endswith("/team/sub/app/-/merge_requests/1")
    # The project is addressed by its encoded path, never with raw slashes.
    assert all("team%2Fsub%2Fapp" in path for _, path in gitlab.requests)
    with pytest.raises(ForgeError) as refused:
        await client.open_pr(HEAD, "trunk", "Again", "")
    assert refused.value.status == 409
    assert refused.value.text == (
        "Another open merge request already exists for this source branch: !1"
    )
    found = await client.find_open_pr(HEAD)
    assert found is not None and found.number == 1
    updated = await client.update_pr(1, "Add x, better", "Why: z")
    assert (updated.title, updated.body) == ("Add x, better", "Why: z")
    assert (await client.get_pr(1)).title == "Add x, better"


async def test_a_bad_token_and_a_missing_scope_give_gitlabs_words(
    gitlab: FakeGitLab, session: aiohttp.ClientSession
) -> None:
    with pytest.raises(ForgeError) as bad:
        await forge(gitlab, session, "glpat-wrong").default_branch()
    assert (bad.value.status, bad.value.text) == (401, "401 Unauthorized")
    reader = forge(gitlab, session, READ_TOKEN)
    assert await reader.token_scopes() == ["read_api"]
    with pytest.raises(ForgeError) as scope:
        await reader.open_pr(HEAD, "trunk", "t", "")
    assert scope.value.status == 403 and "insufficient_scope" in scope.value.text
    assert "scope: api" in scope.value.text
    with pytest.raises(ForgeError) as missing:
        await GitLabForge(session, gitlab.api_url, TOKEN, "team/none").default_branch()
    assert (missing.value.status, missing.value.text) == (404, "404 Project Not Found")


async def test_pipelines_jobs_and_statuses_are_checks(
    gitlab: FakeGitLab, session: aiohttp.ClientSession
) -> None:
    project = gitlab.project(REPO)
    client = forge(gitlab, session)
    assert await client.checks(SHA) == []
    old = gitlab.add_pipeline(project, SHA, HEAD, [("test", "failed")], "failed")
    pipeline = gitlab.add_pipeline(
        project, SHA, HEAD, [("build", "success"), ("test", "running"), ("lint", "failed")]
    )
    pipeline.jobs[2].allow_failure = True
    project.statuses.append(
        {"sha": SHA, "name": "deploy-preview", "status": "pending", "target_url": "https://x"}
    )
    project.statuses.append({"sha": SHA, "name": "test", "status": "running"})  # a job too
    checks = await client.checks(SHA)
    assert [(c.name, c.state) for c in checks] == [
        (PIPELINE_CHECK, "running"),
        ("build", "passed"),
        ("test", "running"),
        ("lint", "skipped"),  # allowed to fail: neither a pass nor a failure
        ("deploy-preview", "pending"),
    ]
    assert old.id != pipeline.id and checks[0].url.endswith(f"/-/pipelines/{pipeline.id}")
    assert checks[2].job_id == str(pipeline.jobs[1].id)


async def test_job_log_tail(gitlab: FakeGitLab, session: aiohttp.ClientSession) -> None:
    project = gitlab.project(REPO)
    pipeline = gitlab.add_pipeline(project, SHA, HEAD, [("test", "failed")], "failed")
    pipeline.jobs[0].trace = "x" * 200_000 + "\nAssertionError: 2 != 3\n"
    client = forge(gitlab, session)
    check = Check(name="test", state="failed", job_id=str(pipeline.jobs[0].id))
    tail = await client.job_log(check, tail_bytes=100)
    assert len(tail) == 100 and tail.endswith("AssertionError: 2 != 3\n")
    assert await client.job_log(Check(name="ext", state="failed")) == ""
    with pytest.raises(ForgeError) as missing:
        await client.job_log(Check(name="gone", state="failed", job_id="999999"))
    assert missing.value.status == 404


async def test_merge_is_refused_while_the_pipeline_runs_then_squashes_with_trailers(
    gitlab: FakeGitLab, session: aiohttp.ClientSession
) -> None:
    project: Project = gitlab.project(REPO)
    client = forge(gitlab, session)
    assert await client.required_checks("trunk") == [PIPELINE_CHECK]
    await client.open_pr(HEAD, "trunk", "Add x", "body")
    pipeline = gitlab.add_pipeline(project, SHA, HEAD, [("test", "running")])
    message = "Why: y\n\nCo-authored-by: Alice <alice@example.org>"
    with pytest.raises(ForgeError) as running:
        await client.merge(1, "squash", "Add x (!1)", message)
    assert running.value.status == 405
    assert running.value.text == (
        "405 Method Not Allowed (detailed_merge_status: ci_still_running)"
    )
    await gitlab.set_pipeline(project, pipeline, "success", {"test": "success"})
    project.merge_requests[1].has_conflicts = True
    with pytest.raises(ForgeError) as conflict:
        await client.merge(1, "squash", "Add x (!1)", message)
    assert conflict.value.status == 406 and conflict.value.text.startswith("Branch cannot be")
    project.merge_requests[1].has_conflicts = False
    result = await client.merge(1, "squash", "Add x (!1)", message)
    mr = project.merge_requests[1]
    assert result.merged and result.sha == mr.squash_commit_sha
    assert mr.squash and mr.merged_message == f"Add x (!1)\n\n{message}"
    assert (await client.get_pr(1)).state == "merged"
    project.only_allow_merge_if_pipeline_succeeds = False
    assert await client.required_checks("trunk") == []


async def test_merge_refuses_a_head_that_moved(
    gitlab: FakeGitLab, session: aiohttp.ClientSession
) -> None:
    project = gitlab.project(REPO)
    project.only_allow_merge_if_pipeline_succeeds = False
    client = forge(gitlab, session)
    await client.open_pr(HEAD, "trunk", "Add x", "")
    moved = False

    async def read_branch(name: str) -> str | None:
        # The head moves between the client's look and its merge (a push in between).
        nonlocal moved
        if name == HEAD and any(p.endswith("/merge") for _, p in gitlab.requests):
            moved = True
            return "c" * 40
        return project.branches.get(name)

    project.read_branch = read_branch
    with pytest.raises(ForgeError) as refused:
        await client.merge(1, "merge", "Add x", "")
    assert moved and refused.value.status == 409
    assert refused.value.text.startswith("SHA does not match HEAD of source branch")


async def test_protected_branches_and_an_unreachable_gitlab(
    gitlab: FakeGitLab, session: aiohttp.ClientSession
) -> None:
    gitlab.project(REPO).protected.append("trunk")
    client = forge(gitlab, session)
    assert await client.protected("trunk") and not await client.protected(HEAD)
    gone = GitLabForge(session, "http://127.0.0.1:9/api/v4", TOKEN, REPO)
    with pytest.raises(ForgeError) as unreachable:
        await gone.default_branch()
    assert unreachable.value.status == 0 and TOKEN not in str(unreachable.value)


async def test_a_merged_results_pipeline_is_the_heads_checks(
    gitlab: FakeGitLab, session: aiohttp.ClientSession
) -> None:
    project = gitlab.project(REPO)
    client = forge(gitlab, session)
    await client.open_pr(HEAD, "trunk", "Add x", "")
    # GitLab runs it on a merge commit of its own, on refs/merge-requests/1/merge.
    pipeline = gitlab.add_pipeline(
        project,
        "m" * 40,
        "refs/merge-requests/1/merge",
        [("test", "failed")],
        "failed",
        source="merge_request_event",
    )
    checks = await client.checks(SHA)
    assert [(c.name, c.state) for c in checks] == [(PIPELINE_CHECK, "failed"), ("test", "failed")]
    assert checks[1].job_id == str(pipeline.jobs[0].id)


async def test_user_id_looked_up_by_username(
    gitlab: FakeGitLab, session: aiohttp.ClientSession
) -> None:
    gitlab.users["Alice-GL"] = 4711
    client = forge(gitlab, session)
    assert await client.user_id("alice-gl") == 4711
    assert await client.user_id("nobody") is None
    assert ("GET", "/api/v4/users") in gitlab.requests
    with pytest.raises(ForgeError) as refused:
        await forge(gitlab, session, "wrong").user_id("alice-gl")
    assert refused.value.status == 401

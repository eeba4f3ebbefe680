"""The GitLab fake answers as GitLab does where the bridge depends on it (raw HTTP, no client)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.forge.fake_gitlab import READ_TOKEN, TOKEN, FakeGitLab, serve_fake_gitlab

pytestmark = pytest.mark.anyio

PATH = "team/app"
ENCODED = "team%2Fapp"


@pytest.fixture
async def gitlab() -> AsyncIterator[FakeGitLab]:
    async with serve_fake_gitlab() as fake:
        fake.add_project(PATH, branches={"main": "a" * 40, "agy/t1": "b" * 40})
        yield fake


async def call(
    fake: FakeGitLab, method: str, path: str, token: str | None = TOKEN, **kwargs: Any
) -> tuple[int, Any]:
    headers = {"PRIVATE-TOKEN": token} if token else {}
    headers.update(kwargs.pop("headers", {}))
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, fake.api_url + path, headers=headers, **kwargs) as resp,
    ):
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


async def test_a_token_is_required_in_either_header(gitlab: FakeGitLab) -> None:
    assert await call(gitlab, "GET", f"/projects/{ENCODED}", token=None) == (
        401,
        {"message": "401 Unauthorized"},
    )
    assert (await call(gitlab, "GET", f"/projects/{ENCODED}", token="wrong"))[0] == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    status, body = await call(gitlab, "GET", f"/projects/{ENCODED}", token=None, headers=bearer)
    assert status == 200 and body["path_with_namespace"] == PATH


async def test_a_project_is_named_by_its_encoded_path_or_id(gitlab: FakeGitLab) -> None:
    assert (await call(gitlab, "GET", f"/projects/{PATH}"))[0] == 404
    status, body = await call(gitlab, "GET", f"/projects/{gitlab.project(PATH).id}")
    assert status == 200 and body["default_branch"] == "main"
    assert await call(gitlab, "GET", "/projects/team%2Fnone") == (
        404,
        {"message": "404 Project Not Found"},
    )


async def test_read_api_cannot_write(gitlab: FakeGitLab) -> None:
    status, body = await call(
        gitlab,
        "POST",
        f"/projects/{ENCODED}/merge_requests",
        token=READ_TOKEN,
        json={"source_branch": "agy/t1", "target_branch": "main", "title": "x"},
    )
    assert status == 403 and body["error"] == "insufficient_scope"
    status, body = await call(gitlab, "GET", "/personal_access_tokens/self", token=READ_TOKEN)
    assert status == 200 and body["scopes"] == ["read_api"]


async def test_a_second_open_merge_request_is_a_conflict(gitlab: FakeGitLab) -> None:
    new = {"source_branch": "agy/t1", "target_branch": "main", "title": "Change"}
    status, mr = await call(gitlab, "POST", f"/projects/{ENCODED}/merge_requests", json=new)
    assert status == 201 and mr["iid"] == 1 and mr["sha"] == "b" * 40
    assert await call(gitlab, "POST", f"/projects/{ENCODED}/merge_requests", json=new) == (
        409,
        {"message": ["Another open merge request already exists for this source branch: !1"]},
    )
    status, body = await call(
        gitlab, "POST", f"/projects/{ENCODED}/merge_requests", json={"source_branch": "agy/t1"}
    )
    assert status == 400 and body == {"error": "target_branch is missing"}


async def test_merge_waits_for_the_pipeline_and_refuses_conflicts(gitlab: FakeGitLab) -> None:
    project = gitlab.project(PATH)
    new = {"source_branch": "agy/t1", "target_branch": "main", "title": "Change"}
    await call(gitlab, "POST", f"/projects/{ENCODED}/merge_requests", json=new)
    merge = f"/projects/{ENCODED}/merge_requests/1/merge"
    # No pipeline yet, and the project requires one to succeed.
    assert await call(gitlab, "PUT", merge) == (405, {"message": "405 Method Not Allowed"})
    pipeline = gitlab.add_pipeline(project, "b" * 40, "agy/t1", [("test", "running")])
    assert (await call(gitlab, "PUT", merge))[0] == 405
    await gitlab.set_pipeline(project, pipeline, "success", {"test": "success"})
    project.merge_requests[1].has_conflicts = True
    assert await call(gitlab, "PUT", merge) == (406, {"message": "Branch cannot be merged"})
    project.merge_requests[1].has_conflicts = False
    assert (await call(gitlab, "PUT", merge, json={"sha": "c" * 40}))[0] == 409
    status, body = await call(
        gitlab, "PUT", merge, json={"squash": True, "squash_commit_message": "m"}
    )
    assert status == 200 and body["state"] == "merged" and body["squash_commit_sha"]
    assert (await call(gitlab, "PUT", merge))[0] == 405  # not open any more


async def test_pipelines_jobs_traces_and_statuses(gitlab: FakeGitLab) -> None:
    project = gitlab.project(PATH)
    pipeline = gitlab.add_pipeline(project, "b" * 40, "agy/t1", [("lint", "failed")], "failed")
    pipeline.jobs[0].trace = "line 1\nerror: lint failed\n"
    status, found = await call(gitlab, "GET", f"/projects/{ENCODED}/pipelines?sha={'b' * 40}")
    assert status == 200 and [p["id"] for p in found] == [pipeline.id]
    _, jobs = await call(gitlab, "GET", f"/projects/{ENCODED}/pipelines/{pipeline.id}/jobs")
    assert jobs[0]["name"] == "lint" and jobs[0]["status"] == "failed"
    status, trace = await call(gitlab, "GET", f"/projects/{ENCODED}/jobs/{jobs[0]['id']}/trace")
    assert status == 200 and trace.endswith("lint failed\n")
    status, _ = await call(
        gitlab, "POST", f"/projects/{ENCODED}/statuses/{'b' * 40}", json={"state": "bogus"}
    )
    assert status == 400
    await call(
        gitlab,
        "POST",
        f"/projects/{ENCODED}/statuses/{'b' * 40}",
        json={"state": "success", "name": "deploy"},
    )
    _, statuses = await call(
        gitlab, "GET", f"/projects/{ENCODED}/repository/commits/{'b' * 40}/statuses"
    )
    assert [(s["name"], s["status"]) for s in statuses] == [("deploy", "success")]


async def test_protected_branches(gitlab: FakeGitLab) -> None:
    gitlab.project(PATH).protected.append("main")
    status, body = await call(gitlab, "GET", f"/projects/{ENCODED}/protected_branches/main")
    assert status == 200 and body["push_access_levels"][0]["access_level"] == 40
    assert (await call(gitlab, "GET", f"/projects/{ENCODED}/protected_branches/dev"))[0] == 404

"""The GitHub client (bridge/forge/github.py) against the strict fake and a real git remote."""

from __future__ import annotations

import aiohttp
import pytest

from bridge.forge.base import ForgeError
from bridge.forge.github import GitHubForge
from tests.forge.conftest import REPO, TOKEN, Remote

pytestmark = pytest.mark.anyio


def forge(remote: Remote, session: aiohttp.ClientSession, token: str = TOKEN) -> GitHubForge:
    return GitHubForge(session, remote.github.url, token, REPO)


async def test_pull_request_opened_found_updated_and_refused_twice(
    remote: Remote, session: aiohttp.ClientSession
) -> None:
    gh = forge(remote, session)
    assert await gh.default_branch() == "main"
    sha = remote.push_branch("agy/t1", "one")
    assert await gh.find_open_pr("agy/t1") is None
    pr = await gh.open_pr("agy/t1", "main", "Fix it", "body")
    assert (pr.number, pr.head, pr.base, pr.state) == (1, "agy/t1", "main", "open")
    assert pr.head_sha == sha
    assert pr.url.endswith(f"/{REPO}/pull/1")
    assert await gh.find_open_pr("agy/t1") == pr
    with pytest.raises(ForgeError) as second:
        await gh.open_pr("agy/t1", "main", "Again", "")
    assert second.value.status == 422
    assert "A pull request already exists for team:agy/t1" in second.value.text
    updated = await gh.update_pr(1, "Fix it well", "new body")
    assert (updated.title, updated.body) == ("Fix it well", "new body")


async def test_bad_token_and_missing_scope_carry_githubs_words(
    remote: Remote, session: aiohttp.ClientSession
) -> None:
    with pytest.raises(ForgeError) as bad:
        await forge(remote, session, "ghp_wrong").default_branch()
    assert (bad.value.status, bad.value.text) == (401, "Bad credentials")
    remote.github.scopes = "read:org"
    gh = forge(remote, session)
    assert await gh.token_scopes() == ["read:org"]
    remote.push_branch("agy/t2", "two")
    with pytest.raises(ForgeError) as scope:
        await gh.open_pr("agy/t2", "main", "t", "b")
    assert scope.value.status == 403
    assert "Resource not accessible" in scope.value.text


async def test_checks_logs_required_checks_and_merge(
    remote: Remote, session: aiohttp.ClientSession
) -> None:
    gh = forge(remote, session)
    sha = remote.push_branch("agy/t3", "three")
    pr = await gh.open_pr("agy/t3", "main", "Three", "b")
    remote.github.repos[REPO].protected["main"] = ["build", "lint"]
    assert await gh.required_checks("main") == ["build", "lint"]
    job = remote.github.set_check(REPO, sha, "build", "in_progress")
    remote.github.set_status(REPO, sha, "lint", "pending")
    checks = {c.name: c for c in await gh.checks(sha)}
    assert checks["build"].state == "running" and checks["build"].job_id == str(job)
    assert checks["lint"].state == "running"
    with pytest.raises(ForgeError) as early:
        await gh.merge(pr.number, "squash", "Three", "msg")
    assert early.value.status == 405
    assert early.value.text == 'Required status check "build" is expected.'
    log = "line\n" * 50 + "E boom"
    remote.github.set_check(REPO, sha, "build", "completed", "failure", log=log)
    failed = {c.name: c for c in await gh.checks(sha)}["build"]
    assert failed.state == "failed"
    assert (await gh.job_log(failed, tail_bytes=6)) == "E boom"
    with pytest.raises(ForgeError, match="not mergeable"):
        await gh.merge(pr.number, "squash", "Three", "msg")
    remote.github.set_check(REPO, sha, "build", "completed", "success")
    remote.github.set_status(REPO, sha, "lint", "success")
    done = await gh.merge(pr.number, "squash", "Three (#1)", "Co-authored-by: A <a@x>")
    assert done.merged and done.sha
    assert (await gh.get_pr(pr.number)).state == "merged"
    call = remote.github.pulls[(REPO, pr.number)].merge_call
    assert call["merge_method"] == "squash" and call["sha"] == sha
    assert "Co-authored-by: A <a@x>" in call["commit_message"]


async def test_unprotected_branch_requires_nothing(
    remote: Remote, session: aiohttp.ClientSession
) -> None:
    assert await forge(remote, session).required_checks("main") == []
    with pytest.raises(ForgeError) as missing:
        await GitHubForge(session, remote.github.url, TOKEN, "team/nope").default_branch()
    assert missing.value.status == 404


async def test_user_id_of_a_login(remote: Remote, session: aiohttp.ClientSession) -> None:
    remote.github.users["Dan-GH"] = 583231
    gh = forge(remote, session)
    assert await gh.user_id("dan-gh") == 583231
    assert await gh.user_id("nobody") is None

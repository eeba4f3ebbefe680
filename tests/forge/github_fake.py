"""A local GitHub REST API, strict as GitHub is where the bridge depends on it.

Every request needs ``Authorization: token …`` (or ``Bearer``) with the one valid token (401
"Bad credentials" otherwise) and a User-Agent; every answer carries ``X-OAuth-Scopes``. Writes
need the ``repo`` scope (403 with GitHub's words otherwise). Pull requests: title, head and
base required; head must be a branch of the git remote (read from the real bare repository of
:class:`tests.forge.git_http.GitHttpServer`); a second open PR for one head is 422 "A pull
request already exists for …". Merges: 405 "Required status check … is expected." while a
required check has not passed, "Pull Request is not mergeable" when one failed or the PR is not
open, 409 when ``sha`` is not the head. Check runs and commit statuses per commit, branch
protection's required checks on ``GET /repos/…/branches/{branch}``, job logs behind a 302.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import web

Sha = Callable[[str, str], "str | None"]


@dataclass
class FakePull:
    number: int
    repo: str
    head: str
    base: str
    title: str
    body: str
    state: str = "open"
    merged: bool = False
    merge_commit_sha: str = ""
    merge_call: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeRepo:
    name: str
    default_branch: str = "main"
    # branch -> the check names its protection requires.
    protected: dict[str, list[str]] = field(default_factory=dict)


class FakeGitHub:
    def __init__(self, token: str, branch_sha: Sha, scopes: str = "repo, workflow") -> None:
        self.token = token
        self.scopes = scopes
        self.branch_sha = branch_sha
        self.repos: dict[str, FakeRepo] = {}
        self.pulls: dict[tuple[str, int], FakePull] = {}
        # (repo, sha) -> check runs / commit statuses, as GitHub returns them.
        self.check_runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.statuses: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.logs: dict[int, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.users: dict[str, int] = {}  # login -> the account's id (GET /users/{login})
        self.url = ""
        self.blob_url = ""
        self._ids = itertools.count(1000)
        self._numbers = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.changed = anyio.Event()

    # ----- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        r = app.router
        r.add_get("/user", self._user)
        r.add_get("/users/{login}", self._user_of)
        r.add_get("/repos/{owner}/{name}", self._repo)
        r.add_get("/repos/{owner}/{name}/branches/{branch:.+}", self._branch)
        r.add_get("/repos/{owner}/{name}/pulls", self._list_pulls)
        r.add_post("/repos/{owner}/{name}/pulls", self._create_pull)
        r.add_get("/repos/{owner}/{name}/pulls/{number}", self._get_pull)
        r.add_patch("/repos/{owner}/{name}/pulls/{number}", self._update_pull)
        r.add_put("/repos/{owner}/{name}/pulls/{number}/merge", self._merge)
        r.add_get("/repos/{owner}/{name}/commits/{ref}/check-runs", self._check_runs)
        r.add_get("/repos/{owner}/{name}/commits/{ref}/status", self._status)
        r.add_get("/repos/{owner}/{name}/actions/jobs/{job}/logs", self._job_logs)
        r.add_get("/_blobs/logs/{job}", self._log_blob)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        # Logs are downloaded from another origin (GitHub's blob storage), which refuses a
        # request that still carries the API token.
        blobs = web.TCPSite(self._runner, "127.0.0.1", 0)
        await blobs.start()
        self.blob_url = f"http://127.0.0.1:{self._runner.addresses[1][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ----- test controls ----------------------------------------------------------------------

    def add_repo(self, name: str, default_branch: str = "main") -> FakeRepo:
        self.repos[name] = FakeRepo(name, default_branch)
        return self.repos[name]

    def set_check(
        self,
        repo: str,
        sha: str,
        name: str,
        status: str,
        conclusion: str | None = None,
        log: str = "",
    ) -> int:
        """A check run (GitHub Actions job) on ``sha``: replaced when ``name`` is there."""
        runs = self.check_runs.setdefault((repo, sha), [])
        old = next((run for run in runs if run["name"] == name), None)
        job = old["id"] if old else next(self._ids)
        run = {
            "id": job,
            "name": name,
            "head_sha": sha,
            "status": status,
            "conclusion": conclusion,
            "html_url": f"{self.url}/{repo}/actions/runs/1/job/{job}",
            "details_url": f"{self.url}/{repo}/actions/runs/1/job/{job}",
            "app": {"slug": "github-actions"},
        }
        if old:
            runs[runs.index(old)] = run
        else:
            runs.append(run)
        if log:
            self.logs[job] = log
        self._notify()
        return job

    def set_status(self, repo: str, sha: str, context: str, state: str) -> None:
        statuses = self.statuses.setdefault((repo, sha), [])
        statuses[:] = [s for s in statuses if s["context"] != context]
        statuses.append(
            {"context": context, "state": state, "target_url": f"{self.url}/ci/{context}"}
        )
        self._notify()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    # ----- the API ----------------------------------------------------------------------------

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if request.path.startswith("/_blobs/"):
            return await handler(request)  # a signed download URL: no token, as GitHub's
        auth = request.headers.get("Authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() not in ("token", "bearer") or token != self.token:
            return _error(401, "Bad credentials")
        if not request.headers.get("User-Agent"):
            return _error(
                403,
                "Request forbidden by administrative rules. Please make sure "
                "your request has a User-Agent header",
            )
        if request.method != "GET" and "repo" not in self._scope_set():
            return _error(403, "Resource not accessible by personal access token")
        try:
            response = await handler(request)
        except _Refused as refused:
            response = _error(refused.status, refused.message)
        response.headers["X-OAuth-Scopes"] = self.scopes
        return response

    def _scope_set(self) -> set[str]:
        return {s.strip() for s in self.scopes.split(",") if s.strip()}

    def _repo_of(self, request: web.Request) -> FakeRepo:
        name = f"{request.match_info['owner']}/{request.match_info['name']}"
        if name not in self.repos:
            raise _raise(404, "Not Found")
        return self.repos[name]

    def _pull_of(self, request: web.Request) -> FakePull:
        repo = self._repo_of(request)
        try:
            pull = self.pulls[(repo.name, int(request.match_info["number"]))]
        except (KeyError, ValueError):
            raise _raise(404, "Not Found") from None
        return pull

    async def _user(self, request: web.Request) -> web.Response:
        return web.json_response({"login": "agy-bot", "id": 1})

    async def _user_of(self, request: web.Request) -> web.Response:
        """GET /users/{login}: the account, or 404 as GitHub answers an unknown login."""
        login = request.match_info["login"]
        for name, number in self.users.items():
            if name.lower() == login.lower():
                return web.json_response({"login": name, "id": number, "type": "User"})
        raise _raise(404, "Not Found")

    async def _repo(self, request: web.Request) -> web.Response:
        repo = self._repo_of(request)
        return web.json_response(
            {"full_name": repo.name, "default_branch": repo.default_branch, "private": True}
        )

    async def _branch(self, request: web.Request) -> web.Response:
        repo = self._repo_of(request)
        branch = request.match_info["branch"]
        sha = self.branch_sha(repo.name, branch)
        if sha is None:
            return _error(404, "Branch not found")
        required = repo.protected.get(branch)
        body: dict[str, Any] = {
            "name": branch,
            "commit": {"sha": sha},
            "protected": required is not None,
        }
        if required is not None:
            body["protection"] = {
                "enabled": True,
                "required_status_checks": {
                    "enforcement_level": "everyone",
                    "contexts": list(required),
                    "checks": [{"context": name, "app_id": None} for name in required],
                },
            }
        return web.json_response(body)

    def _pull_json(self, pull: FakePull) -> dict[str, Any]:
        sha = self.branch_sha(pull.repo, pull.head) or ""
        owner = pull.repo.split("/")[0]
        return {
            "number": pull.number,
            "html_url": f"{self.url}/{pull.repo}/pull/{pull.number}",
            "state": "closed" if pull.merged or pull.state == "closed" else "open",
            "merged": pull.merged,
            "title": pull.title,
            "body": pull.body,
            "head": {"ref": pull.head, "sha": sha, "label": f"{owner}:{pull.head}"},
            "base": {"ref": pull.base},
            "merge_commit_sha": pull.merge_commit_sha or None,
        }

    async def _list_pulls(self, request: web.Request) -> web.Response:
        repo = self._repo_of(request)
        state = request.query.get("state", "open")
        head = request.query.get("head", "")
        found = []
        for pull in self.pulls.values():
            if pull.repo != repo.name:
                continue
            data = self._pull_json(pull)
            if state != "all" and data["state"] != state:
                continue
            if head and head != data["head"]["label"]:
                continue
            found.append(data)
        return web.json_response(found)

    async def _json(self, request: web.Request) -> dict[str, Any]:
        try:
            data = json.loads(await request.read() or b"null")
        except ValueError:
            raise _raise(400, "Problems parsing JSON") from None
        if not isinstance(data, dict):
            raise _raise(400, "Problems parsing JSON")
        return data

    async def _create_pull(self, request: web.Request) -> web.Response:
        repo = self._repo_of(request)
        data = await self._json(request)
        missing = [name for name in ("head", "base") if not data.get(name)]
        if missing or not (data.get("title") or data.get("issue")):
            fields = missing or ["title"]
            return _invalid(
                [{"resource": "PullRequest", "field": f, "code": "missing_field"} for f in fields]
            )
        head = str(data["head"]).split(":")[-1]
        base = str(data["base"])
        if self.branch_sha(repo.name, base) is None:
            return _invalid([{"resource": "PullRequest", "field": "base", "code": "invalid"}])
        head_sha = self.branch_sha(repo.name, head)
        if head_sha is None:
            return _invalid([{"resource": "PullRequest", "field": "head", "code": "invalid"}])
        owner = repo.name.split("/")[0]
        for pull in self.pulls.values():
            if pull.repo == repo.name and pull.head == head and pull.state == "open":
                return _invalid(
                    [
                        {
                            "resource": "PullRequest",
                            "code": "custom",
                            "message": f"A pull request already exists for {owner}:{head}.",
                        }
                    ]
                )
        if head_sha == self.branch_sha(repo.name, base):
            return _invalid(
                [
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": f"No commits between {base} and {head}",
                    }
                ]
            )
        number = next(self._numbers)
        pull = FakePull(
            number, repo.name, head, base, str(data["title"]), str(data.get("body") or "")
        )
        self.pulls[(repo.name, number)] = pull
        self._notify()
        return web.json_response(self._pull_json(pull), status=201)

    async def _get_pull(self, request: web.Request) -> web.Response:
        return web.json_response(self._pull_json(self._pull_of(request)))

    async def _update_pull(self, request: web.Request) -> web.Response:
        pull = self._pull_of(request)
        data = await self._json(request)
        if "title" in data:
            if not data["title"]:
                return _invalid(
                    [{"resource": "PullRequest", "field": "title", "code": "missing_field"}]
                )
            pull.title = str(data["title"])
        if "body" in data:
            pull.body = str(data["body"] or "")
        self._notify()
        return web.json_response(self._pull_json(pull))

    def _checks_of(self, repo: str, sha: str) -> dict[str, str]:
        """name -> "passed" | "failed" | "pending", check runs and statuses together."""
        states: dict[str, str] = {}
        for run in self.check_runs.get((repo, sha), []):
            if run["status"] != "completed":
                states[run["name"]] = "pending"
            elif run["conclusion"] in ("success", "neutral", "skipped"):
                states[run["name"]] = "passed"
            else:
                states[run["name"]] = "failed"
        for status in self.statuses.get((repo, sha), []):
            states[status["context"]] = {"success": "passed", "pending": "pending"}.get(
                status["state"], "failed"
            )
        return states

    async def _merge(self, request: web.Request) -> web.Response:
        pull = self._pull_of(request)
        data = await self._json(request)
        method = data.get("merge_method", "merge")
        if method not in ("merge", "squash", "rebase"):
            return _invalid(
                [{"resource": "PullRequest", "field": "merge_method", "code": "invalid"}]
            )
        if pull.merged or pull.state != "open":
            return _error(405, "Pull Request is not mergeable")
        sha = self.branch_sha(pull.repo, pull.head) or ""
        if data.get("sha") and data["sha"] != sha:
            return _error(409, "Head branch was modified. Review and try the merge again.")
        states = self._checks_of(pull.repo, sha)
        for name in self.repos[pull.repo].protected.get(pull.base, []):
            if states.get(name) == "failed":
                return _error(405, "Pull Request is not mergeable")
            if states.get(name) != "passed":
                return _error(405, f'Required status check "{name}" is expected.')
        pull.merged = True
        pull.state = "closed"
        pull.merge_commit_sha = f"{next(self._ids):040x}"
        pull.merge_call = dict(data)
        self._notify()
        return web.json_response(
            {
                "sha": pull.merge_commit_sha,
                "merged": True,
                "message": "Pull Request successfully merged",
            }
        )

    async def _check_runs(self, request: web.Request) -> web.Response:
        repo = self._repo_of(request)
        runs = self.check_runs.get((repo.name, request.match_info["ref"]), [])
        return web.json_response({"total_count": len(runs), "check_runs": runs})

    async def _status(self, request: web.Request) -> web.Response:
        repo = self._repo_of(request)
        sha = request.match_info["ref"]
        statuses = self.statuses.get((repo.name, sha), [])
        states = {s["state"] for s in statuses}
        combined = (
            "failure"
            if states & {"failure", "error"}
            else "pending"
            if "pending" in states or not statuses
            else "success"
        )
        return web.json_response(
            {"state": combined, "sha": sha, "statuses": statuses, "total_count": len(statuses)}
        )

    async def _job_logs(self, request: web.Request) -> web.Response:
        self._repo_of(request)
        job = int(request.match_info["job"])
        if job not in self.logs:
            return _error(404, "Not Found")
        raise web.HTTPFound(f"{self.blob_url}/_blobs/logs/{job}?sig=abc")

    async def _log_blob(self, request: web.Request) -> web.Response:
        if "Authorization" in request.headers:
            return web.Response(status=400, text="Only one auth mechanism allowed")
        return web.Response(
            text=self.logs[int(request.match_info["job"])], content_type="text/plain"
        )


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"message": message, "documentation_url": "https://docs.github.com/rest"}, status=status
    )


def _invalid(errors: list[dict[str, Any]]) -> web.Response:
    return web.json_response(
        {
            "message": "Validation Failed",
            "errors": errors,
            "documentation_url": "https://docs.github.com/rest",
        },
        status=422,
    )


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _raise(status: int, message: str) -> _Refused:
    return _Refused(status, message)

"""A local fake of GitLab's REST API v4, as strict as GitLab where the bridge depends on it.

What it holds to, each as GitLab answers it (docs.gitlab.com/api and GitLab's own trackers):

- Every request needs a token, in ``PRIVATE-TOKEN`` or ``Authorization: Bearer``; none or an
  unknown one is ``401 {"message":"401 Unauthorized"}``. A token whose scopes do not cover
  the call is ``403 {"error":"insufficient_scope",...}`` (``read_api`` reads only).
- A project is named by its numeric id or its URL-encoded path (``group%2Fproject``): an
  unencoded slash is another route, so ``404``.
- A second open merge request for a source branch is ``409`` with
  ``{"message":["Another open merge request already exists for this source branch: !N"]}``;
  a missing required field ``400 {"error":"title is missing"}``.
- Merging (``PUT …/merge``) a request that is not open, a draft, or whose pipeline has not
  succeeded where the project requires it is ``405 {"message":"405 Method Not Allowed"}``; one
  with conflicts ``406 {"message":"Branch cannot be merged"}``; a ``sha`` that is not the
  source's head ``409``.
- Pipelines with jobs and their traces (plain text), commit statuses, protected branches,
  ``GET /personal_access_tokens/self`` with the token's scopes.

Webhooks: :meth:`FakeGitLab.add_hook` registers a URL and its secret token; pipeline changes,
merges and notes are delivered there with ``X-Gitlab-Event``, ``X-Gitlab-Token`` and an
``Idempotency-Key`` that stays the same when a delivery is retried (:meth:`redeliver`).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import aiohttp
import anyio
from aiohttp import web

TOKEN = "glpat-fake-token-0123456789"
READ_TOKEN = "glpat-fake-read-only-0123"
ALL_SCOPES = ("api", "read_api", "write_repository", "read_repository")

# Pipeline and job states as GitLab names them.
PIPELINE_STATES = frozenset(
    {
        "created",
        "waiting_for_resource",
        "preparing",
        "pending",
        "running",
        "success",
        "failed",
        "canceled",
        "skipped",
        "manual",
        "scheduled",
    }
)
STATUS_STATES = frozenset({"pending", "running", "success", "failed", "canceled", "skipped"})
UNFINISHED = frozenset(
    {"created", "waiting_for_resource", "preparing", "pending", "running", "scheduled"}
)

# (source, target, squash, message) -> the commit the merge made.
Merger = Callable[[str, str, bool, str], Awaitable[str]]
# A branch name -> its head commit, or None when it does not exist.
BranchReader = Callable[[str], Awaitable[str | None]]


class GitLabError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {body}")
        self.status = status
        self.body = body


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class Token:
    value: str
    scopes: tuple[str, ...]
    user: str = "bridge-bot"
    id: int = 1
    name: str = "agy-bridge"


@dataclass
class Job:
    id: int
    name: str
    stage: str
    status: str
    trace: str = ""
    allow_failure: bool = False


@dataclass
class Pipeline:
    id: int
    iid: int
    sha: str
    ref: str
    status: str
    jobs: list[Job] = field(default_factory=list)
    source: str = "push"


@dataclass
class MergeRequest:
    id: int
    iid: int
    title: str
    description: str
    source_branch: str
    target_branch: str
    author: str
    state: str = "opened"
    sha: str = ""
    merge_commit_sha: str | None = None
    squash_commit_sha: str | None = None
    squash: bool = False
    merged_message: str = ""
    has_conflicts: bool = False
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)


@dataclass
class Hook:
    url: str
    token: str


@dataclass
class Delivery:
    url: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class Project:
    id: int
    path: str
    default_branch: str = "main"
    only_allow_merge_if_pipeline_succeeds: bool = True
    branches: dict[str, str] = field(default_factory=dict)
    protected: list[str] = field(default_factory=list)
    merge_requests: dict[int, MergeRequest] = field(default_factory=dict)
    pipelines: dict[int, Pipeline] = field(default_factory=dict)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)
    # Where branches are read from (a real repository): overrides ``branches`` when set.
    read_branch: BranchReader | None = None
    merger: Merger | None = None


class FakeGitLab:
    def __init__(self) -> None:
        self.tokens: dict[str, Token] = {
            TOKEN: Token(TOKEN, ("api", "read_api", "write_repository")),
            READ_TOKEN: Token(READ_TOKEN, ("read_api",), id=2, name="reader"),
        }
        self.projects: dict[int, Project] = {}
        self.requests: list[tuple[str, str]] = []  # (method, raw path) of every call
        self.users: dict[str, int] = {}  # username -> id (GET /users?username=)
        # Set: reading pipelines waits for it (a slow forge's checks endpoint).
        self.checks_gate: anyio.Event | None = None
        self.deliveries: list[Delivery] = []
        self.url = ""
        self._ids = itertools.count(100)
        self._runner: web.AppRunner | None = None

    # ----- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/v4/{tail:.*}", self._api)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/v4"

    # ----- test controls ----------------------------------------------------------------

    def add_project(self, path: str, **kwargs: Any) -> Project:
        project = Project(id=next(self._ids), path=path, **kwargs)
        self.projects[project.id] = project
        return project

    def project(self, path: str) -> Project:
        for project in self.projects.values():
            if project.path == path:
                return project
        raise KeyError(path)

    def add_hook(self, project: Project, url: str, token: str) -> None:
        project.hooks.append(Hook(url, token))

    def add_pipeline(
        self,
        project: Project,
        sha: str,
        ref: str,
        jobs: list[tuple[str, str]] | None = None,
        status: str = "running",
        source: str = "push",
    ) -> Pipeline:
        pipeline = Pipeline(
            id=next(self._ids),
            iid=len(project.pipelines) + 1,
            sha=sha,
            ref=ref,
            status=status,
            source=source,
        )
        for name, job_status in jobs or []:
            pipeline.jobs.append(Job(next(self._ids), name, "test", job_status))
        project.pipelines[pipeline.id] = pipeline
        return pipeline

    async def set_pipeline(
        self, project: Project, pipeline: Pipeline, status: str, jobs: dict[str, str] | None = None
    ) -> None:
        """Move a pipeline (and some of its jobs) to new states; hooks hear of it."""
        assert status in PIPELINE_STATES, status
        pipeline.status = status
        for job in pipeline.jobs:
            if jobs and job.name in jobs:
                job.status = jobs[job.name]
        await self._deliver(project, "Pipeline Hook", self._pipeline_hook(project, pipeline))

    async def add_note(
        self, project: Project, iid: int, author: str, body: str, *, system: bool = False
    ) -> str:
        """A comment on a merge request, delivered to the hooks; the delivery's key."""
        mr = project.merge_requests[iid]
        note_id = next(self._ids)
        payload = {
            "object_kind": "note",
            "event_type": "note",
            "user": {"id": 7, "name": author.title(), "username": author, "email": "[REDACTED]"},
            "project_id": project.id,
            "project": self._project_json(project),
            "object_attributes": {
                "id": note_id,
                "note": body,
                "noteable_type": "MergeRequest",
                "author_id": 7,
                "system": system,
                "url": f"{self._web(project)}/-/merge_requests/{iid}#note_{note_id}",
                "created_at": _now(),
            },
            "merge_request": self._mr_json(project, mr),
        }
        return await self._deliver(project, "Note Hook", payload)

    async def redeliver(self, delivery: Delivery) -> int:
        """Send a delivery again with the same headers (GitLab's retry keeps the key)."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(delivery.url, data=delivery.body, headers=delivery.headers) as resp,
        ):
            await resp.read()
            again = Delivery(delivery.url, delivery.headers, delivery.body, resp.status)
            self.deliveries.append(again)
            return resp.status

    # ----- the API ----------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        raw = request.raw_path.split("?", 1)[0]
        self.requests.append((request.method, raw))
        try:
            token = self._authenticate(request)
            segments = [unquote(part) for part in raw[len("/api/v4/") :].split("/")]
            if self.checks_gate is not None and "pipelines" in segments:
                await self.checks_gate.wait()
            body = await self._body(request)
            result = await self._route(request.method, segments, request.query, body, token)
        except GitLabError as exc:
            return web.json_response(exc.body, status=exc.status)
        if isinstance(result, web.Response):
            return result
        status = 201 if request.method == "POST" else 200
        if isinstance(result, list):
            return self._page(request, result)
        return web.json_response(result, status=status)

    def _authenticate(self, request: web.Request) -> Token:
        value = request.headers.get("PRIVATE-TOKEN")
        if value is None:
            auth = request.headers.get("Authorization", "")
            if auth.startswith("Bearer "):
                value = auth[len("Bearer ") :]
        token = self.tokens.get(value or "")
        if token is None:
            raise GitLabError(401, {"message": "401 Unauthorized"})
        if request.method != "GET" and "api" not in token.scopes:
            raise GitLabError(
                403,
                {
                    "error": "insufficient_scope",
                    "error_description": "The request requires higher privileges than "
                    "provided by the access token.",
                    "scope": "api",
                },
            )
        return token

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        if request.method in ("GET", "DELETE") or not request.can_read_body:
            return {}
        if request.content_type == "application/json":
            data = await request.json()
            if not isinstance(data, dict):
                raise GitLabError(400, {"error": "400 Bad request"})
            return data
        return dict(await request.post())  # form-encoded, as GitLab also takes

    @staticmethod
    def _page(request: web.Request, items: list[Any]) -> web.Response:
        try:
            page = max(1, int(request.query.get("page", "1")))
            per_page = min(100, max(1, int(request.query.get("per_page", "20"))))
        except ValueError:
            raise GitLabError(400, {"error": "page is invalid"}) from None
        start = (page - 1) * per_page
        chunk = items[start : start + per_page]
        more = start + per_page < len(items)
        headers = {
            "X-Page": str(page),
            "X-Per-Page": str(per_page),
            "X-Total": str(len(items)),
            "X-Next-Page": str(page + 1) if more else "",
        }
        return web.json_response(chunk, headers=headers)

    async def _route(
        self,
        method: str,
        seg: list[str],
        query: Any,
        body: dict[str, Any],
        token: Token,
    ) -> Any:
        match (method, seg):
            case ("GET", ["user"]):
                return {"id": token.id, "username": token.user, "name": token.user}
            case ("GET", ["users"]):
                # GET /users?username=: a list of at most one user, [] when none; the
                # bridge never lists every user.
                name = query.get("username")
                if not name:
                    raise GitLabError(400, {"error": "username is missing"})
                return [
                    {"id": number, "username": login, "name": login, "state": "active"}
                    for login, number in self.users.items()
                    if login.lower() == name.lower()
                ]
            case ("GET", ["personal_access_tokens", "self"]):
                return {
                    "id": token.id,
                    "name": token.name,
                    "revoked": False,
                    "created_at": "2026-01-01T00:00:00.000Z",
                    "scopes": list(token.scopes),
                    "user_id": token.id,
                    "last_used_at": _now(),
                    "active": True,
                    "expires_at": "2027-01-01",
                }
            case (_, ["projects", ref, *rest]):
                return await self._project_route(method, self._find(ref), rest, query, body, token)
        raise GitLabError(404, {"error": "404 Not Found"})

    def _find(self, ref: str) -> Project:
        for project in self.projects.values():
            if ref == str(project.id) or ref == project.path:
                return project
        raise GitLabError(404, {"message": "404 Project Not Found"})

    async def _project_route(
        self,
        method: str,
        project: Project,
        rest: list[str],
        query: Any,
        body: dict[str, Any],
        token: Token,
    ) -> Any:
        match (method, rest):
            case ("GET", []):
                return self._project_json(project)
            case ("GET", ["repository", "branches", name]):
                sha = await self._branch(project, name)
                if sha is None:
                    raise GitLabError(404, {"message": "404 Branch Not Found"})
                return {
                    "name": name,
                    "commit": {"id": sha},
                    "protected": name in project.protected,
                    "default": name == project.default_branch,
                }
            case ("GET", ["protected_branches"]):
                return [self._protected_json(project, name) for name in project.protected]
            case ("GET", ["protected_branches", name]):
                if name not in project.protected:
                    raise GitLabError(404, {"message": "404 Not found"})
                return self._protected_json(project, name)
            case ("GET", ["merge_requests"]):
                for mr in project.merge_requests.values():
                    await self._refresh(project, mr)
                return [
                    self._mr_json(project, mr)
                    for mr in sorted(project.merge_requests.values(), key=lambda m: -m.iid)
                    if self._matches(mr, query)
                ]
            case ("POST", ["merge_requests"]):
                return await self._open_mr(project, body, token)
            case (_, ["merge_requests", iid, *more]):
                mr = project.merge_requests.get(int(iid)) if iid.isdigit() else None
                if mr is None:
                    raise GitLabError(404, {"message": "404 Not found"})
                await self._refresh(project, mr)
                return await self._mr_route(method, project, mr, more, body)
            case ("GET", ["pipelines"]):
                return [
                    self._pipeline_json(project, p)
                    for p in sorted(project.pipelines.values(), key=lambda p: -p.id)
                    if query.get("sha", p.sha) == p.sha and query.get("ref", p.ref) == p.ref
                ]
            case ("GET", ["pipelines", pid]):
                return self._pipeline_json(project, self._pipeline(project, pid))
            case ("GET", ["pipelines", pid, "jobs"]):
                pipeline = self._pipeline(project, pid)
                return [self._job_json(project, pipeline, job) for job in pipeline.jobs]
            case ("GET", ["jobs", jid, "trace"]):
                for pipeline in project.pipelines.values():
                    for job in pipeline.jobs:
                        if str(job.id) == jid:
                            return web.Response(text=job.trace, content_type="text/plain")
                raise GitLabError(404, {"message": "404 Not found"})
            case ("GET", ["repository", "commits", sha, "merge_requests"]):
                for mr in project.merge_requests.values():
                    await self._refresh(project, mr)
                return [
                    self._mr_json(project, mr)
                    for mr in project.merge_requests.values()
                    if mr.sha == sha
                ]
            case ("GET", ["repository", "commits", sha, "statuses"]):
                return [s for s in project.statuses if s["sha"] == sha]
            case ("POST", ["statuses", sha]):
                return self._add_status(project, sha, body)
        raise GitLabError(404, {"error": "404 Not Found"})

    async def _mr_route(
        self,
        method: str,
        project: Project,
        mr: MergeRequest,
        more: list[str],
        body: dict[str, Any],
    ) -> Any:
        match (method, more):
            case ("GET", []):
                return self._mr_json(project, mr, single=True)
            case ("PUT", []):
                for key in ("title", "description"):
                    if key in body:
                        setattr(mr, key, str(body[key]))
                if body.get("state_event") == "close" and mr.state == "opened":
                    mr.state = "closed"
                mr.updated_at = _now()
                return self._mr_json(project, mr, single=True)
            case ("PUT", ["merge"]):
                return await self._merge(project, mr, body)
            case ("GET", ["pipelines"]):
                return [
                    self._pipeline_json(project, p)
                    for p in sorted(project.pipelines.values(), key=lambda p: -p.id)
                    if p.ref in self._refs(mr)
                ]
        raise GitLabError(404, {"error": "404 Not Found"})

    # ----- behaviour --------------------------------------------------------------------

    async def _branch(self, project: Project, name: str) -> str | None:
        if project.read_branch is not None:
            return await project.read_branch(name)
        return project.branches.get(name)

    async def _refresh(self, project: Project, mr: MergeRequest) -> None:
        """An open merge request follows its source branch (GitLab updates it on push)."""
        if mr.state == "opened":
            mr.sha = await self._branch(project, mr.source_branch) or mr.sha

    @staticmethod
    def _matches(mr: MergeRequest, query: Any) -> bool:
        state = query.get("state", "all")
        if state != "all" and mr.state != state:
            return False
        for key in ("source_branch", "target_branch"):
            if key in query and getattr(mr, key) != query[key]:
                return False
        return True

    async def _open_mr(self, project: Project, body: dict[str, Any], token: Token) -> Any:
        for key in ("source_branch", "target_branch", "title"):
            if not body.get(key):
                raise GitLabError(400, {"error": f"{key} is missing"})
        source, target = str(body["source_branch"]), str(body["target_branch"])
        for mr in project.merge_requests.values():
            if mr.state == "opened" and mr.source_branch == source:
                raise GitLabError(
                    409,
                    {
                        "message": [
                            "Another open merge request already exists for this source "
                            f"branch: !{mr.iid}"
                        ]
                    },
                )
        errors = []
        if source == target:
            errors.append("You can't use same project/branch for source and target")
        sha = await self._branch(project, source)
        if sha is None:
            errors.append(f'Source branch "{source}" does not exist')
        if await self._branch(project, target) is None:
            errors.append(f'Target branch "{target}" does not exist')
        if errors:
            raise GitLabError(400, {"message": errors})
        iid = max(project.merge_requests, default=0) + 1
        mr = MergeRequest(
            id=next(self._ids),
            iid=iid,
            title=str(body["title"]),
            description=str(body.get("description") or ""),
            source_branch=source,
            target_branch=target,
            author=token.user,
            sha=sha or "",
            squash=str(body.get("squash", "false")).lower() == "true",
        )
        project.merge_requests[iid] = mr
        return self._mr_json(project, mr, single=True)

    @staticmethod
    def _refs(mr: MergeRequest) -> set[str]:
        """The refs a merge request's pipelines run on: its branch, and GitLab's own refs for
        merge request pipelines (``…/head``) and merged results pipelines (``…/merge``)."""
        return {
            mr.source_branch,
            f"refs/merge-requests/{mr.iid}/head",
            f"refs/merge-requests/{mr.iid}/merge",
        }

    def _head_pipeline(self, project: Project, mr: MergeRequest) -> Pipeline | None:
        refs = self._refs(mr)
        ours = [p for p in project.pipelines.values() if p.ref in refs]
        return max(ours, key=lambda p: p.id) if ours else None

    def _detailed_status(self, project: Project, mr: MergeRequest) -> str:
        if mr.state != "opened":
            return "not_open"
        if mr.title.lower().startswith(("draft:", "[draft]", "(draft)")):
            return "draft_status"
        if mr.has_conflicts:
            return "conflict"
        if project.only_allow_merge_if_pipeline_succeeds:
            pipeline = self._head_pipeline(project, mr)
            if pipeline is None:
                return "ci_must_pass"
            if pipeline.status in UNFINISHED:
                return "ci_still_running"
            if pipeline.status != "success":
                return "ci_must_pass"
        return "mergeable"

    async def _merge(self, project: Project, mr: MergeRequest, body: dict[str, Any]) -> Any:
        status = self._detailed_status(project, mr)
        if status == "conflict":
            raise GitLabError(406, {"message": "Branch cannot be merged"})
        if status != "mergeable":
            raise GitLabError(405, {"message": "405 Method Not Allowed"})
        if body.get("sha") and body["sha"] != mr.sha:
            text = f"SHA does not match HEAD of source branch: {mr.sha}"
            raise GitLabError(409, {"message": text})
        squash = str(body.get("squash", mr.squash)).lower() == "true"
        key = "squash_commit_message" if squash else "merge_commit_message"
        default = f"Merge branch '{mr.source_branch}' into '{mr.target_branch}'"
        message = str(body.get(key) or default)
        if project.merger is not None:
            sha = await project.merger(mr.source_branch, mr.target_branch, squash, message)
        else:
            sha = uuid.uuid4().hex + "00000000"
        mr.state, mr.squash, mr.merged_message, mr.updated_at = "merged", squash, message, _now()
        mr.merge_commit_sha = None if squash else sha
        mr.squash_commit_sha = sha if squash else None
        project.branches[mr.target_branch] = sha
        payload = {
            "object_kind": "merge_request",
            "event_type": "merge_request",
            "user": {"id": 1, "username": "bridge-bot", "name": "bridge-bot"},
            "project": self._project_json(project),
            "object_attributes": {**self._mr_json(project, mr), "action": "merge"},
        }
        await self._deliver(project, "Merge Request Hook", payload)
        return self._mr_json(project, mr, single=True)

    def _add_status(self, project: Project, sha: str, body: dict[str, Any]) -> Any:
        state = body.get("state")
        if not state:
            raise GitLabError(400, {"error": "state is missing"})
        if state not in STATUS_STATES:
            raise GitLabError(400, {"error": "state does not have a valid value"})
        status = {
            "id": next(self._ids),
            "sha": sha,
            "ref": body.get("ref"),
            "status": state,
            "name": body.get("name") or body.get("context") or "default",
            "target_url": body.get("target_url"),
            "description": body.get("description"),
            "allow_failure": False,
            "created_at": _now(),
        }
        project.statuses = [
            s for s in project.statuses if not (s["sha"] == sha and s["name"] == status["name"])
        ]
        project.statuses.append(status)
        return status

    def _pipeline(self, project: Project, pid: str) -> Pipeline:
        pipeline = project.pipelines.get(int(pid)) if pid.isdigit() else None
        if pipeline is None:
            raise GitLabError(404, {"message": "404 Not found"})
        return pipeline

    # ----- JSON as GitLab writes it ----------------------------------------------------

    def _web(self, project: Project) -> str:
        return f"{self.url}/{project.path}"

    def _project_json(self, project: Project) -> dict[str, Any]:
        return {
            "id": project.id,
            "name": project.path.rsplit("/", 1)[-1],
            "path_with_namespace": project.path,
            "default_branch": project.default_branch,
            "web_url": self._web(project),
            "http_url_to_repo": f"{self._web(project)}.git",
            "only_allow_merge_if_pipeline_succeeds": project.only_allow_merge_if_pipeline_succeeds,
            "allow_merge_on_skipped_pipeline": False,
            "squash_option": "default_off",
            "merge_method": "merge",
        }

    @staticmethod
    def _protected_json(project: Project, name: str) -> dict[str, Any]:
        level = [{"id": 1, "access_level": 40, "access_level_description": "Maintainers"}]
        return {
            "id": abs(hash((project.id, name))) % 10_000,
            "name": name,
            "push_access_levels": level,
            "merge_access_levels": level,
            "allow_force_push": False,
            "code_owner_approval_required": False,
        }

    def _mr_json(self, project: Project, mr: MergeRequest, single: bool = False) -> dict[str, Any]:
        draft = mr.title.lower().startswith(("draft:", "[draft]", "(draft)"))
        detailed = self._detailed_status(project, mr)
        data: dict[str, Any] = {
            "id": mr.id,
            "iid": mr.iid,
            "project_id": project.id,
            "title": mr.title,
            "description": mr.description,
            "state": mr.state,
            "created_at": mr.created_at,
            "updated_at": mr.updated_at,
            "merged_at": mr.updated_at if mr.state == "merged" else None,
            "target_branch": mr.target_branch,
            "source_branch": mr.source_branch,
            "source_project_id": project.id,
            "target_project_id": project.id,
            "author": {"id": 1, "username": mr.author, "name": mr.author},
            "draft": draft,
            "work_in_progress": draft,
            "merge_when_pipeline_succeeds": False,
            "merge_status": "can_be_merged" if not mr.has_conflicts else "cannot_be_merged",
            "detailed_merge_status": detailed,
            "has_conflicts": mr.has_conflicts,
            "sha": mr.sha,
            "merge_commit_sha": mr.merge_commit_sha,
            "squash_commit_sha": mr.squash_commit_sha,
            "squash": mr.squash,
            "web_url": f"{self._web(project)}/-/merge_requests/{mr.iid}",
            "references": {"short": f"!{mr.iid}", "full": f"{project.path}!{mr.iid}"},
        }
        if single:
            pipeline = self._head_pipeline(project, mr)
            data["head_pipeline"] = (
                self._pipeline_json(project, pipeline) if pipeline is not None else None
            )
        return data

    def _pipeline_json(self, project: Project, p: Pipeline) -> dict[str, Any]:
        return {
            "id": p.id,
            "iid": p.iid,
            "project_id": project.id,
            "sha": p.sha,
            "ref": p.ref,
            "status": p.status,
            "source": p.source,
            "created_at": _now(),
            "updated_at": _now(),
            "web_url": f"{self._web(project)}/-/pipelines/{p.id}",
        }

    def _job_json(self, project: Project, p: Pipeline, job: Job) -> dict[str, Any]:
        return {
            "id": job.id,
            "name": job.name,
            "stage": job.stage,
            "status": job.status,
            "ref": p.ref,
            "allow_failure": job.allow_failure,
            "web_url": f"{self._web(project)}/-/jobs/{job.id}",
            "pipeline": {"id": p.id, "sha": p.sha, "ref": p.ref, "status": p.status},
            "failure_reason": "script_failure" if job.status == "failed" else None,
        }

    def _pipeline_hook(self, project: Project, p: Pipeline) -> dict[str, Any]:
        mr = next((m for m in project.merge_requests.values() if p.ref in self._refs(m)), None)
        return {
            "object_kind": "pipeline",
            "object_attributes": {
                "id": p.id,
                "iid": p.iid,
                "ref": p.ref,
                "tag": False,
                "sha": p.sha,
                "status": p.status,
                "detailed_status": p.status,
                "stages": sorted({j.stage for j in p.jobs}),
                "url": f"{self._web(project)}/-/pipelines/{p.id}",
            },
            "merge_request": self._mr_json(project, mr) if mr is not None else None,
            "user": {"id": 1, "username": "bridge-bot", "name": "bridge-bot"},
            "project": self._project_json(project),
            "builds": [
                {
                    "id": j.id,
                    "stage": j.stage,
                    "name": j.name,
                    "status": j.status,
                    "allow_failure": j.allow_failure,
                }
                for j in p.jobs
            ],
        }

    # ----- webhooks -------------------------------------------------------------------

    async def _deliver(self, project: Project, event: str, payload: dict[str, Any]) -> str:
        key = str(uuid.uuid4())
        body = json.dumps(payload).encode()
        for hook in project.hooks:
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "GitLab/18.6.0",
                "X-Gitlab-Event": event,
                "X-Gitlab-Token": hook.token,
                "X-Gitlab-Instance": self.url,
                "X-Gitlab-Webhook-UUID": str(uuid.uuid4()),
                "X-Gitlab-Event-UUID": key,
                "Idempotency-Key": key,
            }
            async with (
                aiohttp.ClientSession() as session,
                session.post(hook.url, data=body, headers=headers) as resp,
            ):
                await resp.read()
                self.deliveries.append(Delivery(hook.url, headers, body, resp.status))
        return key


@asynccontextmanager
async def serve_fake_gitlab() -> AsyncIterator[FakeGitLab]:
    fake = FakeGitLab()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()

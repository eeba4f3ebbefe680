"""GitLab's REST API v4 as a :class:`bridge.forge.base.Forge`, over the bridge's aiohttp.

Written here rather than taken from python-gitlab: python-gitlab is synchronous (requests), so
every call would need a worker thread of its own and its retries would block that thread; the
dozen endpoints the bridge uses are plain JSON over one ``aiohttp.ClientSession``. GitLab names
things differently from GitHub, and this module is where that is translated:

- a pull request is a merge request, numbered by its ``iid`` within the project;
- the project is addressed by its URL-encoded path (``group%2Fsub%2Fname``);
- checks are the jobs of the commit's latest pipeline (or, when none ran on the commit itself,
  its merge request's head pipeline: a merged results pipeline runs on a merge commit), the
  pipeline itself as one check named ``pipeline`` (what a project's "Pipelines must succeed"
  setting requires), and any external commit statuses beside them;
- a refused merge answers 405 with nothing but "Method Not Allowed": the merge request's
  ``detailed_merge_status`` (``ci_still_running``, ``draft_status``, …) is read and added.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import aiohttp

from bridge.forge.base import (
    Check,
    ForgeError,
    ForgeKind,
    MergeMethod,
    MergeResult,
    PrState,
    PullRequest,
)
from bridge.forge.hook_payloads import gitlab_job_state

log = logging.getLogger(__name__)

# The check standing for the whole pipeline (what "Pipelines must succeed" requires).
PIPELINE_CHECK = "pipeline"
# A job's log is read to its end but only this much is kept (logs reach hundreds of megabytes).
LOG_CHUNK = 64 * 1024
TIMEOUT = aiohttp.ClientTimeout(total=30)
PER_PAGE = 100
MAX_PAGES = 10

_STATES: dict[str, PrState] = {"opened": "open", "merged": "merged", "closed": "closed"}


def _message(data: Any, fallback: str) -> str:
    """GitLab's error text: ``message`` (a string, a list, or a field -> errors map) or
    ``error`` (with ``error_description`` for a token scope)."""
    if not isinstance(data, dict):
        return fallback
    message = data.get("message")
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        return "; ".join(str(m) for m in message)
    if isinstance(message, dict):
        return "; ".join(f"{field} {', '.join(map(str, errs))}" for field, errs in message.items())
    error = data.get("error")
    if isinstance(error, str):
        description = data.get("error_description")
        scope = data.get("scope")
        parts = [
            error,
            *([description] if description else []),
            *([f"scope: {scope}"] if scope else []),
        ]
        return ": ".join(parts)
    return fallback


class GitLabForge:
    """One GitLab project, reached with one token (``PRIVATE-TOKEN``)."""

    kind: ForgeKind = "gitlab"

    def __init__(self, session: aiohttp.ClientSession, api_url: str, token: str, repo: str):
        self._session = session
        self._api = api_url.rstrip("/")
        self._token = token
        self.repo = repo
        self._project = f"/projects/{quote(repo, safe='')}"

    # ----- HTTP ---------------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        data, _ = await self._request(method, path, body=body, params=params)
        return data

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[Any, dict[str, str]]:
        url = self._api + path
        # The token goes in a header only: never in a URL that a log or an error could show.
        headers = {"PRIVATE-TOKEN": self._token, "Accept": "application/json"}
        try:
            async with self._session.request(
                method, url, json=body, params=params, headers=headers, timeout=TIMEOUT
            ) as resp:
                if resp.content_type == "application/json":
                    data: Any = await resp.json()
                else:
                    data = await resp.text()
                if resp.status >= 400:
                    raise ForgeError(resp.status, _message(data, resp.reason or "error"))
                return data, dict(resp.headers)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ForgeError(
                0, f"GitLab at {self._api} did not answer: {type(exc).__name__}"
            ) from exc

    async def _pages(self, path: str, params: dict[str, str]) -> list[Any]:
        items: list[Any] = []
        page = "1"
        for _ in range(MAX_PAGES):
            data, headers = await self._request(
                "GET", path, params={**params, "per_page": str(PER_PAGE), "page": page}
            )
            items.extend(data if isinstance(data, list) else [])
            page = headers.get("X-Next-Page", "")
            if not page:
                break
        return items

    # ----- merge requests -----------------------------------------------------------------

    def _pr(self, data: dict[str, Any]) -> PullRequest:
        return PullRequest(
            number=int(data["iid"]),
            url=str(data.get("web_url") or ""),
            head=str(data["source_branch"]),
            base=str(data["target_branch"]),
            title=str(data.get("title") or ""),
            body=str(data.get("description") or ""),
            state=_STATES.get(str(data.get("state")), "closed"),
            head_sha=str(data.get("sha") or ""),
        )

    async def default_branch(self) -> str:
        project = await self._call("GET", self._project)
        branch = project.get("default_branch")
        if not branch:
            raise ForgeError(
                0, f"GitLab names no default branch for {self.repo} (an empty repository?)"
            )
        return str(branch)

    async def find_open_pr(self, head: str) -> PullRequest | None:
        found = await self._call(
            "GET",
            f"{self._project}/merge_requests",
            params={"source_branch": head, "state": "opened", "per_page": "20"},
        )
        mrs = [self._pr(mr) for mr in found if mr.get("source_branch") == head]
        return mrs[0] if mrs else None

    async def open_pr(self, head: str, base: str, title: str, body: str) -> PullRequest:
        data = await self._call(
            "POST",
            f"{self._project}/merge_requests",
            body={
                "source_branch": head,
                "target_branch": base,
                "title": title,
                "description": body,
                "remove_source_branch": False,
            },
        )
        return self._pr(data)

    async def update_pr(self, number: int, title: str, body: str) -> PullRequest:
        data = await self._call(
            "PUT",
            f"{self._project}/merge_requests/{number}",
            body={"title": title, "description": body},
        )
        return self._pr(data)

    async def get_pr(self, number: int) -> PullRequest:
        return self._pr(await self._call("GET", f"{self._project}/merge_requests/{number}"))

    async def merge(
        self, number: int, method: MergeMethod, title: str, message: str
    ) -> MergeResult:
        path = f"{self._project}/merge_requests/{number}"
        # The whole commit message: the title, then the body with its Co-authored-by trailers,
        # which GitLab keeps as written (its own default message would drop them).
        text = f"{title}\n\n{message}".strip() if message else title
        body: dict[str, Any]
        if method == "squash":
            body = {"squash": True, "squash_commit_message": text}
        else:
            # "rebase" has no per-request switch on GitLab: a project set to fast-forward
            # merges rebases; the request itself is a merge either way.
            body = {"squash": False, "merge_commit_message": text}
        current = await self.get_pr(number)
        if current.head_sha:
            body["sha"] = current.head_sha  # refuse to merge a head that moved since we looked
        try:
            data = await self._call("PUT", f"{path}/merge", body=body)
        except ForgeError as exc:
            if exc.status in (405, 406, 422):
                raise ForgeError(exc.status, await self._why_not(path, exc.text)) from exc
            raise
        sha = data.get("squash_commit_sha") or data.get("merge_commit_sha") or data.get("sha") or ""
        merged = data.get("state") == "merged"
        return MergeResult(
            merged=merged, sha=str(sha), message="" if merged else str(data.get("state"))
        )

    async def _why_not(self, path: str, text: str) -> str:
        try:
            mr = await self._call("GET", path)
        except ForgeError:
            return text
        detail = mr.get("detailed_merge_status") or mr.get("merge_status")
        return f"{text} (detailed_merge_status: {detail})" if detail else text

    # ----- checks -------------------------------------------------------------------------

    async def checks(self, sha: str) -> list[Check]:
        pipelines = await self._call(
            "GET",
            f"{self._project}/pipelines",
            params={"sha": sha, "order_by": "id", "sort": "desc", "per_page": "1"},
        )
        found: list[Check] = []
        latest = pipelines[0] if pipelines else await self._merge_request_pipeline(sha)
        if latest is not None:
            found.append(
                Check(
                    name=PIPELINE_CHECK,
                    state=gitlab_job_state(str(latest["status"])),
                    url=str(latest.get("web_url") or ""),
                )
            )
            jobs = await self._pages(f"{self._project}/pipelines/{latest['id']}/jobs", {})
            for job in jobs:
                found.append(
                    Check(
                        name=str(job["name"]),
                        state=gitlab_job_state(str(job["status"]), bool(job.get("allow_failure"))),
                        url=str(job.get("web_url") or ""),
                        job_id=str(job["id"]),
                    )
                )
        # Jobs are commit statuses too on GitLab: keep only the statuses no job already gave.
        names = {check.name for check in found}
        statuses = await self._pages(f"{self._project}/repository/commits/{sha}/statuses", {})
        for status in statuses:
            name = str(status.get("name") or "default")
            if name in names:
                continue
            names.add(name)
            found.append(
                Check(
                    name=name,
                    state=gitlab_job_state(
                        str(status["status"]), bool(status.get("allow_failure"))
                    ),
                    url=str(status.get("target_url") or ""),
                )
            )
        return found

    async def _merge_request_pipeline(self, sha: str) -> dict[str, Any] | None:
        """The pipeline of the open merge request whose head is ``sha``, when none ran on
        ``sha`` itself: a merged results pipeline runs on a merge commit GitLab makes."""
        mrs = await self._call("GET", f"{self._project}/repository/commits/{sha}/merge_requests")
        for mr in mrs:
            if mr.get("state") == "opened" and mr.get("sha") == sha:
                full = await self._call("GET", f"{self._project}/merge_requests/{mr['iid']}")
                pipeline = full.get("head_pipeline")
                if isinstance(pipeline, dict):
                    return pipeline
        return None

    async def job_log(self, check: Check, tail_bytes: int = 8000) -> str:
        if check.job_id is None:
            return ""
        url = f"{self._api}{self._project}/jobs/{check.job_id}/trace"
        tail = bytearray()
        try:
            async with self._session.get(
                url, headers={"PRIVATE-TOKEN": self._token}, timeout=TIMEOUT
            ) as resp:
                if resp.status >= 400:
                    data = await resp.json() if resp.content_type == "application/json" else None
                    raise ForgeError(resp.status, _message(data, resp.reason or "error"))
                async for chunk in resp.content.iter_chunked(LOG_CHUNK):
                    tail += chunk
                    del tail[: max(0, len(tail) - tail_bytes)]
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ForgeError(
                0, f"GitLab at {self._api} did not answer: {type(exc).__name__}"
            ) from exc
        return tail.decode("utf-8", errors="replace")

    async def required_checks(self, base: str) -> list[str]:
        """GitLab's free tiers have no per-check requirement on a branch: a project either
        requires its pipeline to succeed before a merge, or requires nothing."""
        project = await self._call("GET", self._project)
        return [PIPELINE_CHECK] if project.get("only_allow_merge_if_pipeline_succeeds") else []

    async def user_id(self, login: str) -> int | None:
        found = await self._call("GET", "/users", params={"username": login})
        for user in found if isinstance(found, list) else []:
            if str(user.get("username", "")).lower() == login.lower():
                return int(user["id"])
        return None

    async def token_scopes(self) -> list[str] | None:
        try:
            token = await self._call("GET", "/personal_access_tokens/self")
        except ForgeError as exc:
            if exc.status == 404:  # an OAuth or job token: GitLab does not say
                return None
            raise
        scopes = token.get("scopes")
        return [str(s) for s in scopes] if isinstance(scopes, list) else None

    async def protected(self, branch: str) -> bool:
        """Whether ``branch`` is a protected branch of the project."""
        try:
            await self._call("GET", f"{self._project}/protected_branches/{quote(branch, safe='')}")
        except ForgeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

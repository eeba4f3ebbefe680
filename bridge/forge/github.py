"""GitHub's REST API through gidgethub over the bridge's aiohttp session.

gidgethub builds the requests and reads GitHub's answers (errors with GitHub's own message,
rate limits, pagination); this module maps them to :mod:`bridge.forge.base`'s neutral types.
Check runs (GitHub Actions and apps) and commit statuses (older CI) are both a commit's checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import anyio
import gidgethub
import gidgethub.abc

from bridge.forge.base import (
    Check,
    CheckState,
    ForgeError,
    ForgeKind,
    MergeMethod,
    MergeResult,
    PullRequest,
)

USER_AGENT = "agy-bridge"


class _Api(gidgethub.abc.GitHubAPI):
    """gidgethub over the bridge's aiohttp session: its one transport method, as gidgethub
    asks of an implementation (its own aiohttp module is the same, and sleeps with asyncio);
    the last answer's headers kept (a token's scopes are only said in ``X-OAuth-Scopes``)."""

    def __init__(self, session: aiohttp.ClientSession, requester: str, **kwargs: Any) -> None:
        super().__init__(requester, **kwargs)
        self._session = session
        self.last_headers: Mapping[str, str] = {}

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        async with self._session.request(method, url, headers=headers, data=body) as answer:
            self.last_headers = answer.headers
            return answer.status, answer.headers, await answer.read()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


def _run_state(run: Mapping[str, Any]) -> CheckState:
    status = run.get("status")
    if status in ("queued", "waiting", "requested", "pending"):
        return "pending"
    if status != "completed":
        return "running"
    conclusion = run.get("conclusion")
    if conclusion == "success" or conclusion == "neutral":
        return "passed"
    if conclusion == "skipped":
        return "skipped"
    if conclusion == "cancelled":
        return "cancelled"
    return "failed"  # failure, timed_out, action_required, stale, startup_failure


_STATUS_STATES: dict[str, CheckState] = {
    "success": "passed",
    "pending": "running",
    "failure": "failed",
    "error": "failed",
}


class GitHubForge:
    """One GitHub repository (``owner/name``) through one token."""

    kind: ForgeKind = "github"

    def __init__(self, session: aiohttp.ClientSession, api_url: str, token: str, repo: str) -> None:
        self.repo = repo
        self._api = _Api(session, USER_AGENT, oauth_token=token, base_url=api_url)
        self._session = session
        self._token = token
        self._base = f"/repos/{repo}"

    async def _call(self, method: str, url: str, data: Any = b"") -> Any:
        api = self._api
        try:
            if method == "GET":
                return await api.getitem(url)
            if method == "POST":
                return await api.post(url, data=data)
            if method == "PATCH":
                return await api.patch(url, data=data)
            return await api.put(url, data=data)
        except gidgethub.HTTPException as exc:
            raise ForgeError(int(exc.status_code), str(exc) or exc.status_code.phrase) from None
        except gidgethub.GitHubException as exc:
            raise ForgeError(0, str(exc)) from None
        except aiohttp.ClientError as exc:
            raise ForgeError(0, f"GitHub could not be reached: {exc}") from None
        except TimeoutError:
            raise ForgeError(0, "GitHub did not answer in time") from None

    def _pull(self, data: Mapping[str, Any]) -> PullRequest:
        state = "merged" if data.get("merged") else str(data.get("state", "open"))
        return PullRequest(
            number=int(data["number"]),
            url=str(data["html_url"]),
            head=str(data["head"]["ref"]),
            base=str(data["base"]["ref"]),
            title=str(data.get("title") or ""),
            body=str(data.get("body") or ""),
            state=state if state in ("open", "closed", "merged") else "closed",
            head_sha=str(data["head"].get("sha") or ""),
        )

    async def user_id(self, login: str) -> int | None:
        try:
            return int((await self._call("GET", f"/users/{quote(login, safe='')}"))["id"])
        except ForgeError as exc:
            if exc.status == 404:
                return None
            raise

    async def default_branch(self) -> str:
        return str((await self._call("GET", self._base))["default_branch"])

    async def find_open_pr(self, head: str) -> PullRequest | None:
        owner = self.repo.split("/")[0]
        found = await self._call("GET", f"{self._base}/pulls?state=open&head={owner}:{head}")
        return self._pull(found[0]) if found else None

    async def open_pr(self, head: str, base: str, title: str, body: str) -> PullRequest:
        data = {"title": title, "head": head, "base": base, "body": body}
        return self._pull(await self._call("POST", f"{self._base}/pulls", data))

    async def update_pr(self, number: int, title: str, body: str) -> PullRequest:
        data = {"title": title, "body": body}
        return self._pull(await self._call("PATCH", f"{self._base}/pulls/{number}", data))

    async def get_pr(self, number: int) -> PullRequest:
        return self._pull(await self._call("GET", f"{self._base}/pulls/{number}"))

    async def checks(self, sha: str) -> list[Check]:
        runs = await self._call("GET", f"{self._base}/commits/{sha}/check-runs?per_page=100")
        found: dict[str, Check] = {}
        for run in runs.get("check_runs", []):
            job = run.get("id")
            found[str(run["name"])] = Check(
                name=str(run["name"]),
                state=_run_state(run),
                url=str(run.get("html_url") or run.get("details_url") or ""),
                job_id=str(job) if job is not None else None,
            )
        combined = await self._call("GET", f"{self._base}/commits/{sha}/status?per_page=100")
        for status in combined.get("statuses", []):
            name = str(status["context"])
            found.setdefault(
                name,
                Check(
                    name=name,
                    state=_STATUS_STATES.get(str(status.get("state")), "failed"),
                    url=str(status.get("target_url") or ""),
                ),
            )
        return sorted(found.values(), key=lambda check: check.name)

    async def job_log(self, check: Check, tail_bytes: int = 8000) -> str:
        if check.job_id is None:
            return ""
        text = await self._call("GET", f"{self._base}/actions/jobs/{check.job_id}/logs")
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return str(text or "")[-tail_bytes:]

    async def merge(
        self, number: int, method: MergeMethod, title: str, message: str
    ) -> MergeResult:
        pull = await self.get_pr(number)
        data = {
            "merge_method": method,
            "commit_title": title,
            "commit_message": message,
            "sha": pull.head_sha,
        }
        done = await self._call("PUT", f"{self._base}/pulls/{number}/merge", data)
        return MergeResult(
            merged=bool(done.get("merged")),
            sha=str(done.get("sha") or ""),
            message=str(done.get("message") or ""),
        )

    async def required_checks(self, base: str) -> list[str]:
        # The branch (read access) rather than its protection (admin access) says them.
        branch = await self._call("GET", f"{self._base}/branches/{base}")
        rules = (branch.get("protection") or {}).get("required_status_checks") or {}
        names = list(rules.get("contexts") or [])
        names += [c["context"] for c in rules.get("checks") or [] if c.get("context")]
        return sorted(set(names))

    async def token_scopes(self) -> list[str] | None:
        await self._call("GET", "/user")
        raw = self._api.last_headers.get("X-OAuth-Scopes")
        if raw is None:
            return None  # a fine-grained token: GitHub lists no scopes
        return [scope.strip() for scope in raw.split(",") if scope.strip()]

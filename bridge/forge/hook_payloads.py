"""GitHub's and GitLab's webhook payloads, read into neutral forge events.

Only the fields the bridge uses are modelled; everything else (and every event or action the
bridge does not follow) is ignored, since both forges add fields and events over time. A
payload that lacks a field the bridge needs is refused as malformed (``ValidationError``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bridge.forge.base import Check, CheckState
from bridge.forge.hook_events import ChecksChanged, ForgeEvent, PrClosed, ReviewComment


class _P(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# ----- GitHub -------------------------------------------------------------------------------


class _GhRepo(_P):
    full_name: str


class _GhUser(_P):
    login: str


class _GhRef(_P):
    ref: str = ""
    sha: str = ""


class _GhPrLink(_P):
    number: int
    head: _GhRef = Field(default_factory=_GhRef)


class _GhCheckRun(_P):
    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None = None
    html_url: str | None = None
    details_url: str | None = None
    pull_requests: list[_GhPrLink] = Field(default_factory=list)


class _GhCheckSuite(_P):
    head_branch: str | None = None
    head_sha: str
    pull_requests: list[_GhPrLink] = Field(default_factory=list)


class _GhPullRequest(_P):
    number: int
    merged: bool = False
    merge_commit_sha: str | None = None
    head: _GhRef = Field(default_factory=_GhRef)


class _GhComment(_P):
    id: int
    body: str | None = None
    user: _GhUser
    html_url: str = ""
    path: str = ""
    line: int | None = None


class _GhIssue(_P):
    number: int
    # Present (an object) only when the issue is a pull request.
    pull_request: dict[str, Any] | None = None


class _GhBranch(_P):
    name: str


class GitHubPayload(_P):
    action: str = ""
    repository: _GhRepo
    check_run: _GhCheckRun | None = None
    check_suite: _GhCheckSuite | None = None
    pull_request: _GhPullRequest | None = None
    issue: _GhIssue | None = None
    comment: _GhComment | None = None
    review: _GhComment | None = None
    # "status" events: one commit status.
    sha: str = ""
    state: str = ""
    context: str = ""
    target_url: str | None = None
    branches: list[_GhBranch] = Field(default_factory=list)


def github_check_state(status: str, conclusion: str | None) -> CheckState:
    """A check run's status and conclusion as a neutral state."""
    if status != "completed":
        return "running" if status == "in_progress" else "pending"
    match conclusion:
        case "success" | "neutral":
            return "passed"
        case "cancelled":
            return "cancelled"
        case "skipped":
            return "skipped"
        case "stale" | None:
            return "pending"
        case _:  # failure, timed_out, action_required, startup_failure
            return "failed"


def _github_status_state(state: str) -> CheckState:
    return {"pending": "pending", "success": "passed"}.get(state, "failed")  # type: ignore[return-value]


def parse_github(event: str, body: bytes) -> list[ForgeEvent]:
    """The neutral events of one GitHub delivery (``X-GitHub-Event`` is ``event``)."""
    data = json.loads(body)
    if event == "ping" or not isinstance(data, dict) or "repository" not in data:
        return []
    p = GitHubPayload.model_validate(data)
    repo = p.repository.full_name
    if event == "check_run" and p.check_run is not None:
        run = p.check_run
        check = Check(
            name=run.name,
            state=github_check_state(run.status, run.conclusion),
            url=run.html_url or run.details_url or "",
            job_id=str(run.id),
        )
        prs = tuple(link.number for link in run.pull_requests)
        branch = next((link.head.ref for link in run.pull_requests if link.head.ref), "")
        return [
            ChecksChanged(
                forge="github", repo=repo, sha=run.head_sha, branch=branch, prs=prs, checks=(check,)
            )
        ]
    if event == "check_suite" and p.check_suite is not None:
        suite = p.check_suite
        return [
            ChecksChanged(
                forge="github",
                repo=repo,
                sha=suite.head_sha,
                branch=suite.head_branch or "",
                prs=tuple(link.number for link in suite.pull_requests),
            )
        ]
    if event == "status" and p.sha:
        check = Check(name=p.context, state=_github_status_state(p.state), url=p.target_url or "")
        branch = p.branches[0].name if len(p.branches) == 1 else ""
        return [ChecksChanged(forge="github", repo=repo, sha=p.sha, branch=branch, checks=(check,))]
    if event == "pull_request" and p.action == "closed" and p.pull_request is not None:
        pr = p.pull_request
        return [
            PrClosed(
                forge="github",
                repo=repo,
                number=pr.number,
                branch=pr.head.ref,
                merged=pr.merged,
                sha=pr.merge_commit_sha or "",
            )
        ]
    return _github_comment(event, p)


def _github_comment(event: str, p: GitHubPayload) -> list[ForgeEvent]:
    repo = p.repository.full_name
    note: _GhComment | None = None
    number, branch = 0, ""
    if event == "issue_comment" and p.action == "created" and p.issue is not None:
        if p.issue.pull_request is None:
            return []  # a comment on an issue, not on a pull request
        note, number = p.comment, p.issue.number
    elif event == "pull_request_review" and p.action == "submitted" and p.pull_request:
        note, number, branch = p.review, p.pull_request.number, p.pull_request.head.ref
    elif event == "pull_request_review_comment" and p.action == "created" and p.pull_request:
        note, number, branch = p.comment, p.pull_request.number, p.pull_request.head.ref
    if note is None or not (note.body or "").strip():
        return []  # an approval without words says nothing to answer
    kind = {"pull_request_review": "review"}.get(event, "comment")
    return [
        ReviewComment(
            forge="github",
            repo=repo,
            number=number,
            branch=branch,
            login=note.user.login,
            body=note.body or "",
            url=note.html_url,
            comment_id=f"{kind}:{note.id}",
            path=note.path,
            line=note.line,
        )
    ]


# ----- GitLab -------------------------------------------------------------------------------


class _GlProject(_P):
    path_with_namespace: str
    web_url: str = ""


class _GlUser(_P):
    username: str


class _GlMrRef(_P):
    iid: int
    source_branch: str = ""


class _GlBuild(_P):
    id: int
    name: str
    status: str
    allow_failure: bool = False


class _GlPipelineAttrs(_P):
    id: int
    ref: str = ""
    sha: str
    status: str
    url: str = ""


class _GlMrAttrs(_P):
    iid: int
    state: str
    action: str = ""
    source_branch: str = ""
    merge_commit_sha: str | None = None


class _GlPosition(_P):
    new_path: str | None = None
    new_line: int | None = None


class _GlNoteAttrs(_P):
    id: int
    note: str
    noteable_type: str
    system: bool = False
    url: str = ""
    position: _GlPosition | None = None


class GitLabPayload(_P):
    object_kind: str
    project: _GlProject
    user: _GlUser | None = None
    merge_request: _GlMrRef | None = None
    builds: list[_GlBuild] = Field(default_factory=list)
    object_attributes: dict[str, Any] = Field(default_factory=dict)
    # Job hooks ("build") are flat.
    build_id: int | None = None
    build_name: str = ""
    build_status: str = ""
    build_allow_failure: bool = False
    sha: str = ""
    ref: str = ""


def gitlab_job_state(status: str, allow_failure: bool = False) -> CheckState:
    """A GitLab job's (or pipeline's) status as a neutral state."""
    match status:
        case "success":
            return "passed"
        case "failed":
            # A job allowed to fail does not fail its pipeline: not a pass, not a failure.
            return "skipped" if allow_failure else "failed"
        case "canceled" | "canceling":
            return "cancelled"
        case "skipped" | "manual":
            return "skipped"
        case "running":
            return "running"
        case _:  # created, pending, preparing, waiting_for_resource, scheduled
            return "pending"


def parse_gitlab(event: str, body: bytes) -> list[ForgeEvent]:
    """The neutral events of one GitLab delivery (``X-Gitlab-Event`` is ``event``)."""
    data = json.loads(body)
    if not isinstance(data, dict) or "project" not in data:
        return []
    p = GitLabPayload.model_validate(data)
    repo = p.project.path_with_namespace
    web = p.project.web_url
    if p.object_kind == "pipeline":
        attrs = _GlPipelineAttrs.model_validate(p.object_attributes)
        checks = tuple(
            Check(
                name=b.name,
                state=gitlab_job_state(b.status, b.allow_failure),
                url=f"{web}/-/jobs/{b.id}" if web else "",
                job_id=str(b.id),
            )
            for b in p.builds
        )
        prs = (p.merge_request.iid,) if p.merge_request is not None else ()
        return [
            ChecksChanged(
                forge="gitlab", repo=repo, sha=attrs.sha, branch=attrs.ref, prs=prs, checks=checks
            )
        ]
    if p.object_kind == "build" and p.build_id is not None:
        check = Check(
            name=p.build_name,
            state=gitlab_job_state(p.build_status, p.build_allow_failure),
            url=f"{web}/-/jobs/{p.build_id}" if web else "",
            job_id=str(p.build_id),
        )
        return [ChecksChanged(forge="gitlab", repo=repo, sha=p.sha, branch=p.ref, checks=(check,))]
    if p.object_kind == "merge_request":
        mr = _GlMrAttrs.model_validate(p.object_attributes)
        if mr.action not in ("merge", "close") and mr.state not in ("merged", "closed"):
            return []
        return [
            PrClosed(
                forge="gitlab",
                repo=repo,
                number=mr.iid,
                branch=mr.source_branch,
                merged=mr.state == "merged" or mr.action == "merge",
                sha=mr.merge_commit_sha or "",
            )
        ]
    if p.object_kind == "note":
        return _gitlab_note(p)
    return []


def _gitlab_note(p: GitLabPayload) -> list[ForgeEvent]:
    note = _GlNoteAttrs.model_validate(p.object_attributes)
    if note.noteable_type != "MergeRequest" or note.system or p.merge_request is None:
        return []  # a comment on an issue, a commit or a snippet; or GitLab's own note
    if p.user is None or not note.note.strip():
        return []
    position = note.position or _GlPosition()
    return [
        ReviewComment(
            forge="gitlab",
            repo=p.project.path_with_namespace,
            number=p.merge_request.iid,
            branch=p.merge_request.source_branch,
            login=p.user.username,
            body=note.note,
            url=note.url,
            comment_id=f"note:{note.id}",
            path=position.new_path or "",
            line=position.new_line,
        )
    ]

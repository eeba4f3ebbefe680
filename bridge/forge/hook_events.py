"""What a forge's webhook tells the bridge, in neutral terms (GitHub's and GitLab's alike).

A webhook is parsed (:mod:`bridge.forge.hook_payloads`) into at most a few of these; the rest
of the bridge reads only these, never a forge's payload.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from bridge.forge.base import Check, ForgeKind


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    forge: ForgeKind
    repo: str  # "owner/name" (GitHub) or the project's path (GitLab)


class ChecksChanged(_Event):
    """Checks on a commit changed: what the event says of them (the poller reads them all)."""

    kind: Literal["checks"] = "checks"
    sha: str = ""
    branch: str = ""
    # The pull or merge request numbers the forge names (GitHub's check_run does; a GitLab
    # pipeline names its merge request when it ran for one).
    prs: tuple[int, ...] = ()
    checks: tuple[Check, ...] = ()


class PrClosed(_Event):
    """A pull or merge request was merged or closed without merging."""

    kind: Literal["closed"] = "closed"
    number: int
    branch: str = ""
    merged: bool
    sha: str = ""


class ReviewComment(_Event):
    """Someone commented on a pull or merge request (a conversation comment, a review, a
    comment on a line)."""

    kind: Literal["comment"] = "comment"
    number: int
    branch: str = ""
    login: str  # the forge's user name of who wrote it
    body: str
    url: str = ""
    # The forge's own id of the comment (with the forge and repo: unique).
    comment_id: str
    # Where it sits: a file and line of the diff, when it is on one.
    path: str = ""
    line: int | None = None


ForgeEvent = ChecksChanged | PrClosed | ReviewComment

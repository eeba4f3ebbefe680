"""The neutral forge layer: what the bridge asks of GitHub or GitLab, in the forge's own terms.

A ``Forge`` is one repository on one forge, reached with one token. Every failure the forge
answers is a ``ForgeError`` carrying the forge's own status and error text, so a thread can be
told exactly what the forge said (a protected branch, a missing scope, a check still running).
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

PrState = Literal["open", "closed", "merged"]
CheckState = Literal["pending", "running", "passed", "failed", "cancelled", "skipped"]
MergeMethod = Literal["merge", "squash", "rebase"]
ForgeKind = Literal["github", "gitlab"]

# States after which a check will not change again.
FINISHED: frozenset[CheckState] = frozenset({"passed", "failed", "cancelled", "skipped"})


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)


class PullRequest(_Model):
    """A pull request (GitHub) or merge request (GitLab)."""

    number: int
    url: str
    head: str
    base: str
    title: str
    body: str = ""
    state: PrState
    head_sha: str = ""


class Check(_Model):
    """One check on a commit: a check run or commit status (GitHub), a pipeline job (GitLab)."""

    name: str
    state: CheckState
    url: str = ""
    # The forge's id of the job behind the check, for its log (None: no log to read).
    job_id: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def bad(self) -> bool:
        return self.state in ("failed", "cancelled")


class MergeResult(_Model):
    merged: bool
    sha: str = ""
    message: str = ""


class ForgeError(Exception):
    """The forge refused or failed: ``status`` is its HTTP status (0: never reached), ``text``
    its own words, shown to the thread as they are."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text}" if status else text)
        self.status = status
        self.text = text


class Forge(Protocol):
    """One repository on a forge. GitHub and GitLab implement the same methods."""

    kind: ForgeKind
    repo: str

    async def default_branch(self) -> str: ...

    async def find_open_pr(self, head: str) -> PullRequest | None: ...

    async def open_pr(self, head: str, base: str, title: str, body: str) -> PullRequest: ...

    async def update_pr(self, number: int, title: str, body: str) -> PullRequest: ...

    async def get_pr(self, number: int) -> PullRequest: ...

    async def checks(self, sha: str) -> list[Check]: ...

    async def job_log(self, check: Check, tail_bytes: int = 8000) -> str:
        """The last ``tail_bytes`` of the job's log ("" when the forge keeps none)."""
        ...

    async def merge(
        self, number: int, method: MergeMethod, title: str, message: str
    ) -> MergeResult: ...

    async def required_checks(self, base: str) -> list[str]:
        """The check names the base branch's protection requires ([] when none, or unknown)."""
        ...

    async def user_id(self, login: str) -> int | None:
        """The forge's numeric id of user ``login`` (None: no such user)."""
        ...

    async def token_scopes(self) -> list[str] | None:
        """The token's scopes as the forge reports them (None: the forge does not say)."""
        ...

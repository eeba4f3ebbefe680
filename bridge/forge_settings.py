"""``[forge]``: the forge a worktree thread's pull requests go to (docs/pull-requests.md).

Apart from :mod:`bridge.config` so that the configuration stays one file an operator reads. A
``[forge]`` table sets the defaults; a ``[workspaces.forge]`` table inside a ``[[workspaces]]``
entry overrides them key by key for that workspace (:func:`merged_forge`).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

# The environment variable that may carry the token instead of the file.
FORGE_TOKEN_ENV = "AGY_BRIDGE_FORGE_TOKEN"

DEFAULT_API = {"github": "https://api.github.com", "gitlab": "https://gitlab.com/api/v4"}

_REPO = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$")


class ForgeSection(BaseModel):
    """One forge: where its API is, the token, the repository and how pull requests merge."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["github", "gitlab"] = "github"
    # The API's base URL (GitHub Enterprise: https://host/api/v3; GitLab: https://host/api/v4).
    # Empty: the public forge's.
    api_url: str = ""
    # A secret: may come from AGY_BRIDGE_FORGE_TOKEN instead.
    token: SecretStr | None = None
    # owner/name (GitLab: group/subgroup/name). Empty: parsed from the workspace repository's
    # `origin` remote as the operator configured it (never from a thread's own repository).
    repo: str = ""
    # The branch pull requests go to. Empty: the repository's default branch as the forge says.
    base: str = ""
    merge_method: Literal["merge", "squash", "rebase"] = "squash"
    # Checks that must pass before !merge. None: the base branch protection's.
    required_checks: list[str] | None = None
    # Set: the forge's webhooks are accepted on the bridge's listener (signature-checked).
    webhook_secret: SecretStr | None = None
    # Forge login -> chat user id, for review comments and Co-authored-by lines.
    users: dict[str, str] = Field(default_factory=dict)
    # CI following by polling: the first wait between looks, and the longest.
    poll_seconds: float = Field(default=10.0, gt=0)
    poll_max_seconds: float = Field(default=120.0, gt=0)

    @field_validator("repo")
    @classmethod
    def _repo_form(cls, value: str) -> str:
        if value and not _REPO.match(value):
            raise ValueError(f"`{value}`: owner/name")
        return value

    @field_validator("api_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if value and not value.startswith(("https://", "http://")):
            raise ValueError("must start with https:// (or http:// for a local test server)")
        return value.rstrip("/")

    @property
    def api(self) -> str:
        return self.api_url or DEFAULT_API[self.kind]


def merged_forge(
    default: ForgeSection | None, workspace: ForgeSection | None
) -> ForgeSection | None:
    """The workspace's forge: its own keys over the ``[forge]`` defaults."""
    if workspace is None:
        return default
    if default is None:
        return workspace
    update = {name: getattr(workspace, name) for name in workspace.model_fields_set}
    return default.model_copy(update=update)


def with_env_token(raw: dict[str, Any], token: str) -> dict[str, Any]:
    """``raw`` with ``token`` as the ``[forge]`` token (the environment wins, as for every
    secret), and as the token of each ``[workspaces.forge]`` table that names none when no
    ``[forge]`` table is there to inherit from."""
    data = copy.deepcopy(raw)
    forge = data.get("forge")
    if isinstance(forge, dict):
        forge["token"] = token
        return data
    for workspace in data.get("workspaces") or []:
        if isinstance(workspace, dict) and isinstance(workspace.get("forge"), dict):
            workspace["forge"].setdefault("token", token)
    return data

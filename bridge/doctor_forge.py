"""``agy-bridge doctor``'s forge lines: for each configured forge, whether its token has the
scopes pull requests need, and whether the repository answers (one line each)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp

from bridge.config import Config
from bridge.core.forge_hooks import webhook_endpoints
from bridge.core.git import GitError, run_git
from bridge.forge.base import ForgeError
from bridge.forge.opening import open_forge
from bridge.forge.webhooks import GITHUB_PATH, GITLAB_PATH
from bridge.forge_settings import ForgeSection

# What !pr and !merge need, per forge: any one of the sets.
NEEDED: dict[str, tuple[frozenset[str], ...]] = {
    # api covers the REST calls and the push (write_repository alone cannot open an MR).
    "gitlab": (frozenset({"api"}),),
    # A classic token: repo (or public_repo for a public repository).
    "github": (frozenset({"repo"}), frozenset({"public_repo"})),
}
NEEDED_TEXT = {"gitlab": "api", "github": "repo (or public_repo)"}
FORGE_NAMES = {"github": "GitHub", "gitlab": "GitLab"}


class Lines(Protocol):
    def ok(self, text: str) -> None: ...

    def bad(self, text: str) -> None: ...

    def warn(self, text: str) -> None: ...


async def _repo(section: ForgeSection, workspace: Path | None) -> str | None:
    """The configured repository, else the one the workspace's ``origin`` names."""
    if section.repo:
        return section.repo
    if workspace is None:
        return None
    try:
        url = await run_git(workspace.expanduser(), "config", "--get", "remote.origin.url")
    except GitError:
        return None
    path = urlsplit(url).path if "://" in url else url.partition(":")[2]
    return path.strip("/").removesuffix(".git") or None


async def check_forges(config: Config, report: Lines) -> None:
    """One line for the token's scopes and one for the repository, per configured forge."""
    seen: set[tuple[str, str, str]] = set()
    places: list[tuple[ForgeSection, Path | None]] = []
    if config.forge is not None:
        default = next((w.path for w in config.workspaces if w.is_default), None)
        places.append((config.forge, default))
    for entry in config.workspaces:
        section = config.forge_for(entry)
        if section is not None:
            places.append((section, entry.path))
    # A workspace without a forge of its own shares [forge]: the same place once.
    places = list({(id(section), path): (section, path) for section, path in places}.values())
    if not places:
        return
    async with aiohttp.ClientSession() as session:
        for section, workspace in places:
            name = FORGE_NAMES[section.kind]
            repo = await _repo(section, workspace)
            if repo is None:
                report.bad(
                    f"{name}: no repository: set [forge] repo, or an `origin` remote on the "
                    "workspace repository"
                )
                continue
            key = (section.kind, section.api, repo)
            if key in seen:
                continue
            seen.add(key)
            await _check_one(section, repo, session, report)
    _webhook_lines(config, report)


def _webhook_lines(config: Config, report: Lines) -> None:
    """Where each forge's webhook is served, when a secret is set."""
    kinds = sorted({e.kind for e in webhook_endpoints(config)})
    host = f"[{config.admin.host}]" if ":" in config.admin.host else config.admin.host
    for kind in kinds:
        path = GITHUB_PATH if kind == "github" else GITLAB_PATH
        report.ok(
            f"{FORGE_NAMES[kind]} webhooks: served at http://{host}:{config.admin.port}{path} "
            "(the [admin] listener; the forge reaches it through your reverse proxy)"
        )


async def _check_one(
    section: ForgeSection, repo: str, session: aiohttp.ClientSession, report: Lines
) -> None:
    name = FORGE_NAMES[section.kind]
    if section.token is None or not section.token.get_secret_value():
        report.bad(f"{name} {repo}: no token: set [forge] token or AGY_BRIDGE_FORGE_TOKEN")
        return
    client = open_forge(section.kind, section.api, section.token.get_secret_value(), repo, session)
    try:
        scopes = await client.token_scopes()
    except ForgeError as exc:
        report.bad(f"{name} token: {name} answered {exc} (at {section.api})")
    else:
        if scopes is None:
            report.warn(
                f"{name} token: {name} does not list its scopes (a fine-grained or OAuth "
                f"token): it needs {NEEDED_TEXT[section.kind]} or the same rights"
            )
        elif any(need <= set(scopes) for need in NEEDED[section.kind]):
            report.ok(f"{name} token scopes: {', '.join(scopes)}")
        else:
            report.bad(
                f"{name} token scopes: {', '.join(scopes) or 'none'}; !pr and !merge need "
                f"{NEEDED_TEXT[section.kind]}"
            )
    try:
        branch = await client.default_branch()
    except ForgeError as exc:
        report.bad(f"{name} repository {repo}: {exc} (at {section.api})")
    else:
        report.ok(f"{name} repository {repo} reachable (default branch {branch})")

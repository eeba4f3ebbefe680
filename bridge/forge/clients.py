"""The client for a configured forge: GitHub or GitLab, behind the neutral protocol."""

from __future__ import annotations

import aiohttp

from bridge.forge.base import Forge, ForgeError
from bridge.forge.github import GitHubForge
from bridge.forge.gitlab import GitLabForge
from bridge.forge_settings import ForgeSection

FORGE_NAMES = {"github": "GitHub", "gitlab": "GitLab"}


def forge_client(section: ForgeSection, session: aiohttp.ClientSession, repo: str) -> Forge:
    """The client of ``section``'s forge for ``repo`` (``owner/name``), through ``session``.

    Raises ForgeError (status 0) when no token is configured."""
    if section.token is None or not section.token.get_secret_value():
        raise ForgeError(
            0, f"no {FORGE_NAMES[section.kind]} token: set [forge] token or AGY_BRIDGE_FORGE_TOKEN"
        )
    token = section.token.get_secret_value()
    if section.kind == "gitlab":
        return GitLabForge(session, section.api, token, repo)
    return GitHubForge(session, section.api, token, repo)

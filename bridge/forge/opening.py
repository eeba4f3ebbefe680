"""The one place that knows every forge kind: a ``Forge`` for a kind, an API URL, a token and a
repository, over the bridge's aiohttp session."""

from __future__ import annotations

import aiohttp

from bridge.forge.base import Forge, ForgeError
from bridge.forge.github import GitHubForge
from bridge.forge.gitlab import GitLabForge


def open_forge(
    kind: str, api_url: str, token: str, repo: str, session: aiohttp.ClientSession
) -> Forge:
    if kind == "github":
        return GitHubForge(session, api_url, token, repo)
    if kind == "gitlab":
        return GitLabForge(session, api_url, token, repo)
    raise ForgeError(0, f"the forge kind `{kind}` is not supported by this bridge yet")


# The user name git sends with a token over HTTPS, per forge (the token is the password).
GIT_USERNAME = {"github": "x-access-token", "gitlab": "oauth2"}

"""The one place that knows every forge kind: a ``Forge`` for a kind, an API URL, a token and a
repository, over the bridge's aiohttp session."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.forge.base import Forge, ForgeError

if TYPE_CHECKING:
    import aiohttp


def open_forge(
    kind: str, api_url: str, token: str, repo: str, session: aiohttp.ClientSession
) -> Forge:
    # Each forge's client (aiohttp, gidgethub, the webhook payloads' models) is imported with
    # its first use: a bridge without a forge, or with one kind, imports none or one.
    # tests/test_startup_imports.py imports every such deferred import.
    if kind == "github":
        from bridge.forge.github import GitHubForge

        return GitHubForge(session, api_url, token, repo)
    if kind == "gitlab":
        from bridge.forge.gitlab import GitLabForge

        return GitLabForge(session, api_url, token, repo)
    raise ForgeError(0, f"the forge kind `{kind}` is not supported by this bridge yet")


# The user name git sends with a token over HTTPS, per forge (the token is the password).
GIT_USERNAME = {"github": "x-access-token", "gitlab": "oauth2"}

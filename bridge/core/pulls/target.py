"""A thread's way to its forge: its repository and branch, the forge's settings and client.

Every refusal here is a sentence for the thread: no forge configured, not a worktree thread, no
token, no remote to push to.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bridge.config import Config
from bridge.core.events import Author, ThreadRef
from bridge.core.pulls.push import PushRefused, remote_url, repo_from_remote
from bridge.core.store import Store
from bridge.core.workspaces import Place, place_for
from bridge.forge.base import Forge, ForgeError
from bridge.forge.opening import open_forge
from bridge.forge_settings import ForgeSection

if TYPE_CHECKING:
    # Only the type: aiohttp is imported where a forge is configured (bridge.core.core).
    import aiohttp

log = logging.getLogger(__name__)


class Refused(Exception):
    """A pull request step cannot be done; the message is for the thread."""


@dataclass(frozen=True)
class Target:
    thread: ThreadRef
    team: Path  # the workspace's (team) repository
    workdir: Path  # the thread's own repository
    branch: str
    settings: ForgeSection
    forge: Forge
    push_url: str
    token: str


async def thread_place(config: Config, store: Store, thread: ThreadRef) -> Place:
    workspace = None
    if await store.known_thread(thread.key):
        workspace = (await store.thread(thread.key)).workspace
    return place_for(config, thread, workspace)


async def target_for(
    config: Config, store: Store, thread: ThreadRef, http: aiohttp.ClientSession
) -> Target:
    place = await thread_place(config, store, thread)
    settings = config.forge_for(place.workspace)
    if settings is None:
        raise Refused(
            "No forge is configured for this thread's workspace: the operator sets `[forge]` "
            "(docs/pull-requests.md)."
        )
    if place.repo is None or place.branch is None:
        raise Refused(
            "This thread has no branch of its own: pull requests come from threads of a "
            "`worktree = true` workspace."
        )
    if settings.token is None or not settings.token.get_secret_value():
        raise Refused("The forge has no token: set `[forge] token` or AGY_BRIDGE_FORGE_TOKEN.")
    try:
        url = await remote_url(place.repo)
    except PushRefused as exc:
        raise Refused(str(exc)) from None
    repo = settings.repo or repo_from_remote(url)
    token = settings.token.get_secret_value()
    return Target(
        thread=thread,
        team=place.repo,
        workdir=place.workdir,
        branch=place.branch,
        settings=settings,
        forge=open_forge(settings.kind, settings.api, token, repo, http),
        push_url=url,
        token=token,
    )


def thread_link(thread: ThreadRef) -> str:
    """A link back to the chat thread, for the PR's body."""
    if thread.platform == "slack":
        ts = (thread.thread or "").replace(".", "")
        return f"https://slack.com/archives/{thread.channel}" + (f"/p{ts}" if ts else "")
    if thread.platform == "matrix":
        event = f"/{thread.thread}" if thread.thread else ""
        return f"https://matrix.to/#/{thread.channel}{event}"
    return f"{thread.platform}:{thread.channel}/{thread.thread or ''}"


def co_author(author: Author, settings: ForgeSection, user_id: int | None = None) -> str:
    """The ``Co-authored-by:`` line of a teammate: their e-mail where the chat showed it
    (Slack), else the forge's private commit address of the login the operator mapped to them
    (``ID+login@users.noreply.github.com``, ``ID-login@users.noreply.gitlab.com``: ``user_id``
    is the account's id), else their chat user id. Without the id, GitHub's older form
    ``login@users.noreply.github.com``; GitLab has none without the id."""
    name = (author.display_name or author.id).replace("<", "").replace(">", "").strip()
    if author.email:
        return f"Co-authored-by: {name} <{author.email}>"
    login = mapped_login(author, settings)
    if login is not None and settings.kind == "github":
        at = f"{user_id}+{login}" if user_id is not None else login
        return f"Co-authored-by: {name} <{at}@users.noreply.github.com>"
    if login is not None and user_id is not None:
        return f"Co-authored-by: {name} <{user_id}-{login}@users.noreply.gitlab.com>"
    return f"Co-authored-by: {name} <{author.id}>"


def mapped_login(author: Author, settings: ForgeSection) -> str | None:
    return next((lg for lg, uid in settings.users.items() if uid == author.id), None)


async def co_authors(authors: list[Author], settings: ForgeSection, forge: Forge) -> list[str]:
    """The ``Co-authored-by:`` lines of ``authors``, sorted, each mapped login's id looked up
    on the forge (a failed lookup falls back as :func:`co_author` says)."""
    lines = []
    for author in authors:
        login = None if author.email else mapped_login(author, settings)
        number = None
        if login is not None:
            try:
                number = await forge.user_id(login)
            except ForgeError as exc:
                log.info("forge user %s not looked up: %s", login, exc)
        lines.append(co_author(author, settings, number))
    return sorted(dict.fromkeys(lines))

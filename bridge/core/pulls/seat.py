"""The pull request parts of one core: wired once in ``open_core`` when a forge is configured."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bridge.agy.runtime import AgyRuntime
from bridge.config import Config
from bridge.core.capabilities import Permalinks
from bridge.core.events import Author, ThreadRef
from bridge.core.leases import Leases
from bridge.core.pulls.cleanup import merged_on_forge
from bridge.core.pulls.follow import CheckFollower
from bridge.core.pulls.purpose import ask_purpose, submit_turn
from bridge.core.pulls.service import PullRequests
from bridge.core.pulls.target import Target
from bridge.core.router import Router
from bridge.core.scrubbed_chat import ScrubbedAdapter
from bridge.core.store import PullRow, Store
from bridge.core.team.audit import AuditLog
from bridge.forge.base import Check

if TYPE_CHECKING:
    # Only the type: aiohttp is imported where a forge is configured (bridge.core.core).
    import aiohttp

# The longest one request to the forge may take (seconds).
FORGE_TIMEOUT = 60.0
# The longest the agent gets to write a PR's description.
PURPOSE_SECONDS = 300.0


@dataclass
class Pulls:
    requests: PullRequests
    follower: CheckFollower
    # Runs a step in the core's task group (a webhook's reading of checks, off its answer).
    background: Callable[[Awaitable[None]], None]

    async def report_checks(self, thread_key: str, sha: str, checks: list[Check]) -> bool:
        """Checks a webhook reported: told in the thread when they changed (once)."""
        return await self.follower.report_checks(thread_key, sha, checks)


def open_pulls(
    config: Config,
    store: Store,
    router: Router,
    runtime: AgyRuntime,
    leases: Leases,
    audit: AuditLog | None,
    http: aiohttp.ClientSession,
    scrub: Callable[[str], str],
) -> Pulls:
    wait = min(PURPOSE_SECONDS, config.agy.turn_timeout)

    async def purpose(thread: ThreadRef, author: Author) -> str | None:
        return await ask_purpose(store, router, thread, author, wait)

    async def turn(thread: ThreadRef, author: Author, text: str) -> None:
        await submit_turn(store, router, thread, author, text)

    requests = PullRequests(
        config,
        store,
        http,
        router.say,
        purpose,
        turn,
        audit,
        lambda: runtime.isolation.sandbox,
        scrub=scrub,
    )

    async def permalink(thread: ThreadRef) -> str | None:
        # A capability that posts nothing: asked of the adapter itself, not its scrubbed face.
        adapter: object = router.adapters.get(thread.platform)
        if isinstance(adapter, ScrubbedAdapter):
            adapter = adapter.inner
        return await adapter.permalink(thread) if isinstance(adapter, Permalinks) else None

    requests.permalink = permalink

    async def merged(target: Target, row: PullRow) -> None:
        # Off the follower's loop: ending the thread's agent may wait for its turn.
        router.background(merged_on_forge(requests, router, target, row))

    return Pulls(requests, CheckFollower(requests, leases, merged), router.background)

"""What a forge's webhook event does to a thread (docs/pull-requests.md, "Webhooks").

- A review comment on a thread's pull request, by a forge user mapped in ``[forge] users`` to
  a chat user the thread serves, is that user's message: stored in the inbox like any other
  (a turn when the agent is idle, injected into the running turn when it works) and shown in
  the thread. Anyone else's comment is shown in the thread, marked unlisted, and never reaches
  the agent.
- Check changes: the commit's checks are read whole, in a task of the core's task group (the
  delivery is answered at once), and handed to the CI follower
  (:mod:`bridge.core.pulls.follow`), which tells each change once, whoever saw it first.
- A pull request merged or closed on the forge: the follower looks at once, records it and
  tells the thread.

Events about pull requests no thread opened are ignored.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Protocol

from bridge.config import Config
from bridge.core.events import Author, IncomingMessage, SubmitOutcome, ThreadRef
from bridge.core.pulls.seat import Pulls
from bridge.core.pulls.target import Refused
from bridge.core.store.pulls import PullRow
from bridge.core.workspaces import find_workspace
from bridge.forge.base import ForgeError
from bridge.forge.hook_events import ChecksChanged, ForgeEvent, PrClosed, ReviewComment
from bridge.forge.webhooks import MAX_BODY_BYTES, Handler, WebhookEndpoint, WebhookReceiver

log = logging.getLogger(__name__)

# A comment longer than this is cut (a whole pasted log is not a review comment).
MAX_COMMENT_CHARS = 6000
FORGE_NAMES = {"github": "GitHub", "gitlab": "GitLab"}


class HookCore(Protocol):
    """What of the core the forge's events use."""

    async def submit(self, message: IncomingMessage) -> SubmitOutcome: ...

    async def say(self, thread: ThreadRef, text: str) -> None: ...


class PullStore(Protocol):
    async def pull_by_number(self, forge: str, repo: str, number: int) -> PullRow | None: ...

    async def open_pulls(self) -> list[PullRow]: ...


def webhook_endpoints(config: Config) -> list[WebhookEndpoint]:
    """One endpoint per configured forge with a webhook secret (``[forge]`` and each
    workspace's): a forge with its repository named accepts only that repository's events;
    one whose repository comes from the remote accepts any, and the event must still be about
    a pull request a thread opened."""
    sections = [config.forge, *(config.forge_for(w) for w in config.workspaces)]
    found: dict[tuple[str, str | None, str], WebhookEndpoint] = {}
    for section in sections:
        if section is None or section.webhook_secret is None:
            continue
        secret = section.webhook_secret.get_secret_value()
        if not secret:
            continue
        repo = section.repo or None
        found[(section.kind, repo, secret)] = WebhookEndpoint(section.kind, repo, secret)
    return list(found.values())


def _listed(config: Config, platform: str, user: str) -> bool:
    """Whether the access lists serve ``user`` on ``platform`` (an empty list: everyone in
    the allowed channels and rooms, which the thread is in)."""
    users: list[str] = []
    if platform == "slack":
        users = config.slack.allowed_users
    elif platform == "matrix":
        users = config.matrix.allowed_users
    return not users or user in users


def _fence(text: str) -> str:
    """``text`` as a fenced block no backtick run inside it can close: a comment's markup,
    mentions and links are shown, never rendered."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


class ForgeHooks:
    """The sink of :class:`bridge.forge.webhooks.WebhookReceiver`."""

    def __init__(
        self, config: Config, core: HookCore, store: PullStore, pulls: Pulls | None
    ) -> None:
        self._config = config
        self._core = core
        self._store = store
        self._pulls = pulls

    async def __call__(self, event: ForgeEvent) -> None:
        match event:
            case ReviewComment():
                await self.comment(event)
            case ChecksChanged():
                await self.checks_changed(event)
            case PrClosed():
                await self.closed(event)

    async def _pull(self, forge: str, repo: str, number: int) -> PullRow | None:
        row = await self._store.pull_by_number(forge, repo, number)
        if row is None:
            log.info("forge webhook: %s %s #%d is no thread's pull request", forge, repo, number)
        return row

    async def comment(self, event: ReviewComment) -> None:
        row = await self._pull(event.forge, event.repo, event.number)
        if row is None:
            return
        thread = ThreadRef.from_key(row.thread_key)
        forge = FORGE_NAMES[event.forge]
        where = f" on `{event.path}`" + (f" line {event.line}" if event.line else "")
        where = where if event.path else ""
        body = event.body.strip()
        if len(body) > MAX_COMMENT_CHARS:
            body = body[:MAX_COMMENT_CHARS] + "\n… (cut)"
        link = f" ({event.url})" if event.url else ""
        section = self._config.forge_for(find_workspace(self._config, thread))
        user = section.users.get(event.login) if section is not None else None
        if user is None or not _listed(self._config, thread.platform, user):
            log.info(
                "forge webhook: a comment by %s, who is not a mapped teammate, is shown only",
                event.login,
                extra={"chat_thread": thread.key},
            )
            await self._core.say(
                thread,
                f"Unlisted: **{event.login}** commented on {forge}{where}{link}; not passed "
                f"to the agent (not a teammate mapped in `[forge] users`):\n\n{_fence(body)}",
            )
            return
        # As the mapped person's own message: stored once (the comment's id is its event id,
        # so a redelivered webhook stops at the inbox), then a turn or an injection.
        text = f"(review comment on {forge}{where}{link})\n\n{body}"
        message = IncomingMessage(
            thread=thread,
            event_id=f"forge:{event.forge}:{event.repo}:{event.comment_id}",
            message_id=f"forge:{event.forge}:{event.comment_id}",
            author=Author(id=user, display_name=f"{event.login} on {forge}"),
            text=text,
        )
        outcome = await self._core.submit(message)
        if outcome is SubmitOutcome.ACCEPTED:
            # The thread sees what the agent got (once: a redelivery is a duplicate).
            await self._core.say(
                thread,
                f"💬 **{event.login}** commented on {forge}{where}{link}, passed to the agent "
                f"as their message:\n\n{_fence(body)}",
            )
        log.info(
            "forge webhook: a comment by %s on #%d (%s)",
            event.login,
            event.number,
            outcome.value,
            extra={"chat_thread": thread.key},
        )

    async def checks_changed(self, event: ChecksChanged) -> None:
        """Read the pull request's checks whole (an event names one check, or one pipeline's
        jobs) and hand them to the CI follower, which tells a change once."""
        if self._pulls is None:
            log.debug("forge webhook: checks changed on %s, no CI follower", event.sha[:12])
            return
        for row in await self._rows_of(event):
            # Read off the delivery: the forge waits for its answer (GitHub gives up after
            # 10 s), and reading the checks is a round trip or more to it. Nothing is lost if
            # the read fails: the follower's next look reads them too.
            self._pulls.background(self._read_checks(row))

    async def _read_checks(self, row: PullRow) -> None:
        assert self._pulls is not None
        # The head the bridge pushed last, whatever commit the event names: a merged
        # results pipeline runs on a merge commit, and an older commit's event changes
        # nothing there (the follower tells only a change).
        sha = row.pushed_sha
        thread = ThreadRef.from_key(row.thread_key)
        try:
            target = await self._pulls.requests.target(thread)
            checks = await target.forge.checks(sha)
        except (Refused, ForgeError) as exc:
            log.info(
                "forge webhook: checks of %s not read: %s",
                sha[:12],
                exc,
                extra={"chat_thread": row.thread_key},
            )
            return
        await self._pulls.report_checks(row.thread_key, sha, checks)

    async def _rows_of(self, event: ChecksChanged) -> list[PullRow]:
        """The open pull requests an event is about: those it names, else those whose head
        is its branch or its commit."""
        rows = []
        for number in event.prs:
            row = await self._store.pull_by_number(event.forge, event.repo, number)
            if row is not None and row.state == "open":
                rows.append(row)
        if rows or event.prs:
            return rows
        return [
            row
            for row in await self._store.open_pulls()
            if row.forge == event.forge
            and row.repo.lower() == event.repo.lower()
            and ((event.branch and row.head == event.branch) or row.pushed_sha == event.sha)
        ]

    async def closed(self, event: PrClosed) -> None:
        """The CI follower looks at once: it records the forge's state and tells the thread
        (once: a merge the bridge made is recorded already)."""
        row = await self._pull(event.forge, event.repo, event.number)
        if row is None or self._pulls is None or row.state != "open":
            return
        self._pulls.follower.wake(row.thread_key)


def webhook_routes(
    config: Config, core: HookCore, store: PullStore, pulls: Pulls | None
) -> tuple[Mapping[str, Handler], int]:
    """The forges' webhook routes for the admin listener (none without a ``webhook_secret``)
    and the body size they take: the one wiring of receiver and sink, for the bridge's run and
    for the tests that serve it."""
    endpoints = webhook_endpoints(config)
    if not endpoints:
        return {}, 1024
    receiver = WebhookReceiver(endpoints, ForgeHooks(config, core, store, pulls))
    return receiver.routes(), MAX_BODY_BYTES

"""Forge webhooks on the bridge's HTTP listener: signatures checked, replays dropped.

GitHub signs each delivery's body with HMAC-SHA256 under the webhook's secret
(``X-Hub-Signature-256: sha256=<hex>``); GitLab sends the secret itself (``X-Gitlab-Token``).
Both are compared in constant time against every configured secret of that forge; the one that
matches also names the only repository whose events the delivery may carry. A delivery without
a valid signature is answered 401 and logged with its id and event, never with a header's or
the secret's value. Each delivery's id (GitHub's ``X-GitHub-Delivery``, GitLab's
``Idempotency-Key``, which its retries keep; older GitLab sends none, and the body's hash
stands in) is remembered, so a replay is acknowledged and
dropped; comments are also stored under their forge ids, which the inbox keeps unique.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from aiohttp import web
from pydantic import ValidationError

from bridge.forge.base import ForgeKind
from bridge.forge.hook_events import ForgeEvent
from bridge.forge.hook_payloads import parse_github, parse_gitlab

log = logging.getLogger(__name__)

GITHUB_PATH = "/forge/github"
GITLAB_PATH = "/forge/gitlab"
# GitHub caps a payload at 25 MB, but the events followed here are a few kilobytes to a few
# hundred (a pull request's full description at most); anything larger is refused unread.
MAX_BODY_BYTES = 2 * 1024 * 1024
# Delivery ids remembered against replays (a few days of a busy repository's events).
SEEN_CAPACITY = 20_000

Sink = Callable[[ForgeEvent], Awaitable[None]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class WebhookEndpoint:
    """One configured repository whose forge may call: its kind, path and webhook secret."""

    kind: ForgeKind
    repo: str | None  # None: any repository (the event must still be a thread's PR's)
    secret: str


def github_signature(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


class WebhookReceiver:
    """Checks, de-duplicates and parses deliveries, then hands each event to ``sink``."""

    def __init__(self, endpoints: Sequence[WebhookEndpoint], sink: Sink) -> None:
        self._endpoints = list(endpoints)
        self._sink = sink
        # Delivery keys, oldest first, at most SEEN_CAPACITY.
        self._seen: OrderedDict[str, None] = OrderedDict()

    def routes(self) -> Mapping[str, Handler]:
        """The POST routes to serve: one per forge that has a configured endpoint."""
        kinds = {e.kind for e in self._endpoints}
        routes: dict[str, Handler] = {}
        if "github" in kinds:
            routes[GITHUB_PATH] = self.github
        if "gitlab" in kinds:
            routes[GITLAB_PATH] = self.gitlab
        return routes

    async def github(self, request: web.Request) -> web.StreamResponse:
        event = request.headers.get("X-GitHub-Event", "")
        delivery = request.headers.get("X-GitHub-Delivery", "")
        body = await request.read()
        signature = request.headers.get("X-Hub-Signature-256")
        endpoint = None
        if signature is not None:
            endpoint = next(
                (
                    e
                    for e in self._endpoints
                    if e.kind == "github" and _same(signature, github_signature(e.secret, body))
                ),
                None,
            )
        if endpoint is None:
            return self._refuse("github", event, delivery, signature is None)
        return await self._accept(endpoint, event, delivery, lambda: parse_github(event, body))

    async def gitlab(self, request: web.Request) -> web.StreamResponse:
        event = request.headers.get("X-Gitlab-Event", "")
        delivery = (
            request.headers.get("Idempotency-Key")
            or request.headers.get("X-Gitlab-Event-UUID")
            or ""
        )
        token = request.headers.get("X-Gitlab-Token")
        body = await request.read()
        if not delivery:
            # GitLab before 16.2 sends no delivery id: the body itself names the event.
            delivery = "body-" + hashlib.sha256(body).hexdigest()[:32]
        endpoint = None
        if token is not None:
            endpoint = next(
                (e for e in self._endpoints if e.kind == "gitlab" and _same(token, e.secret)),
                None,
            )
        if endpoint is None:
            return self._refuse("gitlab", event, delivery, token is None)
        return await self._accept(endpoint, event, delivery, lambda: parse_gitlab(event, body))

    @staticmethod
    def _refuse(kind: str, event: str, delivery: str, missing: bool) -> web.Response:
        why = "carries no signature" if missing else "has a signature no secret matches"
        log.warning(
            "forge webhook: a %s delivery (%s, event %r) %s: refused",
            kind,
            delivery[:64] or "no id",
            event[:64],
            why,
        )
        return web.json_response({"error": "unauthorized"}, status=401)

    async def _accept(
        self,
        endpoint: WebhookEndpoint,
        event: str,
        delivery: str,
        parse: Callable[[], list[ForgeEvent]],
    ) -> web.Response:
        if not delivery:
            log.warning("forge webhook: a %s delivery without an id: refused", endpoint.kind)
            return web.json_response({"error": "no delivery id"}, status=400)
        key = f"{endpoint.kind}:{delivery}"
        if key in self._seen:
            log.info("forge webhook: %s delivery %s seen before: ignored", endpoint.kind, delivery)
            return web.json_response({"ok": True, "duplicate": True})
        try:
            events = parse()
        except (ValueError, ValidationError) as exc:  # JSON or a missing field
            log.warning(
                "forge webhook: %s delivery %s (%s) is malformed: %s",
                endpoint.kind,
                delivery,
                event,
                type(exc).__name__,
            )
            return web.json_response({"error": "malformed payload"}, status=400)
        self._seen[key] = None
        while len(self._seen) > SEEN_CAPACITY:
            self._seen.popitem(last=False)
        handled = 0
        try:
            for item in events:
                if endpoint.repo is not None and item.repo.lower() != endpoint.repo.lower():
                    log.warning(
                        "forge webhook: %s delivery %s names %s, not %s: ignored",
                        endpoint.kind,
                        delivery,
                        item.repo,
                        endpoint.repo,
                    )
                    continue
                await self._sink(item)
                handled += 1
        except Exception:
            # Forget it, so that the forge's retry is handled.
            self._seen.pop(key, None)
            log.exception("forge webhook: %s delivery %s failed", endpoint.kind, delivery)
            return web.json_response({"error": "not handled"}, status=500)
        log.debug("forge webhook: %s %s (%s): %d events", endpoint.kind, delivery, event, handled)
        return web.json_response({"ok": True, "events": handled})

"""The admin endpoint: ``GET /healthz`` and ``GET /metrics`` over plain HTTP.

It listens on loopback unless configured otherwise: the metrics name platforms and error
kinds, and /healthz tells anyone who can reach it how busy the bridge is.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from bridge.metrics import Metrics

log = logging.getLogger(__name__)

HealthCheck = Callable[[], Awaitable[dict[str, Any]]]
# A POST route served beside them (a forge's webhook: bridge/forge/webhooks.py).
PostHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# A probe that hangs is worse than one that fails: answer 503 after this long.
HEALTH_TIMEOUT = 5.0
# Requests are tiny and quick; an exit should not wait long for a slow scraper.
SHUTDOWN_TIMEOUT = 2.0


@dataclass(frozen=True)
class AdminServer:
    host: str  # the address the socket is bound to
    port: int  # the bound port (the OS's choice when asked for port 0)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@asynccontextmanager
async def open_admin(
    metrics: Metrics,
    *,
    host: str = "127.0.0.1",
    port: int = 9464,
    health: HealthCheck,
    health_timeout: float = HEALTH_TIMEOUT,
    posts: Mapping[str, PostHandler] | None = None,
    max_body: int = 1024,
) -> AsyncIterator[AdminServer]:
    """Serve /healthz and /metrics (and ``posts``, which read bodies of up to ``max_body``
    bytes) until the context exits, then close the listening socket."""
    if not is_loopback(host):
        log.warning(
            "admin: listening on %s, so /metrics and /healthz are reachable from the network",
            host or "all interfaces",
        )
    runner = web.AppRunner(
        _make_app(metrics, health, health_timeout, posts or {}, max_body),
        access_log_class=_PathOnlyAccessLogger,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = _bound_address(runner)
        server = AdminServer(host=bound_host or host, port=bound_port or port)
        log.info("admin: serving /healthz and /metrics at %s", server.url)
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine ("" and 0.0.0.0 mean every interface)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _make_app(
    metrics: Metrics,
    health: HealthCheck,
    health_timeout: float,
    posts: Mapping[str, PostHandler],
    max_body: int,
) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        try:
            with anyio.fail_after(health_timeout):
                status, body = await _check_health(health)
        except TimeoutError:
            log.warning("admin: health check did not answer within %.1f s", health_timeout)
            status, body = 503, {"status": "error", "detail": "health check timed out"}
        return web.Response(
            status=status,
            text=json.dumps(body, default=str),
            content_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    async def scrape(request: web.Request) -> web.Response:
        body, content_type = metrics.render()
        # aiohttp's content_type argument refuses parameters (version, charset): set the header.
        return web.Response(body=body, headers={"Content-Type": content_type})

    # Neither endpoint reads a body; refuse anything more than a few bytes unread (or more
    # than the posted routes take).
    app = web.Application(client_max_size=max_body)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", scrape)
    for path, handler in posts.items():
        app.router.add_post(path, handler)
    return app


async def _check_health(health: HealthCheck) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body): 200 with health()'s answer when it says ok, 503 otherwise."""
    try:
        report = await health()
    except Exception as exc:
        # The exception's text goes to the (secret-scrubbed) log, not to whoever asked.
        log.warning("admin: health check failed", exc_info=True)
        return 503, {"status": "error", "detail": f"health check failed: {type(exc).__name__}"}
    if not isinstance(report, dict):
        log.warning("admin: health check returned %s, not a dict", type(report).__name__)
        return 503, {"status": "error", "detail": "health check returned no report"}
    status = report.get("status")
    if status != "ok":
        detail = report.get("detail") or f"health status is {status!r}"
        return 503, {**report, "status": "error", "detail": detail}
    return 200, report


class _PathOnlyAccessLogger(AbstractAccessLogger):
    """One debug line per request: method, path and status. Never the query string, which
    could carry anything a caller put there."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.debug(
            "admin: %s %s -> %d (%.1f ms)",
            request.method,
            request.path,
            response.status,
            time * 1000,
        )


def _bound_address(runner: web.AppRunner) -> tuple[str | None, int | None]:
    """The first listening socket's own address (a name like "localhost" may bind several)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return str(address[0]), int(address[1])
    return None, None

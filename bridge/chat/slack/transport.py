"""How Slack's events reach the Bolt app: Socket Mode (default) or signed HTTP requests."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bridge.chat.slack.client import api_error

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
# Slack's event and interaction payloads are small; refuse anything much larger unread.
MAX_BODY_BYTES = 1024 * 1024
# Seconds a shutdown waits for the connection or server to close.
_CLOSE_TIMEOUT = 5.0


class SlackStartError(Exception):
    """Slack refused to start (a bad token, a missing scope): the message says which."""


async def check_app_token(client: AsyncWebClient, app_token: str) -> None:
    """The SDK retries a refused Socket Mode connection forever: ask once ourselves, so a wrong
    app token stops the bridge with a clear message instead."""
    try:
        await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        raise SlackStartError(
            f"Slack refused the app token ({api_error(exc)}): check slack.app_token "
            "(SLACK_APP_TOKEN, starting with xapp-, with the connections:write scope)"
        ) from None


async def run_socket_mode(
    app: AsyncApp,
    *,
    app_token: str,
    started: Callable[[], None],
    ping_interval: float = 10.0,
    connected: Callable[[], None] = lambda: None,
) -> None:
    """Connect over Socket Mode and stay connected until cancelled.

    The SDK's client reconnects by itself when Slack closes the socket (or asks it to with a
    ``disconnect`` message) and when pings stop being answered. ``connected`` is called at
    every connection Slack greets (its ``hello``): the first, and each one after a loss, when
    events sent in between may be missing.
    """
    handler = AsyncSocketModeHandler(app, app_token=app_token, ping_interval=ping_interval)

    async def greeted(client: Any, message: dict[str, Any], raw: str | None) -> None:
        if message.get("type") == "hello":
            connected()

    handler.client.message_listeners.append(greeted)
    try:
        await handler.connect_async()
        log.info("Slack: connected over Socket Mode")
        started()
        await anyio.sleep_forever()
    finally:
        # Shielded, so a cancelled bridge still closes the socket; bounded, so it cannot hang.
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await handler.close_async()


async def run_http(
    app: AsyncApp,
    *,
    host: str,
    port: int,
    started: Callable[[], None],
    bound: Callable[[int], None],
) -> None:
    """Serve Slack's Events API and interactivity at ``POST /slack/events`` until cancelled.

    Bolt checks every request's signature with the signing secret (401 when it is wrong or
    stale) before any listener runs.
    """

    async def handle(request: web.Request) -> web.Response:
        response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    web_app = web.Application(client_max_size=MAX_BODY_BYTES)
    web_app.router.add_post(EVENTS_PATH, handle)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        actual = _bound_port(runner) or port
        bound(actual)
        log.info("Slack: serving events at http://%s:%d%s", host, actual, EVENTS_PATH)
        started()
        await anyio.sleep_forever()
    finally:
        with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
            await runner.cleanup()


def _bound_port(runner: web.AppRunner) -> int | None:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return None

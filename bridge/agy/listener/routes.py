"""The listener's ASGI app: the Host guard, the token lookup, hooks and MCP.

Nothing here logs a path: every path carries a session's token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from pydantic import ValidationError

from bridge.agy.listener.asgi import (
    JSON,
    BodyTooLarge,
    ClientGone,
    Receive,
    ResponseWatch,
    Scope,
    Send,
    header,
    read_body,
    respond,
)
from bridge.agy.listener.registration import Registration
from bridge.agy.wire import parse_hook_input

logger = logging.getLogger(__name__)

Lookup = Callable[[str], Registration | None]

_NOT_FOUND = b"not found\n"


class ListenerApp:
    """Routes ``/<token>/hook/<event>`` and ``/<token>/mcp/<server>``; everything else is 404."""

    def __init__(
        self,
        *,
        lookup: Lookup,
        allowed_hosts: frozenset[bytes],
        allowed_origins: frozenset[bytes],
        max_body_bytes: int,
    ) -> None:
        self._lookup = lookup
        self._allowed_hosts = allowed_hosts
        self._allowed_origins = allowed_origins
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off and websockets are disabled; nothing else is expected
        watch = ResponseWatch(send)
        try:
            await self._route(scope, receive, watch.send)
        except Exception:
            # uvicorn would log the failure itself; this keeps the message ours and path-free.
            logger.exception("listener request failed")
            if not watch.started:
                await respond(send, 500, b"internal error\n")

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A page a browser loaded from a rebound DNS name reaches us with its own Host; a
        # cross-origin fetch carries an Origin. Neither ever comes from agy or curl.
        if header(scope, b"host") not in self._allowed_hosts:
            await respond(send, 421, b"misdirected request\n")
            return
        origin = header(scope, b"origin")
        if origin is not None and origin not in self._allowed_origins:
            await respond(send, 403, b"forbidden\n")
            return
        parts = scope["path"].split("/")
        registration = self._lookup(parts[1]) if len(parts) == 4 and not parts[0] else None
        if registration is None:
            await respond(send, 404, _NOT_FOUND)
            return
        kind, name = parts[2], parts[3]
        if kind == "hook" and name:
            await self._hook(registration, name, scope, receive, send)
            return
        if kind == "mcp":
            await self._mcp(registration, name, scope, receive, send)
            return
        await respond(send, 404, _NOT_FOUND)

    async def _hook(
        self, registration: Registration, event: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if scope["method"] != "POST":
            await respond(send, 405, b"method not allowed\n", extra_headers=((b"allow", b"POST"),))
            return
        try:
            body = await read_body(scope, receive, self._max_body_bytes)
        except BodyTooLarge:
            # The rest of the body is never read: close the connection instead of draining it.
            await respond(
                send, 413, b"request body too large\n", extra_headers=((b"connection", b"close"),)
            )
            return
        except ClientGone:
            return
        try:
            hook_input = parse_hook_input(event, body)
        except ValidationError:
            logger.warning("%s hook of %r: the body is not hook input JSON", event, registration)
            await respond(send, 400, b"bad hook input\n")
            return
        if registration.closed:
            await respond(send, 404, _NOT_FOUND)
            return
        # Whether curl is still there to read the answer: it hangs up when it gives up.
        gone = anyio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        async def deliver(answer: bytes) -> bool:
            if gone.is_set():
                return False
            await respond(send, 200, answer, content_type=JSON)
            return True

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await registration.call_hook(event, hook_input, deliver)
            tg.cancel_scope.cancel()

    async def _mcp(
        self, registration: Registration, server: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        app = registration.mcp_app(server)
        if app is None:
            await respond(send, 404, _NOT_FOUND)
            return
        watch = ResponseWatch(send)
        try:
            await app(scope, receive, watch.send)
        except Exception:
            if watch.started:
                raise
            if registration.closed:
                # Closed while this request was being read: the manager has already stopped.
                await respond(send, 404, _NOT_FOUND)
                return
            logger.exception("MCP server %r of %r failed a request", server, registration)
            await respond(send, 500, b"internal error\n")

"""The few plain-ASGI pieces the listener needs: answers, a capped body reader, a header lookup.

The listener sits on the path of every model call (the PreInvocation hook), so it speaks ASGI
directly rather than through a framework's request and response objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"


class BodyTooLarge(Exception):
    """The request body is (or says it will be) over the cap."""


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


def header(scope: Scope, name: bytes) -> bytes | None:
    """The value of a request header (``name`` in lower case), or None when absent or repeated."""
    found: bytes | None = None
    for key, value in scope["headers"]:
        if key == name:
            if found is not None:
                return None  # two Host or Origin headers: refuse rather than pick one
            found = value
    return found


async def read_body(scope: Scope, receive: Receive, cap: int) -> bytes:
    """The whole request body, refused as soon as it is known to exceed ``cap`` bytes.

    The declared Content-Length is checked before reading anything, and the bytes actually
    received are counted too (a chunked body declares no length), so an oversized body is never
    held in memory.
    """
    declared = header(scope, b"content-length")
    if declared is not None:
        try:
            if int(declared) > cap:
                raise BodyTooLarge
        except ValueError:
            pass  # the HTTP parser has already refused a malformed length
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(
    send: Send,
    status: int,
    body: bytes = b"",
    *,
    content_type: bytes = TEXT,
    extra_headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode("ascii")),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ResponseWatch:
    """Wraps ``send`` to remember whether an answer has started, so a failure can still answer."""

    __slots__ = ("_send", "started")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)

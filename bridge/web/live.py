"""A thread's running turn as it happens, over Server-Sent Events: the text as it streams,
tool calls, and a word when the page should be read again (a turn began or ended, a request
was asked or settled, a message was queued or handed to the turn). The page itself is
rendered whole on the server; this only brings what came after."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable

import anyio
from sse_starlette.event import ServerSentEvent
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response

from bridge.core.live import LiveEvent, LiveTurn
from bridge.web.context import console_of
from bridge.web.pages import refused, seen_thread, signed_in

# Seconds between keep-alive comments (proxies close idle streams).
PING_SECONDS = 15


async def events(request: Request) -> Response:
    visit = await signed_in(request)
    if isinstance(visit, Response):
        return visit
    line = await seen_thread(request, visit, request.query_params.get("t", ""))
    if line is None:
        return refused(request, "No such thread, or not one of yours.", 404)
    console = console_of(request)
    scrub = console.pages.scrub

    hub, key = console.core.live, line.key
    # The stream ends with the session (a signed-out or expired person hears no more).
    remaining = max(0.0, visit.session.expires_at - time.time())

    async def stream() -> AsyncIterator[ServerSentEvent]:
        with hub.subscribe(key) as received, anyio.move_on_after(remaining):
            # First the turn so far, read in the same step as the subscription: nothing that
            # streamed between the page's rendering and this stream is missed.
            turn = hub.current(key)
            if turn is not None:
                yield _snapshot(turn, scrub)
            else:
                # No turn now: a page rendered with one running missed its end (it ended
                # before this stream opened) and reads itself again (console.js).
                yield ServerSentEvent("{}", event="idle")
            async for event in received:
                yield _sent(event, scrub)
                if event.kind == "end":
                    return

    return EventSourceResponse(stream(), ping=PING_SECONDS, headers={"Cache-Control": "no-store"})


def _snapshot(turn: LiveTurn, scrub: Callable[[str], str]) -> ServerSentEvent:
    tools = [{"name": t.name, "summary": scrub(t.summary), "state": t.state} for t in turn.tools]
    return ServerSentEvent(json.dumps({"text": scrub(turn.text), "tools": tools}), event="snapshot")


def _sent(event: LiveEvent, scrub: Callable[[str], str]) -> ServerSentEvent:
    if event.kind == "delta":
        data = {"text": scrub(event.text)}
    elif event.kind == "tool":
        data = {
            key: scrub(str(value)) if isinstance(value, str) else value
            for key, value in event.data.items()
        }
    else:
        data = {}
    return ServerSentEvent(json.dumps(data), event=event.kind)

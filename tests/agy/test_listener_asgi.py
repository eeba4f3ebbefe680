"""The listener's ASGI app called directly (no socket, no uvicorn): every answer it gives, byte
for byte, and the log lines of its failures (which must never carry a path: it holds a token).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from bridge.agy import wire
from bridge.agy.listener.asgi import BodyTooLarge, ClientGone, header, read_body, respond
from bridge.agy.listener.routes import ListenerApp

pytestmark = pytest.mark.anyio

HOST = b"127.0.0.1:4000"
TOKEN = "tok-secret-123"


class FakeRegistration:
    """What the routes ask of a registration: closed, mcp_app, call_hook."""

    def __init__(self, mcp: dict[str, Any] | None = None) -> None:
        self.closed = False
        self.mcp = mcp or {}
        self.hooks: list[tuple[str, wire.HookInput]] = []
        self.answer = b'{"ok": 1}'
        self.delivered: list[bool] = []

    def __repr__(self) -> str:
        return "<Registration session-1>"

    def mcp_app(self, server: str) -> Any:
        return self.mcp.get(server)

    async def call_hook(
        self, event: str, hook_input: wire.HookInput, deliver: Callable[[bytes], Awaitable[bool]]
    ) -> None:
        self.hooks.append((event, hook_input))
        self.delivered.append(await deliver(self.answer))


def app_for(registration: FakeRegistration | None, cap: int = 1000) -> ListenerApp:
    return ListenerApp(
        lookup=lambda token: registration if token == TOKEN else None,
        allowed_hosts=frozenset({HOST}),
        allowed_origins=frozenset({b"http://" + HOST}),
        max_body_bytes=cap,
    )


async def call(
    app: ListenerApp,
    path: str,
    *,
    method: str = "POST",
    body: bytes = b"{}",
    headers: list[tuple[bytes, bytes]] | None = None,
    messages: list[dict[str, Any]] | None = None,
    scope_type: str = "http",
) -> tuple[int | None, dict[bytes, bytes], bytes]:
    scope = {
        "type": scope_type,
        "method": method,
        "path": path,
        "headers": [(b"host", HOST)] if headers is None else headers,
    }
    incoming = list(
        messages
        if messages is not None
        else [{"type": "http.request", "body": body, "more_body": False}]
    )

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await anyio.sleep_forever()
        raise AssertionError

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    if not sent:
        return None, {}, b""
    start, *rest = sent
    assert start["type"] == "http.response.start"
    assert len(rest) == 1 and rest[0]["type"] == "http.response.body"
    return start["status"], dict(start["headers"]), rest[0]["body"]


async def test_only_http_is_answered() -> None:
    assert await call(app_for(FakeRegistration()), "/x", scope_type="lifespan") == (None, {}, b"")


async def test_a_foreign_host_or_origin_is_refused_before_the_token_is_looked_up() -> None:
    app = app_for(FakeRegistration())
    path = f"/{TOKEN}/hook/PreInvocation"
    assert (await call(app, path, headers=[(b"host", b"evil.example")]))[::2] == (
        421,
        b"misdirected request\n",
    )
    assert (await call(app, path, headers=[]))[0] == 421
    two_hosts = [(b"host", HOST), (b"host", HOST)]
    assert (await call(app, path, headers=two_hosts))[0] == 421, "two Host headers: refused"
    evil = [(b"host", HOST), (b"origin", b"http://evil.example")]
    assert (await call(app, path, headers=evil))[::2] == (403, b"forbidden\n")
    ours = [(b"host", HOST), (b"origin", b"http://" + HOST)]
    assert (await call(app, path, headers=ours))[0] == 200


@pytest.mark.parametrize(
    "path",
    [
        "/wrong-token/hook/PreInvocation",
        f"/{TOKEN}/hook/",
        f"/{TOKEN}/other/PreInvocation",
        f"/{TOKEN}/hook/PreInvocation/extra",
        f"/{TOKEN}/hook",
        f"{TOKEN}/hook/PreInvocation",
        f"/{TOKEN}/mcp/chat",
    ],
)
async def test_anything_but_a_known_tokens_hook_or_server_is_404(path: str) -> None:
    status, headers, body = await call(app_for(FakeRegistration()), path)
    assert (status, body) == (404, b"not found\n")
    assert headers[b"content-type"] == b"text/plain; charset=utf-8"
    assert headers[b"content-length"] == b"10"


async def test_a_hook_call_is_answered_with_the_hooks_json() -> None:
    registration = FakeRegistration()
    body = json.dumps({"conversationId": "c-1"}).encode()
    status, headers, answer = await call(
        app_for(registration), f"/{TOKEN}/hook/PreInvocation", body=body
    )
    assert (status, answer) == (200, b'{"ok": 1}')
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"content-length"] == str(len(answer)).encode()
    [(event, hook_input)] = registration.hooks
    assert event == "PreInvocation" and hook_input.conversation_id == "c-1"
    assert registration.delivered == [True]


async def test_a_hook_call_in_parts_is_read_whole() -> None:
    registration = FakeRegistration()
    parts = [
        {"type": "http.request", "body": b'{"conversa', "more_body": True},
        {"type": "http.request", "body": b'tionId": "c-2"}'},
    ]
    status, _, _ = await call(app_for(registration), f"/{TOKEN}/hook/Stop", messages=parts)
    assert status == 200 and registration.hooks[0][1].conversation_id == "c-2"


async def test_a_hook_is_posted_only() -> None:
    registration = FakeRegistration()
    status, headers, body = await call(
        app_for(registration), f"/{TOKEN}/hook/PreInvocation", method="GET"
    )
    assert (status, body) == (405, b"method not allowed\n")
    assert headers[b"allow"] == b"POST"
    assert registration.hooks == []


async def test_an_oversized_hook_body_is_refused_and_the_connection_closed() -> None:
    registration = FakeRegistration()
    app = app_for(registration, cap=10)
    status, headers, body = await call(app, f"/{TOKEN}/hook/PreInvocation", body=b"x" * 11)
    assert (status, body) == (413, b"request body too large\n")
    assert headers[b"connection"] == b"close"
    status, _, _ = await call(
        app,
        f"/{TOKEN}/hook/PreInvocation",
        body=b"{}",
        headers=[(b"host", HOST), (b"content-length", b"11")],
    )
    assert status == 413, "the declared length alone is enough"
    assert (await call(app, f"/{TOKEN}/hook/PreInvocation", body=b"{}" + b" " * 8))[0] == 200
    assert len(registration.hooks) == 1


async def test_a_caller_gone_before_its_body_is_complete_gets_nothing() -> None:
    registration = FakeRegistration()
    parts = [
        {"type": "http.request", "body": b"{", "more_body": True},
        {"type": "http.disconnect"},
    ]
    assert await call(app_for(registration), f"/{TOKEN}/hook/X", messages=parts) == (
        None,
        {},
        b"",
    )
    assert registration.hooks == []


async def test_a_body_that_is_not_hook_input_is_400_and_logged_without_the_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registration = FakeRegistration()
    status, _, body = await call(app_for(registration), f"/{TOKEN}/hook/PreInvocation", body=b"[")
    assert (status, body) == (400, b"bad hook input\n")
    [record] = [r for r in caplog.records if r.name == "bridge.agy.listener.routes"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "PreInvocation hook of <Registration session-1>: the body is not hook input JSON"
    )
    assert TOKEN not in caplog.text
    assert registration.hooks == []


async def test_a_hook_call_to_a_closed_registration_is_404() -> None:
    registration = FakeRegistration()
    registration.closed = True
    status, _, body = await call(app_for(registration), f"/{TOKEN}/hook/PreInvocation")
    assert (status, body) == (404, b"not found\n")
    assert registration.hooks == []


async def test_an_answer_for_a_caller_that_hung_up_is_not_sent() -> None:
    registration = FakeRegistration()
    parts = [{"type": "http.request", "body": b"{}"}, {"type": "http.disconnect"}]

    async def hook_after_hangup(event: str, hook_input: Any, deliver: Any) -> None:
        await anyio.lowlevel.checkpoint()  # the watcher reads the disconnect first
        await anyio.lowlevel.checkpoint()
        registration.delivered.append(await deliver(b"{}"))

    registration.call_hook = hook_after_hangup  # type: ignore[method-assign]
    assert await call(app_for(registration), f"/{TOKEN}/hook/X", messages=parts) == (
        None,
        {},
        b"",
    )
    assert registration.delivered == [False]


async def test_mcp_requests_go_to_the_servers_app() -> None:
    seen: list[str] = []

    async def server(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])
        await respond(send, 202, b"accepted")

    app = app_for(FakeRegistration({"chat": server}))
    assert (await call(app, f"/{TOKEN}/mcp/chat"))[::2] == (202, b"accepted")
    assert seen == [f"/{TOKEN}/mcp/chat"]
    assert (await call(app, f"/{TOKEN}/mcp/other"))[::2] == (404, b"not found\n")


async def test_an_mcp_server_failing_before_it_answers_is_500_and_logged_without_the_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("server bug")

    registration = FakeRegistration({"chat": broken})
    status, _, body = await call(app_for(registration), f"/{TOKEN}/mcp/chat")
    assert (status, body) == (500, b"internal error\n")
    [record] = [r for r in caplog.records if r.name == "bridge.agy.listener.routes"]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage() == "MCP server 'chat' of <Registration session-1> failed a request"
    assert TOKEN not in caplog.text


async def test_an_mcp_request_cut_by_its_registration_closing_is_404(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registration = FakeRegistration()

    async def closing(scope: Any, receive: Any, send: Any) -> None:
        registration.closed = True
        raise RuntimeError("task group closed")

    registration.mcp = {"chat": closing}
    status, _, body = await call(app_for(registration), f"/{TOKEN}/mcp/chat")
    assert (status, body) == (404, b"not found\n")
    assert not [r for r in caplog.records if r.name == "bridge.agy.listener.routes"]


async def test_a_failure_after_the_answer_started_is_logged_and_not_answered_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def half(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial"})
        raise RuntimeError("after the answer")

    status, _, body = await call(app_for(FakeRegistration({"chat": half})), f"/{TOKEN}/mcp/chat")
    assert (status, body) == (200, b"partial")
    [record] = [r for r in caplog.records if r.name == "bridge.agy.listener.routes"]
    assert record.getMessage() == "listener request failed" and record.exc_info is not None
    assert TOKEN not in caplog.text


def test_a_header_is_found_once_or_not_at_all() -> None:
    scope = {"headers": [(b"a", b"1"), (b"b", b"2")]}
    assert header(scope, b"a") == b"1" and header(scope, b"c") is None
    assert header({"headers": [(b"a", b"1"), (b"a", b"1")]}, b"a") is None


async def test_read_body_counts_what_arrives_and_what_is_declared() -> None:
    def feeder(*messages: dict[str, Any]) -> Any:
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            return queue.pop(0)

        return receive

    def scope(length: bytes | None = None) -> dict[str, Any]:
        return {"headers": [] if length is None else [(b"content-length", length)]}

    one = {"type": "http.request", "body": b"12345"}
    assert await read_body(scope(), feeder(one), 5) == b"12345"
    assert await read_body(scope(b"5"), feeder(one), 5) == b"12345"
    assert await read_body(scope(b"junk"), feeder(one), 5) == b"12345"
    with pytest.raises(BodyTooLarge):
        await read_body(scope(b"6"), feeder(one), 5)
    with pytest.raises(BodyTooLarge):
        await read_body(scope(), feeder({"type": "http.request", "body": b"123456"}), 5)
    chunks = (
        {"type": "http.request", "body": b"123", "more_body": True},
        {"type": "http.request", "body": b"456", "more_body": True},
    )
    with pytest.raises(BodyTooLarge):
        await read_body(scope(), feeder(*chunks), 5)
    assert await read_body(scope(), feeder({"type": "http.request"}), 5) == b""
    with pytest.raises(ClientGone):
        await read_body(scope(), feeder({"type": "http.disconnect"}), 5)

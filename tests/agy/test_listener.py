"""The loopback listener: hook round trips, routing, limits, Host checks and lifecycle.

Real HTTP on 127.0.0.1 with aiohttp (and raw sockets where a client library would be too polite).
MCP is covered in test_listener_mcp.py, the curl command in test_listener_hook_command.py.
"""

from __future__ import annotations

import json
import logging
import secrets
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from yarl import URL

from bridge.agy.listener import Listener, Registration, open_listener
from bridge.agy.wire import HookInput, HookReply, InjectedStep, PreToolUseInput, ToolDecision

HOOK_INPUT = {
    "conversationId": "conv-1",
    "workspacePaths": ["/work/a", "/work/b"],
    "transcriptPath": "/tmp/t.jsonl",
    "artifactDirectoryPath": "/tmp/art",
    "modelName": "gemini-x",
    "invocationNum": 3,
    "initialNumSteps": 7,
    "somethingNewerBuildsSend": {"x": 1},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Recorder:
    """A hook function that records its calls and answers a reply chosen by the test."""

    def __init__(self, reply: HookReply | None = None) -> None:
        self.calls: list[tuple[str, HookInput]] = []
        self.reply = reply or HookReply()

    async def __call__(self, event: str, hook_input: HookInput) -> HookReply:
        self.calls.append((event, hook_input))
        return self.reply


def token_of(registration: Registration) -> str:
    return registration.hook_url("X").split("/")[3]


def base_of(listener: Listener) -> str:
    return f"http://127.0.0.1:{listener.port}"


@asynccontextmanager
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(
    session: aiohttp.ClientSession,
    url: str | URL,
    body: bytes | AsyncIterator[bytes],
    **kwargs: Any,
) -> tuple[int, bytes, aiohttp.ClientResponse]:
    async with session.post(url, data=body, **kwargs) as response:
        return response.status, await response.read(), response


async def raw_exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` and read the answer's status line and headers (the body may never end)."""
    # A guard against a hang, not a speed check: the answer must not wait for unsent bytes.
    with anyio.fail_after(20):
        return await _raw_exchange(port, request)


async def _raw_exchange(port: int, request: bytes) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        received = b""
        while b"\r\n\r\n" not in received:
            try:
                received += await stream.receive()
            except anyio.EndOfStream:
                break
        return received


# --- hooks ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_hook_round_trip_parses_input_and_passes_the_reply_through() -> None:
    reply = HookReply(inject_steps=[InjectedStep(user_message="Ana: use the staging db")])
    hook = Recorder(reply)
    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        url = registration.hook_url("PreInvocation")
        status, body, response = await post(http, url, json.dumps(HOOK_INPUT).encode())

    assert status == 200
    assert response.headers["Content-Type"] == "application/json"
    assert body == reply.to_json()
    # camelCase keys and nothing else: agy drops a reply with any unknown key.
    assert json.loads(body) == {"injectSteps": [{"userMessage": "Ana: use the staging db"}]}
    [(event, hook_input)] = hook.calls
    assert event == "PreInvocation"
    assert hook_input.conversation_id == "conv-1"
    assert hook_input.workspace_paths == ["/work/a", "/work/b"]
    assert hook_input.invocation_num == 3
    assert hook_input.initial_num_steps == 7
    assert hook_input.model_name == "gemini-x"


@pytest.mark.anyio
async def test_an_empty_reply_is_exactly_empty_braces_and_the_event_name_is_passed() -> None:
    hook = Recorder(HookReply())
    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        status, body, _ = await post(http, registration.hook_url("Stop"), b'{"conversationId":"c"}')
    assert (status, body) == (200, b"{}")
    assert [event for event, _ in hook.calls] == ["Stop"]


@pytest.mark.anyio
async def test_a_hook_that_raises_is_logged_without_the_token_and_answered_empty(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(event: str, hook_input: HookInput) -> HookReply:
        raise RuntimeError("store is locked")

    caplog.set_level(logging.DEBUG)
    async with open_listener() as listener, client() as http:
        registration = await listener.register(broken)
        status, body, _ = await post(http, registration.hook_url("PreInvocation"), b"{}")
        token = token_of(registration)

    assert (status, body) == (200, b"{}")
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert failures, "the failing hook must be logged"
    assert "store is locked" in caplog.text  # the traceback is kept
    assert token not in caplog.text


@pytest.mark.anyio
@pytest.mark.parametrize("body", [b"{not json", b"", b"[1, 2]", b'{"workspacePaths": 5}'])
async def test_a_body_that_is_not_hook_input_is_400_and_never_reaches_the_hook(body: bytes) -> None:
    hook = Recorder()
    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        status, _, _ = await post(http, registration.hook_url("PreInvocation"), body)
    assert status == 400
    assert hook.calls == []


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "OPTIONS"])
async def test_a_hook_path_takes_post_only(method: str) -> None:
    hook = Recorder()
    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        async with http.request(method, registration.hook_url("PreInvocation")) as response:
            status, allow = response.status, response.headers.get("Allow")
    assert (status, allow) == (405, "POST")
    assert hook.calls == []


# --- routing: anything that is not exactly right is the same 404 ---------------------------


def near_misses(token: str, base: str) -> list[str]:
    flipped_last = token[:-1] + ("A" if token[-1] != "A" else "B")
    flipped_first = ("A" if token[0] != "A" else "B") + token[1:]
    return [
        f"{base}/{secrets.token_urlsafe(32)}/hook/PreInvocation",  # wrong token
        f"{base}/hook/PreInvocation",  # missing token
        f"{base}//hook/PreInvocation",  # empty token
        f"{base}/{flipped_last}/hook/PreInvocation",  # one character changed
        f"{base}/{flipped_first}/hook/PreInvocation",
        f"{base}/{token[:-1]}/hook/PreInvocation",  # one character short
        f"{base}/{token}x/hook/PreInvocation",  # one character long
        f"{base}/{token}/mcp/nope",  # unknown server
        f"{base}/{token}/mcp/",
        f"{base}/{token}/other/PreInvocation",  # unknown kind
        f"{base}/{token}/hook/",  # no event
        f"{base}/{token}/hook/PreInvocation/more",
        f"{base}/{token}",
        f"{base}/",
        f"{base}/favicon.ico",
    ]


@pytest.mark.anyio
async def test_wrong_missing_or_almost_right_paths_are_all_the_same_404() -> None:
    hook = Recorder()
    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        answers = set()
        payload = json.dumps(HOOK_INPUT).encode()
        for url in near_misses(token_of(registration), base_of(listener)):
            status, body, _ = await post(http, URL(url, encoded=True), payload)
            assert status == 404, url
            answers.add(body)
    assert len(answers) == 1, "a 404 must not hint at which part was wrong"
    assert hook.calls == []


# --- body cap ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_body_at_the_cap_is_accepted() -> None:
    hook = Recorder()
    async with open_listener(max_body_bytes=1024) as listener, client() as http:
        registration = await listener.register(hook)
        body = b'{"conversationId":"c"}'.ljust(1024)
        status, _, _ = await post(http, registration.hook_url("PreInvocation"), body)
    assert status == 200
    assert len(hook.calls) == 1


@pytest.mark.anyio
async def test_a_declared_length_over_the_cap_is_413_before_the_body_is_sent() -> None:
    hook = Recorder()
    async with open_listener(max_body_bytes=1024) as listener:
        registration = await listener.register(hook)
        path = registration.hook_url("PreInvocation").split(str(listener.port), 1)[1]
        # 100 MiB announced, 10 bytes sent: the answer must come without waiting for the rest.
        request = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{listener.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {100 << 20}\r\n\r\n"
            '{"conver'
        ).encode()
        answer = await raw_exchange(listener.port, request)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert hook.calls == []


@pytest.mark.anyio
async def test_a_chunked_body_over_the_cap_is_413_as_soon_as_it_is_counted() -> None:
    hook = Recorder()
    async with open_listener(max_body_bytes=1024) as listener:
        registration = await listener.register(hook)
        path = registration.hook_url("PreInvocation").split(str(listener.port), 1)[1]
        chunk = b" " * 600
        # No length declared and no final chunk: only counting the bytes can refuse this.
        request = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{listener.port}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        ).encode() + (b"258\r\n" + chunk + b"\r\n") * 2
        answer = await raw_exchange(listener.port, request)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert hook.calls == []


@pytest.mark.anyio
async def test_a_huge_streamed_body_is_refused_without_reading_it_all() -> None:
    hook = Recorder()
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        block = b" " * 65536
        while sent < (512 << 20):  # would be 512 MiB if the listener kept reading
            sent += len(block)
            yield block

    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        try:
            status, _, _ = await post(http, registration.hook_url("PreInvocation"), endless())
        except aiohttp.ClientError:
            status = 413  # the server may close while the client is still writing
    assert status == 413
    assert sent < (64 << 20), "the listener kept reading far past its 1 MiB cap"
    assert hook.calls == []


# --- DNS rebinding and binding -------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("headers", "statuses"),
    [
        ({"Host": "evil.example"}, {421}),
        ({"Host": "evil.example:{port}"}, {421}),
        ({"Host": "127.0.0.1:1"}, {421}),
        ({"Host": "localhost:{port}", "Origin": "http://evil.example"}, {403}),
    ],
)
async def test_a_foreign_host_or_origin_is_refused_on_every_path(
    headers: dict[str, str], statuses: set[int]
) -> None:
    hook = Recorder()
    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        sent = {k: v.format(port=listener.port) for k, v in headers.items()}
        for url in (registration.hook_url("PreInvocation"), f"{base_of(listener)}/nothing"):
            status, _, _ = await post(http, url, b"{}", headers=sent)
            assert status in statuses
    assert hook.calls == []


@pytest.mark.anyio
async def test_localhost_is_an_accepted_host() -> None:
    hook = Recorder()
    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        headers = {"Host": f"localhost:{listener.port}"}
        status, body, _ = await post(http, registration.hook_url("Stop"), b"{}", headers=headers)
    assert (status, body) == (200, b"{}")


def listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as the kernel prints them) of sockets listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.append(address)
    return found


@pytest.mark.anyio
async def test_the_listener_binds_loopback_only() -> None:
    if not Path("/proc/net/tcp").exists():
        pytest.skip("needs Linux /proc/net/tcp")
    async with open_listener() as listener:
        registration = await listener.register(Recorder())
        addresses = listening_addresses(listener.port)
        url = registration.hook_url("PreInvocation")
    assert addresses == ["0100007F"]  # 127.0.0.1, little-endian hex
    assert url.startswith(f"http://127.0.0.1:{listener.port}/")


@pytest.mark.anyio
async def test_a_non_loopback_host_is_refused() -> None:
    with pytest.raises(ValueError, match="loopback"):
        async with open_listener(host="0.0.0.0"):
            pass


# --- registrations -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_two_registrations_are_isolated() -> None:
    first, second = Recorder(), Recorder()
    async with open_listener() as listener, client() as http:
        a = await listener.register(first)
        b = await listener.register(second)
        assert token_of(a) != token_of(b)
        await post(http, a.hook_url("PreInvocation"), b'{"conversationId":"for-a"}')
        await post(http, b.hook_url("Stop"), b'{"conversationId":"for-b"}')
        await a.close()
        status_a, _, _ = await post(http, a.hook_url("Stop"), b"{}")
        status_b, _, _ = await post(http, b.hook_url("Stop"), b'{"conversationId":"b-again"}')
    assert [(e, i.conversation_id) for e, i in first.calls] == [("PreInvocation", "for-a")]
    assert [(e, i.conversation_id) for e, i in second.calls] == [
        ("Stop", "for-b"),
        ("Stop", "b-again"),
    ]
    assert (status_a, status_b) == (404, 200)


@pytest.mark.anyio
async def test_closing_a_registration_makes_its_urls_404_and_is_idempotent() -> None:
    hook = Recorder()
    async with open_listener() as listener, client() as http:
        registration = await listener.register(hook)
        url = registration.hook_url("PreInvocation")
        assert (await post(http, url, b"{}"))[0] == 200
        async with anyio.create_task_group() as tg:  # concurrent closes both return
            tg.start_soon(registration.close)
            tg.start_soon(registration.close)
        await registration.close()
        assert (await post(http, url, b"{}"))[0] == 404
    assert len(hook.calls) == 1
    assert "closed" in repr(registration)


@pytest.mark.anyio
async def test_a_hook_call_in_flight_answers_empty_when_its_registration_closes() -> None:
    entered = anyio.Event()

    async def stuck(event: str, hook_input: HookInput) -> HookReply:
        entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    answers: list[tuple[int, bytes]] = []
    async with open_listener() as listener, client() as http:
        registration = await listener.register(stuck)

        async def call() -> None:
            status, body, _ = await post(http, registration.hook_url("PreInvocation"), b"{}")
            answers.append((status, body))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await entered.wait()
            await registration.close()
    assert answers == [(200, b"{}")]


@pytest.mark.anyio
async def test_repr_and_str_never_show_the_token() -> None:
    async with open_listener() as listener:
        registration = await listener.register(Recorder())
        token = token_of(registration)
        shown = [repr(registration), str(registration), repr(listener), str(listener)]
    assert len(token) >= 43  # 32 random bytes, base64url
    assert all(token not in text for text in shown)


@pytest.mark.anyio
async def test_event_names_that_would_change_the_path_are_refused() -> None:
    async with open_listener() as listener:
        registration = await listener.register(Recorder())
        for bad in ("", "a/b", "../x", "a b", "a?b"):
            with pytest.raises(ValueError):
                registration.hook_url(bad)
        with pytest.raises(KeyError):
            registration.mcp_url("not-registered")


# --- logs ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_no_token_reaches_any_log_record_even_at_trace_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def flaky(event: str, hook_input: HookInput) -> HookReply:
        if event == "Stop":
            raise ValueError("boom")
        return HookReply()

    # uvicorn's access logger does not propagate: listen to it directly as well.
    access = logging.getLogger("uvicorn.access")
    access.addHandler(caplog.handler)
    caplog.set_level(5)  # uvicorn's TRACE, below DEBUG
    try:
        async with open_listener(max_body_bytes=64) as listener, client() as http:
            registration = await listener.register(flaky)
            token = token_of(registration)
            await post(http, registration.hook_url("PreInvocation"), b"{}")
            await post(http, registration.hook_url("Stop"), b"{}")
            await post(http, registration.hook_url("PreInvocation"), b"not json")
            await post(http, registration.hook_url("PreInvocation"), b" " * 100)
            await post(http, registration.hook_url("PreInvocation"), b"{}", headers={"Host": "x"})
            await post(http, f"{base_of(listener)}/{token}/nope/x", b"{}")
            async with http.get(registration.hook_url("PreInvocation")) as response:
                await response.read()
            await registration.close()
            await post(http, registration.hook_url("PreInvocation"), b"{}")
    finally:
        access.removeHandler(caplog.handler)

    assert len(caplog.records) > 5, "the scenario must have produced log records to check"
    assert "boom" in caplog.text
    for record in caplog.records:
        assert token not in record.getMessage(), record.name
        assert token not in (record.exc_text or ""), record.name
    assert token not in caplog.text


# --- shutdown ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_listener_stops_cleanly_and_closes_its_port() -> None:
    async with open_listener() as listener:
        await listener.register(Recorder())
        await listener.register(Recorder())
        port = listener.port
    with pytest.raises(OSError):
        await anyio.connect_tcp("127.0.0.1", port)
    with pytest.raises(RuntimeError):
        await listener.register(Recorder())


@pytest.mark.anyio
async def test_uvicorn_leaves_the_signal_handlers_to_the_bridge() -> None:
    def ours(signum: int, frame: object) -> None:
        raise AssertionError("not expected to run")

    before = {sig: signal.signal(sig, ours) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        async with open_listener() as listener, client() as http:
            registration = await listener.register(Recorder())
            # A served request proves uvicorn is past its start-up, where it would install them.
            assert (await post(http, registration.hook_url("Stop"), b"{}"))[0] == 200
            during = {sig: signal.getsignal(sig) for sig in before}
        after = {sig: signal.getsignal(sig) for sig in before}
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert during == after == {signal.SIGINT: ours, signal.SIGTERM: ours}


# --- answering in time, and answers agy cannot have read ----------------------------------


class Undelivered:
    """An ``on_undelivered`` callback that records what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.called = anyio.Event()

    async def __call__(self, event: str, answer: Any) -> None:
        self.calls.append((event, answer))
        self.called.set()


@pytest.mark.anyio
async def test_a_slow_hook_is_answered_at_the_deadline_and_its_late_answer_reported() -> None:
    release = anyio.Event()
    late = HookReply(inject_steps=[InjectedStep(user_message="Ana: late")])

    async def slow(event: str, hook_input: HookInput) -> HookReply:
        await release.wait()
        return late

    undelivered = Undelivered()
    async with open_listener() as listener, client() as http:
        registration = await listener.register(
            slow, answer_within={"PreInvocation": 0.3}, on_undelivered=undelivered
        )
        assert registration.answer_within("PreInvocation") == 0.3
        url = registration.hook_url("PreInvocation")
        status, body, _ = await post(http, url, json.dumps(HOOK_INPUT).encode())
        # The answer came while the hook function was still waiting: nothing to inject.
        assert (status, body, release.is_set()) == (200, b"{}", False)
        assert undelivered.calls == []
        release.set()
        await undelivered.called.wait()
    assert undelivered.calls == [("PreInvocation", late)]


@pytest.mark.anyio
async def test_a_late_empty_answer_is_not_reported() -> None:
    release, done = anyio.Event(), anyio.Event()

    async def slow(event: str, hook_input: HookInput) -> HookReply:
        await release.wait()
        done.set()
        return HookReply()

    undelivered = Undelivered()
    async with open_listener() as listener, client() as http:
        registration = await listener.register(
            slow, answer_within={"PreInvocation": 0.2}, on_undelivered=undelivered
        )
        status, body, _ = await post(http, registration.hook_url("PreInvocation"), b"{}")
        release.set()
        await done.wait()
        await registration.close()  # waits for nothing in flight: the call has ended
    assert (status, body, undelivered.calls) == (200, b"{}", [])


@pytest.mark.anyio
async def test_an_answer_whose_caller_has_gone_is_reported() -> None:
    """curl gave up (or agy went away) before the answer was ready: it cannot be read."""
    reply = HookReply(inject_steps=[InjectedStep(user_message="Bo: hi")])
    undelivered = Undelivered()
    sent: list[bytes] = []

    async def hook(event: str, hook_input: HookInput) -> HookReply:
        return reply

    async def caller_gone(body: bytes) -> bool:
        sent.append(body)
        return False

    async with open_listener() as listener:
        registration = await listener.register(hook, on_undelivered=undelivered)
        await registration.call_hook("PreInvocation", HookInput(), caller_gone)
    assert sent == [reply.to_json()]
    assert undelivered.calls == [("PreInvocation", reply)]


@pytest.mark.anyio
async def test_a_failing_on_undelivered_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def hook(event: str, hook_input: HookInput) -> HookReply:
        return HookReply(inject_steps=[InjectedStep(user_message="x")])

    async def broken(event: str, answer: Any) -> None:
        raise RuntimeError("store is gone")

    async def caller_gone(body: bytes) -> bool:
        return False

    async with open_listener() as listener:
        registration = await listener.register(hook, on_undelivered=broken)
        with caplog.at_level(logging.ERROR):
            await registration.call_hook("PreInvocation", HookInput(), caller_gone)
    assert any("on_undelivered" in record.getMessage() for record in caplog.records)


# --- PreToolUse ----------------------------------------------------------------------------

TOOL_INPUT = {
    **{k: v for k, v in HOOK_INPUT.items() if k not in ("invocationNum", "initialNumSteps")},
    "toolCall": {"name": "run_command", "args": {"CommandLine": "rm -rf /tmp/x", "Cwd": "/w"}},
    "stepIdx": 12,
}


@pytest.mark.anyio
async def test_pre_tool_use_reaches_the_hook_with_the_tool_call_and_answers_a_decision() -> None:
    calls: list[HookInput] = []

    async def decide(event: str, hook_input: HookInput) -> ToolDecision:
        calls.append(hook_input)
        return ToolDecision(decision="deny", reason="denied by Bob: use the staging db")

    async with open_listener() as listener, client() as http:
        registration = await listener.register(decide)
        url = registration.hook_url("PreToolUse")
        status, body, _ = await post(http, url, json.dumps(TOOL_INPUT).encode())
    assert status == 200
    assert json.loads(body) == {"decision": "deny", "reason": "denied by Bob: use the staging db"}
    [hook_input] = calls
    assert isinstance(hook_input, PreToolUseInput)
    assert hook_input.tool_call.name == "run_command"
    assert hook_input.tool_call.args["CommandLine"] == "rm -rf /tmp/x"
    assert (hook_input.step_idx, hook_input.conversation_id) == (12, "conv-1")


@pytest.mark.anyio
async def test_a_pre_tool_use_hook_that_fails_or_is_late_answers_deny_never_empty() -> None:
    release = anyio.Event()

    async def failing(event: str, hook_input: HookInput) -> ToolDecision:
        raise RuntimeError("boom")

    async def late(event: str, hook_input: HookInput) -> ToolDecision:
        await release.wait()
        return ToolDecision(decision="allow")

    undelivered = Undelivered()
    async with open_listener() as listener, client() as http:
        broken = await listener.register(failing)
        slow = await listener.register(
            late, answer_within={"PreToolUse": 0.2}, on_undelivered=undelivered
        )
        body = json.dumps(TOOL_INPUT).encode()
        _, failed, _ = await post(http, broken.hook_url("PreToolUse"), body)
        _, timed_out, _ = await post(http, slow.hook_url("PreToolUse"), body)
        release.set()
        await undelivered.called.wait()
    assert json.loads(failed)["decision"] == "deny" and "could not answer" in failed.decode()
    assert json.loads(timed_out)["decision"] == "deny" and "too long" in timed_out.decode()
    assert undelivered.calls == [("PreToolUse", ToolDecision(decision="allow"))]

"""One agy session's place on the listener: its token, its hook function, its MCP servers."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from bridge.agy.listener.asgi import ASGIApp
from bridge.agy.listener.hook_command import DEFAULT_HOOK_TIMEOUT_SECONDS, answer_deadline
from bridge.agy.wire import HookAnswer, HookInput, fallback_answer, is_empty_answer

if TYPE_CHECKING:  # the MCP SDK is imported when a session serves MCP (serving.py)
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

logger = logging.getLogger(__name__)

HookFunc = Callable[[str, HookInput], Awaitable[HookAnswer]]
"""``await hook(event, hook_input)`` answers one hook call of agy (a ``HookReply``, or a
``ToolDecision`` for ``PreToolUse``, whose input is a ``PreToolUseInput``)."""

UndeliveredFunc = Callable[[str, HookAnswer], Awaitable[None]]
"""``await on_undelivered(event, answer)``: this answer of the hook function could not have
been read by agy (it came after the listener's deadline, or the caller had gone), so what it
handed over (injected messages, a decision) must be treated as never delivered."""

Deliver = Callable[[bytes], Awaitable[bool]]
"""Sends one answer body; False when the caller is known to be gone (it cannot be read)."""

# Event and server names become one path segment each: no slash, nothing to escape.
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

# The listener's deadline for events given no deadline of their own: agy's default timeout.
DEFAULT_ANSWER_SECONDS = answer_deadline(DEFAULT_HOOK_TIMEOUT_SECONDS)


def check_name(kind: str, name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(f"{kind} name {name!r} must be 1-64 of A-Z a-z 0-9 _ . -")
    return name


def token_key(token: str) -> bytes:
    """The table key for a token. Hashing first means the dict lookup, whose timing depends on
    the key's bytes, never compares the secret itself; the match is confirmed in constant time."""
    return hashlib.sha256(token.encode("utf-8", "replace")).digest()


@dataclass(frozen=True, slots=True)
class McpServing:
    """One running session manager and what it takes to stop it."""

    manager: StreamableHTTPSessionManager
    scope: anyio.CancelScope
    stopped: anyio.Event


class LazyMcp:
    """One MCP server of a session, started by the first request to it: most agy processes
    never call one (the simulator calls a server only for a tool call, real agy may list its
    tools at start), and the MCP SDK is about half of what a bridge imports, so a session whose
    agy calls no server never loads it."""

    def __init__(self, start: Callable[[], Awaitable[McpServing]]) -> None:
        self._start = start
        self._lock = anyio.Lock()
        self._serving: McpServing | None = None
        self._stopped = False

    @property
    def started(self) -> bool:
        return self._serving is not None

    async def handle_request(self, scope: Any, receive: Any, send: Any) -> None:
        async with self._lock:  # two first requests at once start one manager
            if self._stopped:
                raise RuntimeError("the session's MCP servers are stopped")
            if self._serving is None:
                self._serving = await self._start()
            serving = self._serving
        await serving.manager.handle_request(scope, receive, send)

    async def stop(self) -> None:
        async with self._lock:  # a start under way ends first, then is stopped
            self._stopped = True
            serving = self._serving
        if serving is not None:
            serving.scope.cancel()
            await serving.stopped.wait()


class Registration:
    """Given to the agy session by :meth:`Listener.register`; all its URLs carry its token."""

    def __init__(
        self,
        *,
        label: str,
        token: str,
        base_url: str,
        hook: HookFunc,
        mcp: Mapping[str, LazyMcp],
        forget: Callable[[Registration], None],
        answer_within: Mapping[str, float] | None = None,
        on_undelivered: UndeliveredFunc | None = None,
    ) -> None:
        self.label = label  # for logs: never the token
        self._token = token
        self._token_bytes = token.encode("ascii")
        self.key = token_key(token)
        self._base_url = base_url
        self._hook = hook
        self._mcp = dict(mcp)
        self._forget = forget
        self._answer_within = dict(answer_within or {})
        self._on_undelivered = on_undelivered
        self._hook_scopes: set[anyio.CancelScope] = set()
        self._closing = False
        self._closed = anyio.Event()

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open"
        return f"<Registration {self.label} {state} mcp={sorted(self._mcp)}>"

    @property
    def closed(self) -> bool:
        return self._closing

    def matches(self, candidate: bytes) -> bool:
        return hmac.compare_digest(self._token_bytes, candidate)

    def hook_url(self, event: str) -> str:
        """``http://127.0.0.1:PORT/<token>/hook/<event>``."""
        return f"{self._base_url}/{self._token}/hook/{check_name('hook event', event)}"

    def mcp_url(self, server: str) -> str:
        """``http://127.0.0.1:PORT/<token>/mcp/<server>``, for a server given at registration."""
        if server not in self._mcp:
            raise KeyError(f"no MCP server {server!r} in {self!r}")
        return f"{self._base_url}/{self._token}/mcp/{server}"

    def mcp_app(self, server: str) -> ASGIApp | None:
        serving = self._mcp.get(server)
        return None if serving is None or self._closing else serving.handle_request

    def answer_within(self, event: str) -> float:
        """Seconds the listener gives the hook function before it answers the fallback."""
        return self._answer_within.get(event, DEFAULT_ANSWER_SECONDS)

    async def call_hook(self, event: str, hook_input: HookInput, deliver: Deliver) -> None:
        """Answer one hook call through ``deliver``, always within :meth:`answer_within`.

        The hook function's answer is delivered when it comes in time. When it fails, or the
        session closes, the fallback is delivered (``{}``; a ``deny`` for a tool call): a
        failing hook must not fail agy's model call. When it is late, the fallback is
        delivered at the deadline, so curl (whose --max-time is later) always reads an answer,
        and the function is left to finish: an answer it then gives, or one the caller was no
        longer there to read, goes to ``on_undelivered`` instead of being lost.
        """
        finished = anyio.Event()
        outcome: list[HookAnswer | None] = []
        scope = anyio.CancelScope()
        self._hook_scopes.add(scope)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._run_hook, scope, event, hook_input, outcome, finished)
                with anyio.move_on_after(self.answer_within(event)):
                    await finished.wait()
                if not finished.is_set():
                    logger.warning(
                        "%s hook of %r took over %gs; answered without it",
                        event,
                        self,
                        self.answer_within(event),
                    )
                    await deliver(self._fallback(event, "the bridge took too long to answer"))
                    await finished.wait()
                    late = outcome[0]
                    if late is not None and not is_empty_answer(late):
                        await self._undelivered(event, late)
                    return
                answer = outcome[0]
                if answer is None:
                    await deliver(self._fallback(event, "the bridge could not answer"))
                elif not await deliver(answer.to_json()) and not is_empty_answer(answer):
                    await self._undelivered(event, answer)
        finally:
            self._hook_scopes.discard(scope)

    async def _run_hook(
        self,
        scope: anyio.CancelScope,
        event: str,
        hook_input: HookInput,
        outcome: list[HookAnswer | None],
        finished: anyio.Event,
    ) -> None:
        answer: HookAnswer | None = None
        try:
            with scope:  # cancelled when the registration closes: then there is no answer
                answer = await self._hook(event, hook_input)
        except Exception:
            logger.exception("%s hook of %r failed; answering without it", event, self)
        finally:
            outcome.append(answer)
            finished.set()

    @staticmethod
    def _fallback(event: str, reason: str) -> bytes:
        return fallback_answer(event, f"{reason}, so this tool call was not run").to_json()

    async def _undelivered(self, event: str, answer: HookAnswer) -> None:
        logger.warning("%s hook answer of %r could not be delivered to agy", event, self)
        if self._on_undelivered is None:
            return
        try:
            await self._on_undelivered(event, answer)
        except Exception:
            logger.exception("on_undelivered of %r failed", self)

    async def close(self) -> None:
        """Unregister: every URL answers 404 from now on, hook calls in flight answer ``{}`` and
        the MCP session managers stop. Idempotent; a second caller waits for the first."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            self._forget(self)
            for scope in list(self._hook_scopes):
                scope.cancel()
            async with anyio.create_task_group() as tg:
                for serving in self._mcp.values():
                    tg.start_soon(serving.stop)
        finally:
            self._closed.set()

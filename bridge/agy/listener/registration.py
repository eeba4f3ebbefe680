"""One agy session's place on the listener: its token, its hook function, its MCP servers."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from bridge.agy.listener.asgi import ASGIApp
from bridge.agy.wire import EMPTY_HOOK_REPLY, HookInput, HookReply

logger = logging.getLogger(__name__)

HookFunc = Callable[[str, HookInput], Awaitable[HookReply]]
"""``await hook(event, hook_input)`` answers one hook call of agy."""

# Event and server names become one path segment each: no slash, nothing to escape.
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

_EMPTY = EMPTY_HOOK_REPLY.to_json()


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


class Registration:
    """Given to the agy session by :meth:`Listener.register`; all its URLs carry its token."""

    def __init__(
        self,
        *,
        label: str,
        token: str,
        base_url: str,
        hook: HookFunc,
        mcp: Mapping[str, McpServing],
        forget: Callable[[Registration], None],
    ) -> None:
        self.label = label  # for logs: never the token
        self._token = token
        self._token_bytes = token.encode("ascii")
        self.key = token_key(token)
        self._base_url = base_url
        self._hook = hook
        self._mcp = dict(mcp)
        self._forget = forget
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
        return None if serving is None or self._closing else serving.manager.handle_request

    async def call_hook(self, event: str, hook_input: HookInput) -> bytes:
        """The reply body for one hook call; ``{}`` when the hook fails or the session closes.

        A failing hook must not fail agy's model call: agy would discard a non-JSON answer
        anyway, and ``{}`` lets the turn go on without an injection.
        """
        scope = anyio.CancelScope()
        self._hook_scopes.add(scope)
        try:
            with scope:
                reply = await self._hook(event, hook_input)
                return reply.to_json()
        except Exception:
            logger.exception("%s hook of %r failed; answering {}", event, self)
        finally:
            self._hook_scopes.discard(scope)
        return _EMPTY

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
            for serving in self._mcp.values():
                serving.scope.cancel()
            for serving in self._mcp.values():
                await serving.stopped.wait()
        finally:
            self._closed.set()

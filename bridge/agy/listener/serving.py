"""The listener process-wide: a loopback socket, uvicorn inside our task group, registrations."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn
from anyio.abc import TaskGroup, TaskStatus

from bridge.agy.listener.registration import (
    HookFunc,
    LazyMcp,
    McpServing,
    Registration,
    UndeliveredFunc,
    check_name,
    token_key,
)
from bridge.agy.listener.routes import ListenerApp
from bridge.embedded_uvicorn import EmbeddedServer

if TYPE_CHECKING:
    # The MCP SDK is about half of what a bridge imports: it is imported when agy first calls
    # one of its session's MCP servers (see LazyMcp).
    from mcp.server.lowlevel import Server

# An MCP server of a session, or a function that makes it when agy first calls it.
McpSource = Any

logger = logging.getLogger(__name__)

# uvicorn's own wait for open connections at shutdown. Registrations are closed first, which
# ends every hook call and MCP stream, so this bound is only reached by a stuck client.
SHUTDOWN_GRACE_SECONDS = 3
# A stateful MCP session with nothing in flight for this long is dropped (the client must
# initialize again). agy keeps one session for its whole process, and an agy process is idle at
# most the bridge's idle_timeout before it is closed, so this only reaps sessions of processes
# that died without a DELETE.
MCP_SESSION_IDLE_SECONDS = 4 * 3600.0


class Listener:
    """The bridge's one loopback listener; agy sessions :meth:`register` with it."""

    def __init__(self, *, host: str, port: int, task_group: TaskGroup, max_body_bytes: int) -> None:
        self.port = port
        self._task_group = task_group
        self._max_body_bytes = max_body_bytes
        url_host = f"[{host}]" if ":" in host else host
        self._base_url = f"http://{url_host}:{port}"
        hosts = [f"{url_host}:{port}", f"localhost:{port}"]
        origins = [f"http://{allowed}" for allowed in hosts]
        self._mcp_hosts, self._mcp_origins = hosts, origins
        self.app = ListenerApp(
            lookup=self._lookup,
            allowed_hosts=frozenset(h.encode("ascii") for h in hosts),
            allowed_origins=frozenset(o.encode("ascii") for o in origins),
            max_body_bytes=max_body_bytes,
        )
        self._registrations: dict[bytes, Registration] = {}
        self._count = 0
        self._closing = False
        # The uvicorn server (set by open_listener): sockets inside sandboxes are served by it.
        self.server: uvicorn.Server | None = None

    def __repr__(self) -> str:
        return f"<Listener {self._base_url} sessions={len(self._registrations)}>"

    async def register(
        self,
        hook: HookFunc,
        mcp_servers: Mapping[str, McpSource] | None = None,
        *,
        answer_within: Mapping[str, float] | None = None,
        on_undelivered: UndeliveredFunc | None = None,
    ) -> Registration:
        """A new session: a fresh 256-bit token, its hook function and its MCP servers, each
        served by its own session manager running in the listener's task group once the first
        request to it comes (a server may be given as a function that makes it, then).

        ``answer_within``: the listener's deadline per hook event, in seconds (default: well
        under curl's limit for agy's default 10 s hook timeout; see ``hook_command``).
        ``on_undelivered(event, answer)``: told of every answer of ``hook`` that agy cannot
        have read (late, or its caller gone), so what it handed over can be taken back."""
        if self._closing:
            raise RuntimeError("the listener is shutting down")
        servers = dict(mcp_servers or {})
        for name in servers:
            check_name("MCP server", name)
        self._count += 1
        label = f"session-{self._count}"
        lazy = {
            name: LazyMcp(self._starter(source, label, name)) for name, source in servers.items()
        }
        registration = Registration(
            label=label,
            token=secrets.token_urlsafe(32),
            base_url=self._base_url,
            hook=hook,
            mcp=lazy,
            forget=self._forget,
            answer_within=answer_within,
            on_undelivered=on_undelivered,
        )
        self._registrations[registration.key] = registration
        return registration

    @contextlib.asynccontextmanager
    async def serving(self, sock: socket.socket) -> AsyncIterator[None]:
        """Also serve ``sock`` (a listening socket on a sandbox's own loopback, made on the
        listener's port) until the block ends: the same app, connections and shutdown as the
        listener's own socket, no process in between."""
        server = self.server
        if server is None or self._closing:
            raise RuntimeError("the listener is not serving")
        config = server.config

        def protocol() -> asyncio.Protocol:
            made: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=server.server_state, app_state={}
            )
            return made

        extra = await asyncio.get_running_loop().create_server(protocol, sock=sock)
        try:
            yield
        finally:
            extra.close()

    def _lookup(self, token: str) -> Registration | None:
        candidate = token.encode("utf-8", "replace")
        registration = self._registrations.get(token_key(token))
        if registration is None or not registration.matches(candidate):
            return None
        return registration

    def _forget(self, registration: Registration) -> None:
        self._registrations.pop(registration.key, None)

    def _starter(
        self, source: McpSource, label: str, name: str
    ) -> Callable[[], Awaitable[McpServing]]:
        async def start() -> McpServing:
            server = source if not callable(source) else source()
            serving: McpServing = await self._task_group.start(self._run_mcp, server, label, name)
            return serving

        return start

    async def _run_mcp(
        self,
        server: Server[Any],
        label: str,
        name: str,
        *,
        task_status: TaskStatus[McpServing],
    ) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=self._mcp_hosts,
            allowed_origins=self._mcp_origins,
        )
        manager = StreamableHTTPSessionManager(
            server,
            # Plain JSON answers to POSTs: agy has been seen working with a JSON-only server
            # (seed 000), and in this mode a client that accepts only application/json is
            # served too, where SSE mode would answer it 406. Every spec client accepts JSON.
            # The GET stream and server-assigned session ids stay (stateful mode); what is lost
            # is sending server-initiated requests inside a POST, which the chat tools never do.
            json_response=True,
            stateless=False,  # a server-assigned Mcp-Session-Id and a GET stream
            security_settings=security,
            session_idle_timeout=MCP_SESSION_IDLE_SECONDS,
            max_request_body_size=self._max_body_bytes,
        )
        stopped = anyio.Event()
        running = False
        try:
            with anyio.CancelScope() as scope:
                async with manager.run():
                    running = True
                    task_status.started(McpServing(manager, scope, stopped))
                    await anyio.sleep_forever()
        except Exception:
            if not running:
                raise
            # One broken server must not take the listener (and every other session) down.
            logger.exception("MCP server %r of %s stopped with an error", name, label)
        finally:
            stopped.set()

    async def close_all(self) -> None:
        """Close every registration (the listener itself keeps running until its context ends)."""
        async with anyio.create_task_group() as tg:
            for registration in list(self._registrations.values()):
                tg.start_soon(registration.close)

    async def shut_down(self) -> None:
        """Refuse new registrations, then close every one (open_listener's exit, before
        uvicorn stops)."""
        self._closing = True
        await self.close_all()


def _bind(host: str) -> socket.socket:
    address = ipaddress.ip_address(host)
    if not address.is_loopback:
        raise ValueError(f"the listener binds loopback only, not {host}")
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only then (else an
    # answer's second write can wait for the client's delayed ACK, as the console's did).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.bind((host, 0))
        sock.listen(2048)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _server(app: ListenerApp) -> EmbeddedServer:
    config = uvicorn.Config(
        app,
        log_config=None,  # the bridge configures logging
        access_log=False,  # an access log line would carry the token in its path
        lifespan="off",  # MCP managers run in our task group, not in an ASGI lifespan
        ws="none",
        # httptools when it is installed, h11 otherwise. On the path of every model call the
        # parser is most of the listener's CPU time per hook call (bench/README.md).
        http="auto",
        interface="asgi3",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    config.load()
    # uvicorn wraps the app in a logger of every ASGI message (paths included) when its logger
    # is at TRACE level; the token must not reach a log whatever the level.
    config.loaded_app = app
    return EmbeddedServer(config)


async def _serve(server: EmbeddedServer, sock: socket.socket, done: anyio.Event) -> None:
    try:
        await server.serve(sockets=[sock])
    finally:
        done.set()


@contextlib.asynccontextmanager
async def open_listener(
    *, host: str = "127.0.0.1", max_body_bytes: int = 1 << 20
) -> AsyncIterator[Listener]:
    """Serve on ``host`` (loopback only) at a port the OS picks until the block ends.

    On exit every registration is closed (hook calls in flight answer ``{}``, MCP managers
    stop), then uvicorn stops and is waited for.
    """
    if max_body_bytes < 1:
        raise ValueError("max_body_bytes must be positive")
    sock = _bind(host)
    try:
        async with anyio.create_task_group() as tg:
            listener = Listener(
                host=host, port=sock.getsockname()[1], task_group=tg, max_body_bytes=max_body_bytes
            )
            server = _server(listener.app)
            listener.server = server
            served = anyio.Event()
            # The socket already listens, so clients may connect before uvicorn accepts: their
            # connections wait in the backlog; nothing needs to wait for startup.
            tg.start_soon(_serve, server, sock, served)
            try:
                yield listener
            finally:
                with anyio.CancelScope(shield=True):
                    await listener.shut_down()
                    server.exit()
                    with anyio.move_on_after(SHUTDOWN_GRACE_SECONDS + 2):
                        await served.wait()
                tg.cancel_scope.cancel()  # only a server that would not stop is left to cancel
    finally:
        sock.close()

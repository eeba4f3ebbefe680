"""The console served by the bridge's own process: uvicorn in the caller's task group, on
``[web] host`` and ``port`` (loopback by default; TLS is the operator's reverse proxy's)."""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import AsyncIterator

import anyio
import uvicorn

from bridge.admin import is_loopback
from bridge.embedded_uvicorn import EmbeddedServer
from bridge.web.app import console_app
from bridge.web.core import ConsoleCore

log = logging.getLogger(__name__)

# Open streams (live pages) get this long at shutdown before they are cut.
SHUTDOWN_GRACE_SECONDS = 2


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP; without it every answer on a kept-alive connection
    # waited about 40 ms for the browser's delayed ACK (bench/console.py).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


@contextlib.asynccontextmanager
async def open_console(core: ConsoleCore) -> AsyncIterator[str]:
    """Serve the console until the block ends; yields the address it listens on."""
    web = core.config.web
    if not is_loopback(web.host):
        log.warning("console: listening on %s: put it behind a TLS proxy", web.host or "*")
    config = uvicorn.Config(
        console_app(core),
        log_config=None,  # the bridge configures logging
        access_log=False,  # a sign-in link's path must reach no log
        lifespan="off",
        ws="none",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    server = EmbeddedServer(config)
    sock = _bind(web.host, web.port)  # an address in use fails here, naming it
    host = f"[{web.host}]" if ":" in web.host else web.host
    address = f"http://{host}:{sock.getsockname()[1]}"
    done = anyio.Event()

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            done.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            log.info("console: serving at %s (people sign in with !web)", web.public_url or address)
            try:
                yield address
            finally:
                core.live.end_watchers()  # open live pages end their streams cleanly
                server.exit()
                with anyio.move_on_after(SHUTDOWN_GRACE_SECONDS + 2, shield=True):
                    await done.wait()
                tg.cancel_scope.cancel()
    finally:
        sock.close()

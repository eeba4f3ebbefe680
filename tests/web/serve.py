"""An ASGI app served by uvicorn on a loopback port inside the caller's task group: how the
browser tests and the console bench reach a page over real HTTP."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import anyio
import uvicorn
from starlette.types import ASGIApp


class _Embedded(uvicorn.Server):
    """No signal handlers: pytest (or the bench) owns SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` until the block ends; yields its base URL (``http://127.0.0.1:PORT``)."""
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP, and without it every kept-alive answer written in two
    # parts (headers, body) waits about 40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.setblocking(False)
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        ws="none",
        http="auto",
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    server = _Embedded(config)
    stopped = anyio.Event()

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            stopped.set()

    try:
        async with anyio.create_task_group() as tg:
            # The socket listens already: clients wait in its backlog until uvicorn accepts.
            tg.start_soon(run)
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            finally:
                server.should_exit = True
                # An open event stream keeps uvicorn waiting for its grace: then it is cancelled.
                with anyio.move_on_after(3, shield=True):
                    await stopped.wait()
                tg.cancel_scope.cancel()
    finally:
        sock.close()

"""uvicorn as the bridge embeds it (the agy listener, the web console): in the bridge's event
loop, under its task group, and quiet while nothing happens.

- No signal handlers: the bridge owns SIGINT and SIGTERM.
- uvicorn's main loop wakes ten times a second to look at ``should_exit`` and, every tenth
  time, to renew its ``Date`` header: about 8 % of an idle bridge's CPU per server. Here it
  wakes once a second (the ``Date`` header is as fresh as uvicorn keeps it) and at once when
  :meth:`EmbeddedServer.exit` is called. ``main_loop`` and ``on_tick`` are ``uvicorn.Server``'s
  own (undocumented) methods, pinned with uvicorn in the lock files;
  tests/test_embedded_uvicorn.py notices when a new uvicorn changes them.
- uvicorn's ``shutdown`` pauses 0.1 s for open connections to see that it stops, also when
  none is open: the end of every bridge (the listener, the web console). With no connection
  and no task left once it stops accepting, it goes straight to closing; otherwise it is
  uvicorn's own, pause included.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import anyio
import uvicorn

# uvicorn's on_tick renews the Date header when its counter is a multiple of this.
_TICKS_PER_SECOND = 10


class EmbeddedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit: anyio.Event | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def exit(self) -> None:
        """Stop serving (the connections get uvicorn's graceful shutdown)."""
        self.should_exit = True
        if self._exit is not None:
            self._exit.set()

    async def main_loop(self) -> None:
        self._exit = anyio.Event()
        if self.should_exit:
            self._exit.set()
        counter = 0
        while not await self.on_tick(counter):
            with anyio.move_on_after(1):
                await self._exit.wait()
            counter += _TICKS_PER_SECOND

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connection from here on (closing twice is harmless)
        if self.server_state.connections or self.server_state.tasks:
            await super().shutdown(sockets)
            return
        for sock in sockets or []:
            sock.close()
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()

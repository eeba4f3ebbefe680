"""A homeserver outage without a homeserver of the test's own: the address goes away.

The outage tests used to start a private Synapse, stop it and start it again on its data: three
Synapse starts a test (some 4 s of CPU, nearly all of it importing Synapse and building its
schema), for what the bridge sees of an outage, which is its homeserver's address: connections
refused while it is away, the open ones (a long-poll sync, a request in flight) cut when it
goes, the same server with the same data when it is back.

:class:`AddressOutage` gives exactly that in front of the run's shared Synapse: a forwarder on a
loopback port of its own, which the test's users and bot are configured with. ``down()`` stops
listening (a connection is refused, as by a stopped server) and closes every open connection on
both sides; ``up()`` listens on the same port again. The forwarder runs on an event loop in a
thread of its own (a blocking portal), so the tests' synchronous calls through it (registering
users with urllib) never wait on the loop they block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream, SocketListener, SocketStream, TaskGroup
from anyio.from_thread import BlockingPortal, start_blocking_portal

from tests.ports import free_port

from .synapse import Synapse

_HOST = "127.0.0.1"
_CHUNK = 65536
_ATTEMPTS = 3


class AddressOutage:
    """A loopback address in front of a homeserver that a test can take away and give back."""

    # The homeserver as the test's users and bot reach it: through this address.
    synapse: Synapse

    def __init__(self, portal: BlockingPortal, upstream: Synapse) -> None:
        self._portal = portal
        self._upstream = upstream
        upstream_port = urlsplit(upstream.base_url).port
        assert upstream_port is not None, upstream.base_url
        self._upstream_port = upstream_port
        self._port = 0
        self._serving: anyio.CancelScope | None = None
        # Each open connection's scope, and what its handler sets once both sockets are closed.
        self._connections: dict[anyio.CancelScope, anyio.Event] = {}

    def down(self) -> None:
        """Refuse new connections and cut the open ones, as a stopped server does; returns
        once every one is closed."""
        self._portal.call(self._down)

    def up(self) -> None:
        """Listen on the same port again: the homeserver is back, with all its data."""
        self._portal.call(self._up)

    async def _down(self) -> None:
        if self._serving is not None:
            self._serving.cancel()
            self._serving = None
        cut = list(self._connections.items())
        for scope, _ in cut:
            scope.cancel()
        for _, closed in cut:
            await closed.wait()

    async def _up(self) -> None:
        if self._serving is None:
            listener = await anyio.create_tcp_listener(local_host=_HOST, local_port=self._port)
            self._serving = await self._task_group.start(self._serve, listener)

    async def _serve(
        self, listener: SocketListener, *, task_status: anyio.abc.TaskStatus[anyio.CancelScope]
    ) -> None:
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            async with listener:
                await listener.serve(self._forward, task_group=self._task_group)

    async def _forward(self, client: SocketStream) -> None:
        if self._serving is None:  # accepted just before the address went away
            await client.aclose()
            return
        closed = anyio.Event()
        with anyio.CancelScope() as scope:
            self._connections[scope] = closed
            try:
                async with client, await anyio.connect_tcp(_HOST, self._upstream_port) as server:
                    async with anyio.create_task_group() as pumps:
                        pumps.start_soon(_pump, client, server, pumps.cancel_scope)
                        pumps.start_soon(_pump, server, client, pumps.cancel_scope)
            except OSError:
                pass  # the homeserver itself refused: the client sees its connection closed
            finally:
                del self._connections[scope]
                closed.set()

    _task_group: TaskGroup

    async def _run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            await self._listen_first()
            task_status.started()
            # Up or down, the forwarder lives until the test's block ends (``_stop``).
            await anyio.sleep_forever()

    async def _listen_first(self) -> None:
        # A port below the ephemeral range, free when probed (tests/ports.py): another test may
        # bind it first, so a few are tried, as start_synapse does for Synapse's.
        for attempt in range(_ATTEMPTS):
            self._port = free_port()
            try:
                await self._up()
            except OSError:
                if attempt == _ATTEMPTS - 1:
                    raise
                continue
            self.synapse = dataclasses.replace(
                self._upstream, base_url=f"http://{_HOST}:{self._port}"
            )
            return

    def _stop(self) -> None:
        self._portal.call(self._task_group.cancel_scope.cancel)


async def _pump(source: ByteStream, sink: ByteStream, both: anyio.CancelScope) -> None:
    """Copy one direction until either side ends; then end the connection's both directions."""
    try:
        while True:
            await sink.send(await source.receive(_CHUNK))
    except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        both.cancel()


@contextmanager
def address_outage(synapse: Synapse) -> Iterator[AddressOutage]:
    """An :class:`AddressOutage` in front of ``synapse``, up, for the block."""
    with start_blocking_portal(backend="asyncio") as portal:
        outage = AddressOutage(portal, synapse)
        future, _ = portal.start_task(outage._run)
        try:
            yield outage
        finally:
            outage._stop()
            future.result()

"""The egress proxy: with ``[agy] egress`` set, a sandbox reaches only the hosts listed there.

Such a sandbox's network namespace has no way out at all (no ``tap0``, no route): only two
listening sockets the bridge makes on its loopback, the listener's and this proxy's. agy and
its commands get ``HTTPS_PROXY``/``HTTP_PROXY`` pointing here (``NO_PROXY`` keeps the bridge's
own endpoint direct). The proxy takes ``CONNECT host:port`` (HTTPS and anything tunnelled) and
plain ``http://`` requests, and connects only when the host matches the list (``example.com``
exactly, ``*.example.com`` any name below it), and never to an address of the host itself
(loopback, its own addresses, link-local), whatever a listed name resolves to. Everything else
is answered ``403`` and logged; a command that ignores the proxy finds no network.

The host name is resolved here, on the host, so the sandbox needs no DNS. A plain-HTTP client
that reuses one proxy connection for a second host is refused at that point (the connection is
tied to its first host).
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import SocketStream

from bridge.agy.network import PROXY_PORT, host_addresses

log = logging.getLogger(__name__)

_HEAD_BYTES = 16384
_CONNECT_SECONDS = 15.0
_CHUNK = 65536


def proxy_env() -> dict[str, str]:
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


@dataclass(frozen=True)
class Egress:
    """The hosts sandboxes may reach (patterns as in the config)."""

    allowed: tuple[str, ...]

    def allows(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        for pattern in self.allowed:
            pattern = pattern.lower().rstrip(".")
            if pattern.startswith("*."):
                if host.endswith(pattern[1:]) and fnmatch.fnmatchcase(host, pattern):
                    return True
            elif host == pattern:
                return True
        return False

    @contextlib.asynccontextmanager
    async def serving(self, sock: socket.socket) -> AsyncIterator[None]:
        """Serve the proxy on ``sock`` (a listening socket in a sandbox) until the block ends."""
        listener = await anyio.abc.SocketListener.from_socket(sock)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self._client)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def _client(self, client: SocketStream) -> None:
        async with client:
            try:
                await self._handle(client)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            except OSError as exc:
                log.info("egress proxy: %s", exc)

    async def _handle(self, client: SocketStream) -> None:
        head = await _read_head(client)
        if head is None:
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3:
            await _answer(client, 400, "not a proxy request")
            return
        method, target, _ = parts
        if method.upper() == "CONNECT":
            host, port = _split(target, 443)
            rest = b""
        else:
            host, port, rest = _plain(target, head)
        if host is None or port is None:
            await _answer(client, 400, "not a proxy request")
            return
        if not self.allows(host):
            log.warning("egress refused: %s:%s is not in [agy] egress", host, port)
            await _answer(client, 403, f"{host} is not in the bridge's allowed hosts")
            return
        try:
            upstream = await _connect(host, port)
        except (OSError, TimeoutError) as exc:
            await _answer(client, 502, f"cannot reach {host}: {exc}")
            return
        async with upstream:
            if method.upper() == "CONNECT":
                await client.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                await upstream.send(rest)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_pipe, client, upstream, tg.cancel_scope)
                await _pipe(upstream, client, tg.cancel_scope)


async def _read_head(client: SocketStream) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > _HEAD_BYTES:
            await _answer(client, 431, "request head too large")
            return None
        data += await client.receive(_CHUNK)
    return data


def _split(target: str, default_port: int) -> tuple[str | None, int | None]:
    host, _, port = target.rpartition(":") if target.count(":") == 1 else (target, "", "")
    if target.startswith("["):  # [v6]:port
        host, _, port = target[1:].partition("]:")
    try:
        return host or None, int(port) if port else default_port
    except ValueError:
        return None, None


def _plain(target: str, head: bytes) -> tuple[str | None, int | None, bytes]:
    """``GET http://host[:port]/path HTTP/1.1``: the host, and the request in origin form."""
    if not target.lower().startswith("http://"):
        return None, None, b""
    authority, slash, path = target[len("http://") :].partition("/")
    host, port = _split(authority, 80)
    line, _, rest = head.partition(b"\r\n")
    method, _, version = line.decode("latin-1").split(" ", 2)
    origin = f"{method} {slash}{path} {version}\r\n".encode("latin-1")
    return host, port, origin + rest


async def _connect(host: str, port: int) -> SocketStream:
    """A connection to ``host``, never to an address of this host itself."""
    own = {ipaddress.ip_address(a) for a in host_addresses()}
    with anyio.fail_after(_CONNECT_SECONDS):
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]))
            if address.is_loopback or address.is_link_local or address in own:
                raise OSError(f"{host} resolves to {address}, an address of the bridge's host")
        last: OSError | None = None
        for info in infos:
            try:
                return await anyio.connect_tcp(str(info[4][0]), port)
            except OSError as exc:
                last = exc
        raise last or OSError(f"{host} has no address")


async def _pipe(source: SocketStream, target: SocketStream, scope: anyio.CancelScope) -> None:
    try:
        async for chunk in source:
            await target.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    finally:
        scope.cancel()


async def _answer(client: SocketStream, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Too Large", 502: "Bad Gateway"}
    body = (text + "\n").encode()
    await client.send(
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


def egress_for(allowed: Sequence[str] | None) -> Egress | None:
    return Egress(tuple(allowed)) if allowed is not None else None

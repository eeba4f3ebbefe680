"""An agent in its sandbox reaching for the host's own services: the store's PostgreSQL and an
HTTP server on the host's loopback, the same through the slirp gateway, and a server on the
host's other address. With the shared network (the code before issue 40) every one answered;
with a network of its own each is refused, while the thread's hooks (a message handed over
mid-turn) and MCP tools (a post from the agent) reach the bridge, and a server outside the host
(in a network namespace of the test's, standing in for the internet) is served.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from bridge.agy.network import find_slirp, host_addresses
from tests.agy.sandboxed import sandboxed_bridge
from tests.core.harness import thread
from tests.pg import Postgres

pytestmark = pytest.mark.anyio

A, B = thread("a"), thread("b")


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"served-by-host")

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def http_server(host: str) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer((host, 0), _Hello)
    worker = threading.Thread(target=server.serve_forever, daemon=True)
    worker.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def outside_world(tmp_path: Path) -> Iterator[str]:
    """An HTTP server at an address that is not the host's: in a network namespace of its own,
    joined to the host by a veth pair (the internet, as far as a sandbox can tell)."""
    name = f"agyout{threading.get_native_id() % 100000}"
    host_if, peer_if = f"{name}h"[:15], f"{name}p"[:15]
    script = tmp_path / "outside.py"
    script.write_text(
        "import http.server\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'served-outside')\n"
        "http.server.HTTPServer(('198.51.100.2', 8080), H).serve_forever()\n"
    )
    setup = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", peer_if, "netns", name],
        ["ip", "addr", "add", "198.51.100.1/30", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "-n", name, "addr", "add", "198.51.100.2/30", "dev", peer_if],
        ["ip", "-n", name, "link", "set", peer_if, "up"],
    ]
    server = None
    try:
        for command in setup:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                pytest.skip(f"cannot make a stand-in for the internet: {done.stderr.strip()}")
        server = subprocess.Popen(["ip", "netns", "exec", name, "python3", str(script)])
        for _ in range(100):
            with socket.socket() as probe:
                probe.settimeout(0.1)
                if probe.connect_ex(("198.51.100.2", 8080)) == 0:
                    break
            threading.Event().wait(0.05)
        yield "198.51.100.2:8080"
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _tcp(address: str) -> str:
    """A shell line that says whether a TCP connection to host:port opened."""
    host, port = address.rsplit(":", 1)
    opened = f"timeout 3 bash -c 'echo > /dev/tcp/{host}/{port}'"
    return f"({opened} && echo OPEN-{port} || echo SHUT-{port})"


async def test_the_hosts_local_services_are_out_of_reach_and_the_bridge_and_outside_are_not(
    tmp_path: Path, postgres: Postgres
) -> None:
    if find_slirp() is None:
        pytest.skip("slirp4netns is not installed")
    others = host_addresses()
    with (
        http_server("127.0.0.1") as loop_port,
        http_server("0.0.0.0") as any_port,
        outside_world(tmp_path) as outside,
    ):
        async with sandboxed_bridge(tmp_path) as box:
            h = box.h
            assert h.bridge.runtime.isolation.network.private, h.bridge.runtime.isolation.network
            targets = [
                f"127.0.0.1:{postgres.port}",
                f"127.0.0.1:{loop_port}",
                f"10.0.2.2:{loop_port}",  # slirp's gateway is the host
                *(f"{address}:{any_port}" for address in others),
            ]
            probes = "; ".join(_tcp(target) for target in targets)
            seen = await box.run(
                A,
                f"{probes}; curl -s -m 5 http://{outside}/; echo; curl -s -m 3 "
                f"http://127.0.0.1:{loop_port}/ || echo curl-refused",
            )
            for target in targets:
                port = target.rsplit(":", 1)[1]
                assert f"SHUT-{port}" in seen and f"OPEN-{port}" not in seen, (target, seen)
            assert "served-by-host" not in seen and "curl-refused" in seen, seen
            assert "served-outside" in seen, seen  # the internet is still there
            # The thread's hooks and MCP tools still reach the bridge.
            mcp = '[[mcp bridge_chat post_message {"text": "posted from the sandbox"}]]'
            await h.say(f"work {mcp} [[calls 2]] [[touch started]] [[wait go]]", where=B)
            workdir = box.workdir(B)
            with anyio.fail_after(20):
                while not (workdir / "started").exists():
                    await anyio.sleep(0.02)
            await h.say("late news: use the staging db", where=B)
            with anyio.fail_after(20):
                while not await h.bridge.store.pending(B.key):
                    await anyio.sleep(0.02)
            (workdir / "go").touch()
            [reply] = await h.adapter.wait_finished(1, B)
            assert reply.outcome is not None and reply.outcome.error is None, reply.outcome
            assert "use the staging db" in reply.outcome.final_text
            await h.adapter.wait_notice("posted from the sandbox")


async def test_with_egress_set_only_the_listed_hosts_are_reached(tmp_path: Path) -> None:
    if find_slirp() is None:
        pytest.skip("slirp4netns is not installed")
    with outside_world(tmp_path) as outside:
        listed = outside.split(":")[0]
        async with sandboxed_bridge(tmp_path, agy={"egress": [listed, "*.allowed.test"]}) as box:
            network = box.h.bridge.runtime.isolation.network
            assert network.private and network.proxy is not None
            code = "-s -o /dev/null -w 'code=%{http_code}\\n'"
            seen = await box.run(
                A,
                f"curl -s -m 5 http://{outside}/; echo; "  # listed: through the proxy
                f"curl -s -m 5 -p http://{outside}/; echo; "  # the same, tunnelled (CONNECT)
                f"curl {code} -m 5 http://unlisted.example/; "  # not listed: refused
                f"curl {code} -m 5 https://unlisted.example/ || echo tunnel-refused; "
                f"curl -s -m 3 --noproxy '*' http://{outside}/ || echo direct-refused",
            )
            assert seen.count("served-outside") == 2, seen
            assert "code=403" in seen and "tunnel-refused" in seen, seen
            assert "direct-refused" in seen, seen  # without the proxy there is no way out
            # The thread's hooks and MCP tools still reach the bridge.
            mcp = '[[mcp bridge_chat post_message {"text": "posted with egress"}]]'
            await box.turn(B, f"work {mcp}")
            await box.h.adapter.wait_notice("posted with egress")

"""The admin endpoint over real loopback HTTP: /healthz, /metrics, 404s, binding and shutdown."""

from __future__ import annotations

import errno
import logging
import socket
from typing import Any

import aiohttp
import anyio
import anyio.abc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.admin import AdminServer, is_loopback, open_admin
from bridge.metrics import Metrics

pytestmark = pytest.mark.anyio

# A guard against a hang, not a speed assertion.
GUARD = 10


async def healthy() -> dict[str, Any]:
    return {"status": "ok", "live_processes": 2}


async def get(server: AdminServer, path: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(server.url + path) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.text()


async def test_healthz_answers_what_health_reports() -> None:
    async with open_admin(Metrics(), port=0, health=healthy) as server:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "/healthz") as response:
                assert response.status == 200
                assert response.content_type == "application/json"
                assert await response.json() == {"status": "ok", "live_processes": 2}


async def test_healthz_is_503_when_health_reports_trouble() -> None:
    async def degraded() -> dict[str, Any]:
        return {"status": "degraded", "detail": "store unreachable", "live_processes": 0}

    async with open_admin(Metrics(), port=0, health=degraded) as server:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "/healthz") as response:
                assert response.status == 503
                body = await response.json()
    assert body == {"status": "error", "detail": "store unreachable", "live_processes": 0}


async def test_healthz_is_503_when_health_raises(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> dict[str, Any]:
        raise RuntimeError("cannot open /var/lib/bridge/state.db with pw=hunter22")

    caplog.set_level(logging.WARNING, logger="bridge.admin")
    async with open_admin(Metrics(), port=0, health=broken) as server:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "/healthz") as response:
                assert response.status == 503
                body = await response.json()
    assert body["status"] == "error"
    assert "RuntimeError" in body["detail"]
    # The exception's text stays in the log (which scrubs secrets), out of the HTTP answer.
    assert "hunter22" not in body["detail"]
    assert any(r.exc_info and "hunter22" in str(r.exc_info[1]) for r in caplog.records)


async def test_healthz_is_503_when_health_hangs() -> None:
    async def stuck() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with open_admin(Metrics(), port=0, health=stuck, health_timeout=0.05) as server:
        status, _, text = await get(server, "/healthz")
    assert status == 503
    assert "timed out" in text


async def test_metrics_serves_the_prometheus_text() -> None:
    metrics = Metrics()
    live = {"n": 3}
    metrics.set_sources(lambda: live["n"], lambda: 1)
    metrics.turn_started("matrix")
    metrics.error("chat_post")

    async with open_admin(metrics, port=0, health=healthy) as server:
        status, content_type, text = await get(server, "/metrics")
        live["n"] = 5
        _, _, later = await get(server, "/metrics")

    assert status == 200
    assert content_type.startswith("text/plain")
    assert "version=0.0.4" in content_type
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert values[("agy_bridge_turns_started_total", (("platform", "matrix"),))] == 1
    assert values[("agy_bridge_errors_total", (("kind", "chat_post"),))] == 1
    assert values[("agy_bridge_live_processes", ())] == 3
    assert "agy_bridge_live_processes 5.0" in later


async def test_other_paths_are_404() -> None:
    async with open_admin(Metrics(), port=0, health=healthy) as server:
        for path in ("/", "/metrics/", "/health", "/admin", "/healthz/x"):
            status, _, _ = await get(server, path)
            assert status == 404, path


async def test_binds_loopback_by_default() -> None:
    async with open_admin(Metrics(), port=0, health=healthy) as server:
        assert server.host == "127.0.0.1"
        assert server.port != 0
        # The socket really listens there: a plain TCP connection to it succeeds.
        with anyio.fail_after(GUARD):
            stream = await anyio.connect_tcp("127.0.0.1", server.port)
        await stream.aclose()


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("127.0.0.2")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("")
    assert not is_loopback("::")
    assert not is_loopback("192.0.2.1")
    assert not is_loopback("bridge.example.org")


async def test_non_loopback_host_logs_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    # 192.0.2.1 (TEST-NET-1) is on no interface here: the bind fails after the warning, so
    # the test never listens beyond loopback.
    caplog.set_level(logging.WARNING, logger="bridge.admin")
    with pytest.raises(OSError) as raised:
        async with open_admin(Metrics(), host="192.0.2.1", port=0, health=healthy):
            pytest.fail("bound a non-local address")
    assert raised.value.errno == errno.EADDRNOTAVAIL
    assert any("reachable from the network" in r.getMessage() for r in caplog.records)


async def test_loopback_host_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="bridge.admin")
    async with open_admin(Metrics(), port=0, health=healthy):
        pass
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_access_log_never_shows_query_strings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp.access")
    async with open_admin(Metrics(), port=0, health=healthy) as server:
        status, _, _ = await get(server, "/metrics?token=xoxb-leaked-secret")
    assert status == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert any("/metrics" in line for line in lines)
    assert not any("xoxb-leaked-secret" in line or "token=" in line for line in lines)


def assert_port_free(port: int) -> None:
    # Connecting is refused, and a new listener can take the port (SO_REUSEADDR tolerates the
    # TIME_WAIT of closed connections, not a socket still listening).
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()


async def test_exit_closes_the_port_even_with_a_client_connected() -> None:
    async with aiohttp.ClientSession() as session:
        with anyio.fail_after(GUARD):
            async with open_admin(Metrics(), port=0, health=healthy) as server:
                # The session keeps this connection alive past the context's exit.
                async with session.get(server.url + "/healthz") as response:
                    assert response.status == 200
        assert_port_free(server.port)


async def test_cancellation_closes_the_port() -> None:
    async def serve(*, task_status: anyio.abc.TaskStatus[int]) -> None:
        async with open_admin(Metrics(), port=0, health=healthy) as server:
            task_status.started(server.port)
            await anyio.sleep_forever()

    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve)
            tg.cancel_scope.cancel()
    assert_port_free(port)

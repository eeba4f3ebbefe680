"""A loopback port for a server a test configures before it starts.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from the ephemeral range, the
same range it takes every outgoing connection's local port from: between the probe closing it
and the server binding it, a connection made by any test on the machine (three workers talking
to Synapse, PostgreSQL and the fakes) can take it, and the server fails with "address already
in use" (seen in the multi-instance fault tests). A port below that range is never given to a
connection or to ``bind(0)``, so only another test choosing the same random port could collide.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_start() -> int:
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port below the ephemeral range that is free now (falls back to the kernel's pick
    when that range is too small to search)."""
    top = _ephemeral_start() - 1
    if top > 11000:
        rng = random.SystemRandom()
        for _ in range(50):
            port = rng.randint(10000, top)
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

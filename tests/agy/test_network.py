"""A sandbox's own network (bridge/agy/network.py): its set-up's deadline on a slow host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bridge.agy.network import find_slirp, resolve_network
from bridge.agy.sandbox import find_bwrap
from tests.agy.sandboxed import require_bwrap

pytestmark = pytest.mark.anyio

# Longer than the fixed 10 s the set-up once had: a loaded host's bubblewrap, slow to set its
# sandbox up (namespaces, mounts) and say which process to connect.
SLOW_START = 11


async def test_a_network_slow_to_set_up_on_a_loaded_host_is_still_the_sandboxes_own(
    tmp_path: Path,
) -> None:
    """The set-up is part of agy's start and has the start's allowance (``init_timeout``). A
    fixed window of its own, passed on a busy host at the bridge's start, gave every sandbox
    the host's network (its loopback services: the store, the listener) for the bridge's life;
    passed at a thread's start, it failed that thread's turn."""
    require_bwrap()
    if find_slirp() is None or os.geteuid() != 0:
        pytest.skip("a sandbox's own network needs slirp4netns and root")
    bwrap = find_bwrap()
    assert bwrap is not None
    slow = tmp_path / "slow-bwrap"
    slow.write_text(f'#!/bin/sh\nsleep {SLOW_START}\nexec {bwrap} "$@"\n')
    slow.chmod(0o755)
    network = await resolve_network(None, str(slow))
    assert network.private, network.problem

"""A chat whose client state is a file runs on one instance at a time: the leader.

Matrix keeps its device's encryption keys (and its sync position) in files under the data
directory, so with several instances on one PostgreSQL only one of them may sync the account.
That one holds the lease ``leader|matrix`` (renewed like a thread's); Matrix threads run on it
only. When it dies its lease lapses and another instance takes the role over, but only where it
can use the same files: each leader writes its name into ``<data_dir>/leader-matrix``, and an
instance that finds the previous leader's name there shares that directory. One that does not
says clearly, in its log, that it cannot take the role over (rather than log in as a new device
that cannot read the rooms' earlier messages), and Matrix stays down until the old leader is
back or the directory is shared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import anyio

from bridge.core.core import Core
from bridge.core.events import ChatAdapter
from bridge.core.leases import Lease, leader_key

__all__ = ["run_as_leader"]

log = logging.getLogger(__name__)


async def run_as_leader(
    adapter: ChatAdapter,
    core: Core,
    started: Callable[[], None],
    platform: str,
    data_dir: Path,
    period: float,
) -> None:
    """Run ``adapter`` while this instance leads its platform; wait for the role otherwise."""
    cluster = core.cluster
    marker = data_dir / f"leader-{platform}"
    key = leader_key(platform)
    # A follower counts as started: it has nothing to connect until it leads.
    started()
    while True:
        claim = await cluster.leases.claim(key)
        if claim.granted:
            break
        await anyio.sleep(period)
    previous = claim.previous.split("#")[0] if claim.previous else None
    written = marker.read_text().strip() if marker.exists() else None
    if previous not in (None, cluster.leases.name) and written != previous:
        log.error(
            "cannot take over the %s role from instance %s: its files (%s, with the device's "
            "encryption keys) are not in this instance's data_dir %s. Put data_dir on storage "
            "shared by the instances, or restart %s; %s stays off here",
            platform, previous, marker.name, data_dir, previous, platform,
        )  # fmt: skip
        # Shielded: a lease left behind in our name would tell the next instance that the
        # role was ours, and it would refuse the shared files of the real leader.
        with anyio.CancelScope(shield=True):
            await cluster.leases.release(key)
        return
    marker.write_text(cluster.leases.name + "\n")
    lease = Lease(key)
    cluster.leading[key] = lease
    log.info("this instance runs %s (the leader)", platform)
    try:
        async with lease.guard():
            await adapter.run(core, lambda: None)
    finally:
        del cluster.leading[key]
    if lease.lost.is_set():
        log.error("lost the %s role to another instance; %s stays off here", platform, platform)

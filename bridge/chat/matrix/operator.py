"""The operator's Matrix commands: ``agy-bridge matrix trust [@user:server]``.

They work on the bridge's store, so they work with the bridge running (also with several
instances on one PostgreSQL): a running bridge reads the pins at the next event.
"""

from __future__ import annotations

import time

from bridge.config import Config
from bridge.core.store import store_url
from bridge.core.store_identities import IdentityPin
from bridge.core.stores import open_store


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "?"


def describe(pin: IdentityPin) -> str:
    line = f"{pin.user_id}  master key {pin.master_key} (pinned {_when(pin.pinned_at)})"
    if pin.changed_key is not None:
        line += (
            f"  CHANGED to {pin.changed_key} ({_when(pin.changed_at)}): untrusted until "
            f"`agy-bridge matrix trust {pin.user_id}`"
        )
    return line


async def trust(config: Config, user_id: str | None) -> tuple[int, str]:
    """Acknowledge ``user_id``'s changed identity, or (without one) list the pins; the exit
    status and what to print."""
    async with open_store(store_url(config)) as store:
        if user_id is None:
            pins = await store.identity_pins()
            if not pins:
                return 0, "no Matrix identity is pinned yet"
            return 0, "\n".join(describe(pin) for pin in pins)
        pin = await store.acknowledge_identity(user_id)
        if pin is not None:
            return 0, (
                f"{user_id}: the new identity (master key {pin.master_key}) is trusted now; "
                "their devices it signed command the agent again"
            )
        known = {p.user_id: p for p in await store.identity_pins()}
    if user_id in known:
        return 1, f"{user_id}: no identity change waits for acknowledgement\n" + describe(
            known[user_id]
        )
    return 1, f"{user_id}: the bridge has not seen this user's identity"

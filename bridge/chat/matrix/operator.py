"""The operator's Matrix commands (``agy-bridge matrix trust [@user:server]``, ``agy-bridge
matrix verify [--confirm ID | --reject ID]``) and doctor's Matrix check.

They work on the bridge's store, so they work with the bridge running (also with several
instances on one PostgreSQL): a running bridge reads the pins at the next event.
"""

from __future__ import annotations

import time

from aiohttp import ClientError
from nio import AsyncClient
from pydantic import ValidationError

from bridge.config import Config
from bridge.core.store import store_url
from bridge.core.store.identities import (
    VERIFICATION_CONFIRMED,
    VERIFICATION_REJECTED,
    IdentityPin,
)
from bridge.core.store.opening import open_store

from .client import StoredLogin
from .crosssign import CrossSigningError
from .files import MatrixFiles
from .trust import without_identity
from .verification import emoji_names


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


async def allowed_without_identity(config: Config) -> tuple[list[str], str]:
    """For ``doctor``: the allowed users with no cross-signing identity, asked of the
    homeserver with the bot's token (configured, or the stored login); ``""`` or why not."""
    matrix = config.matrix
    token = matrix.access_token.get_secret_value() if matrix.access_token else None
    if token is None:
        files = MatrixFiles.under(config.bridge.data_dir)
        try:
            stored = StoredLogin.model_validate_json(files.login.read_text(encoding="utf-8"))
        except (OSError, ValidationError):
            return [], "the bot has not logged in yet (no stored login)"
        if stored.homeserver != matrix.homeserver or stored.user_id != matrix.user_id:
            return [], "the stored login is for another account"
        token = stored.access_token
    client = AsyncClient(matrix.homeserver.rstrip("/"), matrix.user_id)
    client.access_token = token
    try:
        return await without_identity(client, matrix.allowed_users), ""
    except (CrossSigningError, ClientError, TimeoutError, OSError) as exc:
        return [], f"the homeserver could not be asked ({exc or type(exc).__name__})"
    finally:
        await client.close()


async def verify(config: Config, confirm: str | None, reject: str | None) -> tuple[int, str]:
    """List the verifications of the bot waiting for the operator (one line each: the id, the
    person, their device, the bot's seven emoji), or answer one."""
    async with open_store(store_url(config)) as store:
        answer_id = confirm or reject
        if answer_id is not None:
            state = VERIFICATION_CONFIRMED if confirm else VERIFICATION_REJECTED
            if await store.answer_verification(answer_id, state):
                what = "confirmed" if confirm else "rejected"
                return 0, f"{answer_id}: {what}; the bridge finishes the verification"
            return 1, f"{answer_id}: no such verification waits"
        waiting = await store.verifications()
    if not waiting:
        return 0, "no verification of the bot is waiting"
    return 0, "\n".join(
        f"{row.id}  {row.user_id}  {row.device_id}  {emoji_names(row.emoji)}" for row in waiting
    )

"""The bridge's admin listener serving its forges' webhooks, as `agy-bridge run` wires it
(bridge/core/forge_hooks.py: webhook_routes), on a port of its own for a test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from bridge.admin import AdminServer, open_admin
from bridge.app import Bridge
from bridge.core.forge_hooks import webhook_routes


async def _healthy() -> dict[str, Any]:
    return {"status": "ok"}


@asynccontextmanager
async def serving_webhooks(bridge: Bridge) -> AsyncIterator[AdminServer]:
    posts, max_body = webhook_routes(bridge.config, bridge.core, bridge.store, bridge.core.pulls)
    async with open_admin(
        bridge.metrics, port=0, health=_healthy, posts=posts, max_body=max_body
    ) as admin:
        yield admin

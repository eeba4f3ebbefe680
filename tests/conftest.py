"""Shared test setup: anyio on asyncio (Slack Bolt and matrix-nio run on asyncio)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

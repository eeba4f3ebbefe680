"""Fixtures for the simulator's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.simulator.driver import SimFactory


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[SimFactory]:
    factory = SimFactory(tmp_path)
    yield factory
    for sim in factory.started:
        sim.kill()

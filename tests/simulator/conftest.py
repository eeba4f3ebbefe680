"""Fixtures for the simulator's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deadline import Deadline
from tests.simulator.driver import SimFactory


@pytest.fixture
def sims(tmp_path: Path, deadline: Deadline) -> Iterator[SimFactory]:
    factory = SimFactory(tmp_path, deadline.seconds_left)
    yield factory
    for sim in factory.started:
        sim.kill()

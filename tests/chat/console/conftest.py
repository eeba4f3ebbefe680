"""The console tests' fixture: the consoles a test starts, ended when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chat.console.consoles import Consoles


@pytest.fixture
def consoles(tmp_path: Path) -> Iterator[Consoles]:
    started = Consoles(tmp_path)
    try:
        yield started
    finally:
        started.end()

"""The Matrix package gives its adapter's names at their first use: its small modules (the
files the doctor reads) import without matrix-nio (tests/test_startup_imports.py)."""

from __future__ import annotations

import pytest

import bridge.chat.matrix as package
from bridge.chat.matrix.adapter import MatrixAdapter, MatrixTuning, NotConnected


def test_the_package_gives_the_adapters_names_and_refuses_others() -> None:
    assert (package.MatrixAdapter, package.MatrixTuning, package.NotConnected) == (
        MatrixAdapter,
        MatrixTuning,
        NotConnected,
    )
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        package.Nothing  # noqa: B018

"""The cyclic garbage collector held off while pytest starts and collects (a plugin: pyproject's
addopts, ``-p tests.collection_gc``, so that it is there before the conftests are imported).

Every xdist worker imports the conftests and collects the whole suite (~2950 tests) before its
first test: hundreds of thousands of container objects (modules, classes, fixtures, items) that
live as long as the worker. CPython's collector walked them again and again while they were
made (four full passes over the growing heap in one collection, and young ones by the hundred)
and found almost nothing to free (under 500 objects). So the collector is off from this
plugin's first hook to the end of the collection; then what exists is frozen (``gc.freeze``:
out of every later pass, still freed by reference counting; an in-process bridge's
``bridge.heap.server_collector`` unfreezes it again when it stops), and the collector is on for
the tests, as before. The few cycles the start and the collection left behind stay frozen.
"""

from __future__ import annotations

import gc
from collections.abc import Generator

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests() -> None:
    gc.disable()


@pytest.hookimpl(wrapper=True)
def pytest_collection() -> Generator[None, object, object]:
    # The hook of the xdist controller too, which collects nothing (and runs as long as the
    # run): the collector is back on in every process that gets here.
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()

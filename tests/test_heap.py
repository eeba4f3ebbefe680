"""The collector settings `agy-bridge run` serves with (bridge/heap.py)."""

from __future__ import annotations

import gc
import weakref

import pytest

from bridge.heap import YOUNG_THRESHOLD, server_collector


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def test_start_up_garbage_is_freed_and_the_rest_frozen_until_exit() -> None:
    before = gc.get_threshold()
    garbage = _Node()
    gone = weakref.ref(garbage)
    del garbage
    kept = _Node()
    with server_collector():
        assert gone() is None  # collected, not frozen
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        assert not any(obj is kept for obj in gc.get_objects())  # frozen: out of every pass
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
    assert any(obj is kept for obj in gc.get_objects())


def test_settings_are_restored_when_the_bridge_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), server_collector():
        raise RuntimeError("the bridge stopped")
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_objects_made_after_the_freeze_are_still_collected() -> None:
    with server_collector():
        late = _Node()
        gone = weakref.ref(late)
        del late
        gc.collect()
        assert gone() is None

"""The collector settings `agy-bridge run` serves with (bridge/heap.py)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from bridge.heap import (
    SERVER_MIDDLE_THRESHOLD,
    START_MIDDLE_THRESHOLD,
    YOUNG_THRESHOLD,
    for_the_start,
    server_collector,
)

ROOT = Path(__file__).resolve().parents[1]


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
        assert gc.get_threshold() == (YOUNG_THRESHOLD, SERVER_MIDDLE_THRESHOLD, before[2])
        assert not any(obj is kept for obj in gc.get_objects())  # frozen: out of every pass
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
    assert any(obj is kept for obj in gc.get_objects())


def test_the_start_is_not_followed_by_a_pass_over_the_whole_heap() -> None:
    # The older generations hold the imported modules: walking them costs 0.01-0.05 s a start
    # and frees nothing (the start's cyclic garbage dies young).
    stats = [generation["collections"] for generation in gc.get_stats()]
    with server_collector():
        after = [generation["collections"] for generation in gc.get_stats()]
        assert after[1:] == stats[1:]
        assert after[0] > stats[0]


def test_the_start_makes_no_pass_over_the_middle_generation() -> None:
    # A start makes about 15 young passes over what its imports make, nearly all of which lives
    # as long as the process; at CPython's 10 the tenth was a pass over all of it.
    before = gc.get_threshold()
    middle = gc.get_stats()[1]["collections"]
    kept = []
    try:
        for_the_start()
        for _ in range(12):
            young = gc.get_stats()[0]["collections"]
            while gc.get_stats()[0]["collections"] == young:  # until the next young pass
                kept.append([])
        assert gc.get_stats()[1]["collections"] == middle
    finally:
        gc.set_threshold(*before)


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


def test_a_bridge_process_collects_the_young_generation_less_often_from_its_first_line() -> None:
    # `python -m bridge` sets it before it imports the command (most of a start is imports);
    # `--version` ends in the argument parser, after those imports.
    probe = (
        "import gc, runpy, sys\n"
        "sys.argv = ['agy-bridge', '--version']\n"
        "try:\n"
        "    runpy.run_module('bridge', run_name='__main__', alter_sys=True)\n"
        "except SystemExit:\n"
        "    print(gc.get_threshold()[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == str(YOUNG_THRESHOLD)
    assert gc.get_threshold()[0] != YOUNG_THRESHOLD  # this process's own: not touched


def test_the_start_setting_keeps_the_oldest_generations_threshold() -> None:
    before = gc.get_threshold()
    try:
        for_the_start()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, START_MIDDLE_THRESHOLD, before[2])
    finally:
        gc.set_threshold(*before)

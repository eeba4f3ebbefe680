"""Wiring the bridge together: what ``open_bridge`` sets up before any thread starts."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from bridge.agy.plugin import plugin_dir
from bridge.app import SHARED_PLUGIN_FILES
from bridge.core.workspaces import place_for
from tests.core.harness import SIMULATOR, running, thread

pytestmark = pytest.mark.anyio


async def test_sessions_link_the_shared_plugin_files_and_unused_ones_go_at_start(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "data" / SHARED_PLUGIN_FILES
    shared.mkdir(parents=True)
    (shared / ("0" * 64)).write_bytes(b"guidance nobody uses any more")
    in_use = shared / ("1" * 64)
    in_use.write_bytes(b"guidance a session links")
    os.link(in_use, tmp_path / "a-session's-link")
    a, b = thread("a"), thread("b")
    async with running(tmp_path) as h:
        assert sorted(p.name for p in shared.iterdir()) == ["1" * 64]
        await h.say("hello", where=a)
        await h.say("hello", where=b)
        await h.adapter.wait_finished(1, a)
        await h.adapter.wait_finished(1, b)
        folders = [plugin_dir(place_for(h.bridge.config, ref).session_dir) for ref in (a, b)]
    for name in ("plugin.json", "rules/AGENTS.md"):
        linked = [(folder / name).stat() for folder in folders]
        assert linked[0].st_ino == linked[1].st_ino and linked[0].st_nlink == 3, name
        assert any(os.path.samestat(linked[0], copy.stat()) for copy in shared.iterdir())
    assert (folders[0] / "hooks.json").stat().st_nlink == 1


async def test_an_agy_slow_to_answer_help_on_a_loaded_host_still_gets_its_flags(
    tmp_path: Path,
) -> None:
    """``agy --help`` is a start of agy's, and has the start's allowance (``init_timeout``,
    20 s here) unless ``help_timeout`` is set. A fixed 4 s, passed on a busy host, made the
    bridge send only the essential flags for its whole life: no ``--sandbox`` or ``--mode``
    the operator asked for, no ``--print-timeout``."""
    slow = tmp_path / "slow-agy"
    slow.write_text(
        f'#!/bin/sh\ncase "$1" in --help) sleep 5;; esac\nexec {shlex.join(SIMULATOR)} "$@"\n'
    )
    slow.chmod(0o755)
    async with running(tmp_path, command=[str(slow)]) as h:
        caps = h.bridge.runtime.caps
        assert caps.probed and caps.has("--print-timeout"), caps.problem

"""The test modules' bytecode written before the workers start (tests/bytecode.py)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

from tests.bytecode import shared_out, write


# An xdist worker has execnet's thread; the children only write files and exit.
@pytest.mark.filterwarnings("ignore:.*fork:DeprecationWarning")
def test_each_file_is_done_once_over_several_processes(tmp_path: Path) -> None:
    items = [tmp_path / f"f{n}" for n in range(7)]

    def work(share: Sequence[Path]) -> None:
        for item in share:
            item.write_text(str(os.getpid()))

    shared_out(items, work, 3)
    writers = {item.read_text() for item in items}
    assert len(writers) == 3  # three processes, this one among them
    assert str(os.getpid()) in writers


def test_a_test_module_is_rewritten_and_a_helper_compiled(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    module = tmp_path / "test_probe.py"
    module.write_text("def test_probe():\n    assert 1 + 1 == 2\n", encoding="utf-8")
    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n", encoding="utf-8")
    write(request.config, [tmp_path], ways=1)
    pyc = rewrite.get_cache_dir(module) / ("test_probe" + rewrite.PYC_TAIL)
    assert rewrite._read_pyc(module, pyc) is not None  # what a worker's import then reads
    # Only the test modules under the roots: a helper is compiled where it lives (the bridge's
    # and the tests' own), not here.
    assert not list((tmp_path / "__pycache__").glob("helper*"))

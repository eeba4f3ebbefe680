"""The garbage collector held off while pytest starts and collects (tests/collection_gc.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """\
import gc

AT_COLLECTION = gc.isenabled()


def test_probe():
    print(f"collection={AT_COLLECTION} test={gc.isenabled()} frozen={gc.get_freeze_count() > 0}")
"""


def test_the_collector_is_off_while_collecting_and_on_for_the_tests(tmp_path: Path) -> None:
    # A pytest of its own with the project's configuration (pyproject's addopts register the
    # plugin), on one module that notes what it saw when imported and when run.
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-s",
            "-q",
            "test_probe.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "collection=False test=True frozen=True" in done.stdout, done.stdout

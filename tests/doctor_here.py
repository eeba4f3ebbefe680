"""``agy-bridge doctor`` run by the CLI's own ``main`` in the test's process.

A ``python -m bridge doctor`` costs about a second of CPU before its first check; the tests that
only read the report and the exit status run the same command line here, with the environment
set as the process would get it (each test file keeps one real process per mode)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge.cli import main


@dataclass
class Done:
    returncode: int
    stdout: str


def doctor_in_process(
    config: Path,
    args: tuple[str, ...],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Done:
    """Run ``doctor --config CONFIG ARGS`` with ``env`` set; its exit status and output."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    status = main(["doctor", "--config", str(config), *args])
    return Done(status, capsys.readouterr().out)

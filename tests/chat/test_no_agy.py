"""Loading a chat adapter loads no module of the agy layer.

The layers know each other in one direction only (chat knows neither agy nor the core's turn
runner): an adapter that pulls in agy's process, wire and launch modules on import can come to
depend on them without anyone noticing. Each adapter is imported in a fresh interpreter, since
this test process has loaded ``bridge.agy`` long before.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

ADAPTERS = [
    "bridge.chat.slack.adapter",
    "bridge.chat.matrix.adapter",
    "bridge.chat.console.adapter",
]

PROBE = """
import importlib, sys
importlib.import_module(sys.argv[1])
agy = [n for n in sys.modules if n == "bridge.agy" or n.startswith("bridge.agy.")]
print("\\n".join(sorted(agy)))
"""


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_adapter_loads_no_agy_module(adapter: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, adapter], capture_output=True, text=True, timeout=60
    )
    # A failed import would also print no agy module: the empty answer counts only after it.
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []

"""Loading a chat adapter loads no module of the agy layer.

The layers know each other in one direction only (chat knows neither agy nor the core's turn
runner): an adapter that pulls in agy's process, wire and launch modules on import can come to
depend on them without anyone noticing. The adapters are imported in a fresh interpreter, since
this test process has loaded ``bridge.agy`` long before: one interpreter for the three, each
adapter's agy modules noted once it is imported. A module only ever joins ``sys.modules``, so
none of agy's after an adapter and the ones before it means none from that adapter alone (an
interpreter of its own for each was about 0.8 s of CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ADAPTERS = [
    "bridge.chat.slack.adapter",
    "bridge.chat.matrix.adapter",
    "bridge.chat.console.adapter",
]

PROBE = """
import importlib, json, sys
for adapter in sys.argv[1:]:
    importlib.import_module(adapter)
    agy = [n for n in sys.modules if n == "bridge.agy" or n.startswith("bridge.agy.")]
    print(json.dumps({"adapter": adapter, "agy": sorted(agy)}), flush=True)
"""


@pytest.fixture(scope="module")
def agy_after(request: pytest.FixtureRequest) -> tuple[dict[str, list[str]], str]:
    """Each adapter's agy modules, and the interpreter's stderr (a failed import's traceback).
    Once a run: a worker given the other adapters' tests reads what the first one noted
    (tests/shared_servers.py's records)."""
    from tests.shared_servers import Run, run_of  # a plugin: see tests/conftest.py's postgres

    def probe(run: Run) -> dict[str, str]:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *ADAPTERS], capture_output=True, text=True, timeout=60
        )
        return {"stdout": done.stdout, "stderr": done.stderr}

    done = run_of(request.config).shared("adapters-agy-modules", probe)
    noted = [json.loads(line) for line in done["stdout"].splitlines()]
    return {n["adapter"]: n["agy"] for n in noted}, done["stderr"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_adapter_loads_no_agy_module(
    adapter: str, agy_after: tuple[dict[str, list[str]], str]
) -> None:
    found, stderr = agy_after
    # A failed import would also list no agy module: only a noted adapter counts.
    assert adapter in found, stderr
    # Named with the adapters imported before it, which may have failed this test first.
    before = ADAPTERS[: ADAPTERS.index(adapter) + 1]
    assert found[adapter] == [], f"agy's modules after importing {before}"

"""anyio's pytest plugin, imported without importing trio (tests/conftest.py registers it).

When imported, anyio's plugin asks which of its backends can be imported, to give its own
``anyio_backend`` fixture a parameter for each; Selenium brings trio, so every pytest process
(the controller and each xdist worker) imported trio for that question alone: about 0.3 s of
CPU each. The suite runs on asyncio only (tests/conftest.py's ``anyio_backend``), so the plugin
is imported here with the question answered "asyncio". pyproject's addopts keep the entry
point's copy out (``-p no:anyio``); the plugin is the same module, hooks and fixtures.
"""

from __future__ import annotations

import anyio

_available = anyio.get_available_backends
anyio.get_available_backends = lambda: ("asyncio",)
try:
    import anyio.pytest_plugin
finally:
    anyio.get_available_backends = _available

"""A simulator of the Antigravity CLI (``agy``), for tests and for ``make run`` without agy.

``python -m bridge.simulator ARGS`` behaves like ``agy ARGS`` in stream-json print mode: it
loads plugins from ``--add-dir`` folders, runs their ``PreInvocation`` hooks for real, calls
MCP tools through the official SDK client, and writes agy's event stream. It reads its inputs
as strictly as agy does, so a wrong shape written by the bridge fails a test.

It deliberately shares no code with the bridge (no ``bridge.agy`` models): a fake that used the
bridge's own parser would hide the bridge's bugs. Only the standard library is imported at
start; the ``mcp`` SDK is imported when a turn first calls an MCP tool. See README.md.
"""

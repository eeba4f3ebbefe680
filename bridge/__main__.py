"""`python -m bridge` is the `agy-bridge` command."""

from bridge.heap import for_the_start

# Before the imports, which are most of a start (bridge/heap.py).
for_the_start()

from bridge.cli import main  # noqa: E402

raise SystemExit(main())

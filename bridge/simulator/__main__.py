"""``python -m bridge.simulator ARGS`` behaves like ``agy ARGS``."""

from bridge.simulator.cli import main

raise SystemExit(main())

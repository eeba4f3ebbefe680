"""`python -m bridge` is the `agy-bridge` command."""

from bridge.cli import main

raise SystemExit(main())

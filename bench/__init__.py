"""Benchmarks of agy-bridge. Each module here with a ``main()`` is run by ``python -m bench``;
each prints its measurements beside a baseline taken in the same run, as ratios."""

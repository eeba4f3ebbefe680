"""``python -m bench``: run every benchmark module in this package, one after the other.

    python -m bench [--quick] [NAME ...]

``--quick`` runs each at its smallest size (its own ``--quick``); NAMEs (``overhead``,
``scale``, …) run only those, in the order given. Each benchmark's output follows a line
``== bench.NAME``. The smoke tests run their benchmarks a few to a process this way: a
process of its own for each cost one more start (about a second of CPU importing the bridge).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence
from typing import cast

import bench


def benchmarks(only: Sequence[str] = ()) -> list[tuple[str, Callable[[list[str]], int]]]:
    """(name, main) of every benchmark, or of those in ``only`` (the others not imported)."""
    found = []
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or (only and info.name not in only):
            continue
        module = importlib.import_module(f"bench.{info.name}")
        main = getattr(module, "main", None)
        if callable(main):
            found.append((info.name, cast(Callable[[list[str]], int], main)))
    return found


def run_all(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="each at its smallest size")
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these benchmarks")
    args = parser.parse_args(argv)
    found = dict(benchmarks(args.names))
    unknown = [name for name in args.names if name not in found]
    if unknown:
        parser.error(f"no benchmark named {', '.join(unknown)}")
    status = 0
    for name in args.names or list(found):
        print(f"== bench.{name}", flush=True)
        status = max(status, found[name](["--quick"] if args.quick else []))
        print(flush=True)
    return status


if __name__ == "__main__":
    sys.exit(run_all())

"""``python -m bench``: run every benchmark module in this package, one after the other."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable
from typing import cast

import bench


def benchmarks() -> list[tuple[str, Callable[[list[str]], int]]]:
    found = []
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"bench.{info.name}")
        main = getattr(module, "main", None)
        if callable(main):
            found.append((info.name, cast(Callable[[list[str]], int], main)))
    return found


def run_all() -> int:
    status = 0
    for name, main in benchmarks():
        print(f"== bench.{name}", flush=True)
        status = max(status, main([]))
        print(flush=True)
    return status


if __name__ == "__main__":
    sys.exit(run_all())

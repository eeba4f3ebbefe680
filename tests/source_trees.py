"""Parsing the bridge's own source for the tests that read its shape (imports, private names,
class sizes)."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse(path: Path) -> ast.Module:
    """``path`` parsed, with the garbage collector held off meanwhile: CPython 3.11 can fail an
    ``ast.parse`` with "AST constructor recursion depth mismatch" when a collection runs a
    finaliser inside it (seen when another test's unclosed aiohttp session was collected)."""
    source = path.read_text(encoding="utf-8")
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()

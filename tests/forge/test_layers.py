"""bridge/forge knows no chat platform, no agy and no core: the joining lives in bridge/core."""

from __future__ import annotations

import ast
from pathlib import Path

FORGE = Path(__file__).resolve().parents[2] / "bridge" / "forge"


def test_forge_imports_nothing_of_the_bridge_but_itself() -> None:
    for path in FORGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("bridge."):
                    assert name.startswith("bridge.forge"), f"{path.name} imports {name}"

"""No class in ``bridge/`` grows past about 300 lines: its shape stays easy to change (the
thread actor issue split the worker, the store and the turn runner along what they do; issue
42 split the Matrix sync worker into a classifier, a dispatcher, decryption and room
housekeeping, and the Slack adapter and live reply into the parts they wire)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.source_trees import parse

LIMIT = 300
BRIDGE = Path(__file__).resolve().parents[1] / "bridge"


def sizes(root: Path) -> dict[str, int]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                name = f"{path.relative_to(root.parent)}:{node.name}"
                found[name] = node.end_lineno - node.lineno + 1
    return found


def test_no_class_in_the_bridge_is_over_the_limit() -> None:
    found = sizes(BRIDGE)
    assert "bridge/core/turn.py:TurnRunner" in found, "the walk found no class: wrong folder?"
    assert {name: lines for name, lines in found.items() if lines > LIMIT} == {}

"""No module of ``bridge/`` takes another module's or object's private names.

A leading underscore says "mine; may change without notice". Reaching into one from outside
(``x._name`` where ``x`` is not ``self`` or ``cls``, or ``from m import _name``) ties two
modules together where no one reading either would look. The walk reads every module's source
(nothing is imported); dunders are public by convention.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.source_trees import parse

ROOT = Path(__file__).resolve().parents[1]

# (module path, name): the few uses that stay, each for its reason.
ALLOWED = {
    # A public stdlib API despite its name: leave at once, not waiting for daemon threads.
    ("bridge/simulator/cli.py", "_exit"),
    # Public API of named tuples (the underscore only keeps it apart from field names).
    ("bridge/core/store/postgres.py", "_replace"),
    # nio offers no public way to send a request it built; why, in the module's docstring.
    ("bridge/chat/matrix/nio_private.py", "_send"),
    # nio's OlmAccount has no fallback-key methods; why, in the module's docstring.
    ("bridge/chat/matrix/nio_private.py", "_account"),
    # nio accepts forwarded keys from own devices only; why, in the module's docstring.
    ("bridge/chat/matrix/nio_private.py", "_should_accept_forward"),
    # aiosqlite offers no public way to wait for its worker thread; why, in its docstring.
    ("bridge/core/store/aiosqlite_private.py", "_thread"),
    # The end of a process without the interpreter's teardown: os._exit is public; the atexit
    # functions have no public runner but their own (and threading's first step of an exit
    # none at all, hence a getattr); why, in the module's docstring.
    ("bridge/ending.py", "_exit"),
    ("bridge/ending.py", "_run_exitfuncs"),
}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def taken(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, name, the code) of every private name this source takes from elsewhere."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            found.append((node.lineno, node.attr, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            found.extend(
                (node.lineno, alias.name, f"from {node.module} import {alias.name}")
                for alias in node.names
                if private(alias.name)
            )
    return found


@functools.cache  # the two tests below read one walk of the source (1 s of parsing each)
def hits() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted((ROOT / "bridge").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for line, name, code in taken(parse(path)):
            out.setdefault((relative, name), []).append(f"{relative}:{line}: {code}")
    return out


def test_no_module_takes_private_names_of_another() -> None:
    found = hits()
    wrong = [where for key, places in found.items() if key not in ALLOWED for where in places]
    assert wrong == []


def test_every_exception_is_still_needed() -> None:
    """An exception whose use went away is dropped, so the sets name only what is there."""
    found = hits()
    assert sorted(ALLOWED - found.keys()) == []


def test_the_walk_sees_each_kind_of_private_use() -> None:
    source = """
from m import _hidden, public
from m import __version__
def f(other, self):
    other._state
    other.__class__
    self._mine
    cls._also_mine
    other.attr._deep
    call()._result
"""
    names = sorted(name for _, name, _ in taken(ast.parse(source)))
    assert names == ["_deep", "_hidden", "_result", "_state"]

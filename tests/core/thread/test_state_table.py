"""docs/architecture.md's table of a thread's transitions names only what the machine has, and
every phase the machine has: a renamed phase or command makes the table fail here."""

from __future__ import annotations

import re
from pathlib import Path

from bridge.core.thread import commands, effects
from bridge.core.thread.machine import Phase

DOC = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"


def table_rows() -> list[list[str]]:
    text = DOC.read_text()
    section = text.split("## A thread's state machine", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def test_the_table_names_real_phases_commands_and_effects() -> None:
    rows = table_rows()
    assert len(rows) > 15
    phases = {p.value for p in Phase}
    seen: set[str] = set()
    for phase, command, after, done in rows:
        named = set(re.findall(r"[a-z]+", phase + " " + after)) & phases
        seen |= named
        for name in re.findall(r"`([A-Z][A-Za-z]+)", command):
            assert hasattr(commands, name), f"no command {name} (in {command!r})"
        for name in re.findall(r"`([A-Z][A-Za-z]+)", done):
            assert hasattr(effects, name), f"no effect {name} (in {done!r})"
    # Every phase but the end appears in the table (gone is described below it).
    assert phases - seen <= {"gone"}, phases - seen

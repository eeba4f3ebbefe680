"""Each turn benchmark runs at its smallest size and prints its table.

Nothing here looks at speed: the numbers are only checked to be numbers. The benchmarks run as
``python -m bench --quick NAME …``, as a person runs several: three to a process, in two test
items the workers share (a process for each cost four more starts of the bridge's imports,
about a second of CPU each); each benchmark's output is checked apart.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Three benchmarks an item: at a load of 12 on two cores the six took 189 s in all, so an
# item may outlast the suite's 120 s on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def run_quick(*names: str) -> dict[str, str]:
    """Each benchmark's output (what follows its ``== bench.NAME`` line)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", *names],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    parts = re.split(r"^== bench\.(\w+)\n", done.stdout, flags=re.MULTILINE)
    outputs = dict(zip(parts[1::2], parts[2::2], strict=True))
    assert list(outputs) == list(names), done.stdout
    return outputs


# Two processes of about the same length: the overhead benchmark is the longest.
def test_overhead_slack_tiers_and_thread_repo() -> None:
    outputs = run_quick("overhead", "slack_tiers", "thread_repo")
    overhead_compares_every_variant_with_direct(outputs["overhead"])
    slack_tiers_completes_every_answer_within_the_tiers(outputs["slack_tiers"])
    thread_repo_compares_a_first_start_with_the_linked_worktree(outputs["thread_repo"])


def test_scale_persistent_and_approval_latency() -> None:
    outputs = run_quick("scale", "persistent", "approval_latency")
    scale_reports_both_variants_and_rounds(outputs["scale"])
    persistent_compares_a_kept_process_with_one_per_turn(outputs["persistent"])
    approval_latency_prints_the_click_and_its_baseline(outputs["approval_latency"])


def tables(output: str, first_header: str) -> list[list[list[str]]]:
    """The body rows of every Markdown table whose first column is ``first_header``."""
    found: list[list[list[str]]] = []
    rows: list[list[str]] | None = None
    for line in output.splitlines():
        if line.startswith(f"| {first_header} "):
            rows = []
            found.append(rows)
        elif rows is not None and line.startswith("|") and not line.startswith("|-"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif not line.startswith("|"):
            rows = None
    return found


def table_rows(output: str, first_header: str) -> list[list[str]]:
    return tables(output, first_header)[0]


def number(cell: str) -> float:
    return float(cell.split()[0].rstrip("x%"))


def overhead_compares_every_variant_with_direct(output: str) -> None:
    rows = {row[0]: row for row in table_rows(output, "variant")}
    assert list(rows) == ["direct", "direct+hook", "core", "slack"]
    for row in rows.values():
        assert int(row[1]) > 0  # measured turns
        assert number(row[2]) > 0 and number(row[3]) >= number(row[2])  # p50 <= p99
    assert rows["direct"][4] == "-" and rows["direct"][5] == "1.00x"
    assert "goal: the core adds under 10 ms per turn at p50" in output


def scale_reports_both_variants_and_rounds(output: str) -> None:
    rows = table_rows(output, "threads")
    assert [(row[1], row[2]) for row in rows] == [
        ("direct", "cold"),
        ("direct", "warm"),
        ("bridge", "cold"),
        ("bridge", "warm"),
    ]
    for row in rows:
        threads, deltas, errors = int(row[0]), int(row[10]), int(row[11])
        assert errors == 0
        assert deltas == threads * 5  # --quick: every answer in 5 chunks
        assert number(row[5]) > 0  # CPU per 1000 deltas
    summary = tables(output, "threads")[1]
    assert summary[0][0] == "2"
    # Up to 5 appends and a finish per reply: deltas that arrive together are one append.
    p50, most = (int(part) for part in summary[0][-2].split(" / "))
    assert 2 <= p50 <= most <= 6
    assert number(summary[0][-1]) > 0  # what a new inode cost where the bridge kept its files
    # The most the bridge held is at least what it held with every session alive.
    assert number(summary[0][6]) >= number(summary[0][5]) > 0
    # The direct variant makes its threads' files in the cold round, as the bridge does; the
    # ratio without them (as measured before) is beside it, and is the larger.
    assert number(summary[0][1]) < number(summary[0][3])


def persistent_compares_a_kept_process_with_one_per_turn(output: str) -> None:
    # The sandbox's price per start, side by side (or the reason it could not be measured).
    starts = tables(output, "start")
    if starts:
        assert [row[0] for row in starts[0]] == [
            "plain",
            "sandbox, shared state (before)",
            "sandbox, private state (now)",
        ]
        assert all(number(row[2]) > 0 for row in starts[0])
        assert "goal: the private agy state adds under 20 ms per start" in output
    else:
        assert "sandboxed start not measured:" in output
    rows = {row[1]: row for row in table_rows(output, "startup delay")}
    assert list(rows) == [
        "direct persistent",
        "direct per turn",
        "bridge persistent",
        "bridge per turn",
    ]
    for name in ("direct per turn", "bridge per turn"):
        assert number(rows[name][5]) == pytest.approx(
            number(rows[name][2]) - number(rows[name.replace("per turn", "persistent")][2]),
            abs=1.5,
        )


def approval_latency_prints_the_click_and_its_baseline(output: str) -> None:
    rows = {row[0]: row for row in table_rows(output, "path")}
    assert list(rows) == ["click → agy reads allow", "click → Slack ack (baseline)"]
    for row in rows.values():
        assert int(row[1]) == 5 and number(row[3]) > 0


def slack_tiers_completes_every_answer_within_the_tiers(output: str) -> None:
    rows = {row[0]: row for row in table_rows(output, "method")}
    assert "chat.startStream" in rows
    for row in rows.values():
        assert int(row[1]) > 0  # calls
        assert int(row[5]) == 0  # no 429 from the fake
    assert "final answers complete 4/4" in output


def thread_repo_compares_a_first_start_with_the_linked_worktree(output: str) -> None:
    rows = {row[0]: row for row in table_rows(output, "first start")}
    assert list(rows) == ["linked worktree (before)", "repository of its own (now)"]
    for row in rows.values():
        assert int(row[1]) > 0 and number(row[2]) > 0
    assert "bringing the branch back after a turn" in output

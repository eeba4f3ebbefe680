"""The console bench runs small and prints its table (nothing here looks at speed)."""

from __future__ import annotations

import pytest

from tests.bench.test_bench_smoke import number, run_quick, table_rows

pytestmark = pytest.mark.slow


def test_the_console_bench_sets_each_page_beside_a_static_file_of_its_size() -> None:
    output = run_quick("console")["console"]
    rows = table_rows(output, "page")
    assert [row[0] for row in rows] == [
        "threads, page 1 (admin)",
        "live thread (admin)",
        "threads, page 1 (member)",
        "live thread (member)",
    ]
    for row in rows:
        assert int(row[1].replace(",", "")) > 1000  # the page's bytes: a real page, not an error
        assert int(row[2]) == 10  # --quick: ten requests each
        page_p50, page_p99, static_p50, static_p99 = (number(cell) for cell in row[3:7])
        assert 0 < page_p50 <= page_p99 and 0 < static_p50 <= static_p99
        assert row[7].endswith("x") and number(row[7]) > 0
    # Twenty threads, one per line, and the streaming turn's page is its own live page.
    assert "20 threads in the store, one turn streaming" in output
    assert "goal: every page within 3x of a static file of its size at p50:" in output

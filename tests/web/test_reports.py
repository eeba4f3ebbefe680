"""The reports: schedules of one's channels with their runs, budgets where they stand, the audit
trail filtered with its chain's state; and the web layer knows nothing of agy."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.web.harness import OTHER, ROOM, web_console

WEB = Path(__file__).resolve().parents[2] / "bridge" / "web"


def test_schedules_of_ones_channels(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        w.run(w.h.say, '!schedule add "30 6 * * *" summarise the night', where=ROOM, who="alice")
        w.run(w.h.say, '!schedule add "0 7 * * *" carols report', where=OTHER, who="carol")
        alice = w.sign_in("alice").get("/schedules").text
        assert "summarise the night" in alice and "30 6 * * *" in alice
        assert "carols report" not in alice and "No run yet" in alice
        root = w.sign_in("root").get("/schedules").text
        assert "summarise the night" in root and "carols report" in root


def test_budgets_where_they_stand(tmp_path: Path) -> None:
    budgets = [{"name": "monthly", "scope": "user", "limit_tokens": 1_000_000}]
    with web_console(tmp_path, budgets=budgets) as w:
        page = w.sign_in("alice").get("/usage").text
        assert "monthly" in page and "1,000,000 tokens" in page and "@alice:test" in page


def test_the_audit_trail_filtered_and_its_chain(tmp_path: Path) -> None:
    with web_console(tmp_path) as w:
        w.run(w.h.say, "!status", where=ROOM, who="alice")
        w.run(w.h.say, "!help", where=ROOM, who="bob")
        root = w.sign_in("root")
        everything = root.get("/audit").text
        assert "Hash chain: intact" in everything
        assert "console_signin" in everything and "@bob:test" in everything
        only_bob = root.get("/audit?person=@bob:test").text
        assert "@bob:test" in only_bob and "console_signin" not in only_bob
        commands = root.get("/audit?kind=console_signin").text
        assert "console_signin" in commands and "@bob:test" not in commands
        # A record changed in the store: the page says the chain is broken.
        w.run(
            w.h.bridge.store.database.execute,
            "UPDATE audit SET person = 'mallory' WHERE seq = (SELECT MIN(seq) FROM audit)",
        )
        assert "BROKEN" in root.get("/audit").text


def test_the_web_layer_imports_nothing_of_agy() -> None:
    for path in WEB.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(name.startswith("bridge.agy") for name in names), path

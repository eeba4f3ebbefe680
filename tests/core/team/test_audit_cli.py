"""``agy-bridge audit`` as an operator runs it: the command line, its exit codes, its output."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from bridge import cli
from bridge.audit_cli import TimeError, parse_time
from bridge.core.events import Author, ThreadRef
from bridge.core.store.opening import open_store
from bridge.core.team.audit import AuditLog

REF = ThreadRef(platform="slack", channel="C1", thread="1700.1")


def config(tmp_path: Path) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(f'[bridge]\ndata_dir = "{tmp_path / "data"}"\n', encoding="utf-8")
    return path


async def fill(tmp_path: Path) -> None:
    async with open_store(f"sqlite:///{tmp_path / 'data' / 'bridge.sqlite3'}") as store:
        log = AuditLog(store.database, "i1")
        await log.append("command", thread=REF, person=Author(id="U1"), command="new")
        await log.append("command", thread=REF, person=Author(id="U2"), command="stop")


@pytest.mark.usefixtures("restore_logging")
def test_export_and_verify_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    anyio.run(fill, tmp_path, backend="asyncio")
    assert cli.main(["audit", "--config", str(config(tmp_path)), "--user", "U2"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    record = json.loads(line)
    assert record["person"] == "U2" and record["detail"]["command"] == "stop"
    assert record["seq"] == 2 and record["time"].endswith("Z")
    assert cli.main(["audit", "verify", "--config", str(config(tmp_path))]) == 0
    assert capsys.readouterr().out.startswith("audit trail intact: 2 record(s); head 2:")
    assert cli.main(["audit", "--config", str(config(tmp_path)), "--since", "soon"]) == 2
    assert "`soon` is not a time" in capsys.readouterr().err


def test_times_are_dates_times_or_spans_back() -> None:
    assert parse_time("2026-12-01", "UTC") == 1796083200.0
    assert parse_time("2026-12-01T01:00", "Europe/Paris") == 1796083200.0
    assert parse_time("2026-12-01T00:00Z", "Europe/Paris") == 1796083200.0
    assert parse_time("7d", "UTC", now=1_000_000.0) == 1_000_000.0 - 7 * 86400
    with pytest.raises(TimeError):
        parse_time("last tuesday", "UTC")

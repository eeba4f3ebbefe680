"""The simulator's own atomic file replacement and uuid4 ids (it imports neither tempfile nor
uuid: see bridge/simulator/atomic.py)."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest

from bridge.simulator.atomic import new_uuid4, replace_file


def test_new_ids_are_version_4_uuids_in_uuid_s_own_spelling() -> None:
    ids = {new_uuid4() for _ in range(200)}
    assert len(ids) == 200
    for text in ids:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text


def test_replace_file_leaves_only_the_new_private_file(tmp_path: Path) -> None:
    target = tmp_path / "c.json"
    target.write_bytes(b"old")
    replace_file(target, b"new", prefix=".tmp-", sync=True)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # as tempfile.mkstemp made it
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "c.json"
    target.write_bytes(b"old")
    with pytest.raises(TypeError):
        replace_file(target, "not bytes", prefix=".tmp-", sync=False)  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]

"""The bridge's own file I/O: no link followed on the way, no FIFO waited on, sizes capped."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bridge.safe_files import (
    UnsafePath,
    create_file,
    ensure_real_dir,
    open_dir,
    open_regular,
    opened_dir,
    parts_below,
    read_below,
    read_small,
)


def test_a_link_anywhere_below_the_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "link").symlink_to(outside)
    os.close(open_dir(root, ["real"]))
    with pytest.raises(UnsafePath) as refused:
        open_dir(root, ["link"])
    assert refused.value.errno in (errno.ELOOP, errno.ENOTDIR)
    with pytest.raises(UnsafePath):
        open_dir(root, ["link", "deeper"], create=True)
    assert list(outside.iterdir()) == []


def test_a_new_file_is_never_an_existing_one_nor_a_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "link").symlink_to(target)
    with opened_dir(tmp_path) as folder:
        os.close(create_file(folder, "new"))
        with pytest.raises(FileExistsError):
            create_file(folder, "link")
        with pytest.raises(FileExistsError):
            create_file(folder, "new")
        with pytest.raises(UnsafePath):
            create_file(folder, "../escape")
    assert target.read_text() == "keep"


def test_a_fifo_is_refused_without_waiting_and_sizes_are_capped(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "small").write_bytes(b"ok")
    # No writer ever opens the FIFO: a blocking open would hang this test.
    with pytest.raises(UnsafePath, match="not a regular file"):
        read_small(tmp_path / "fifo")
    with opened_dir(tmp_path) as folder:
        with pytest.raises(UnsafePath, match="not a regular file"):
            open_regular(folder, "fifo", 1000)
        with pytest.raises(UnsafePath) as big:
            open_regular(folder, "big", 10)
        assert big.value.errno == errno.EFBIG
    assert read_below(tmp_path, tmp_path / "small", 10) == b"ok"
    with pytest.raises(UnsafePath):
        read_small(tmp_path / "big", 10)


def test_paths_below_a_root_are_lexical(tmp_path: Path) -> None:
    assert parts_below(tmp_path, tmp_path / "a" / "b") == ("a", "b")
    with pytest.raises(UnsafePath):
        parts_below(tmp_path, tmp_path / "a" / ".." / ".." / "x")
    with pytest.raises(UnsafePath):
        parts_below(tmp_path / "a", tmp_path / "b")


def test_a_link_or_file_in_place_of_a_bound_folder_is_replaced(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (tmp_path / "attachments").symlink_to(outside)
    assert ensure_real_dir(tmp_path, "attachments").is_dir()
    assert not (tmp_path / "attachments").is_symlink()
    assert (outside / "keep").exists()
    (tmp_path / "hooks").write_text("not a folder")
    assert ensure_real_dir(tmp_path, "hooks").is_dir()

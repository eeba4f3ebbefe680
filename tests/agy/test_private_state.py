"""A thread's private agy state on disk: where it lives, made safe to bind, old conversations in."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bridge.agy.private_state import (
    StateLayout,
    binds,
    conversation_reachable,
    migrate,
    prepare,
)


def layout(tmp_path: Path, *, root: Path | None = None) -> StateLayout:
    return StateLayout(
        shared=(tmp_path / "gemini", tmp_path / "sim-home"),
        login_entries=("antigravity-cli/token", "sim-login.json"),
        root=root,
    )


def test_a_private_directory_per_state_directory_where_every_instance_finds_it(
    tmp_path: Path,
) -> None:
    """Not under one instance's data directory: inside agy's state directory by default (one
    host), under ``[agy] state_root`` when set (storage several hosts share)."""
    session = tmp_path / "data" / "sessions" / "slack-abc"
    gemini = layout(tmp_path).private_dir(tmp_path / "gemini", session)
    assert gemini == tmp_path / "gemini" / ".agy-bridge-threads" / "slack-abc"
    root = tmp_path / "shared"
    gemini, sim = (
        layout(tmp_path, root=root).private_dir(tmp_path / "gemini", session),
        layout(tmp_path, root=root).private_dir(tmp_path / "sim-home", session),
    )
    assert gemini.parent == sim.parent == root / "slack-abc" and gemini != sim


def test_only_login_entries_that_exist_are_bound(tmp_path: Path) -> None:
    (tmp_path / "sim-home").mkdir()
    (tmp_path / "sim-home" / "sim-login.json").write_text("{}")
    found = {b.shared.name: b.login for b in binds(layout(tmp_path), tmp_path / "s")}
    assert found == {"gemini": (), "sim-home": (tmp_path / "sim-home" / "sim-login.json",)}


def test_links_on_the_way_are_removed_and_their_targets_left_alone(tmp_path: Path) -> None:
    session, target = tmp_path / "s", tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("mine")
    (tmp_path / "gemini" / "antigravity-cli").mkdir(parents=True)
    (tmp_path / "gemini" / "antigravity-cli" / "token").write_text("{}")
    session.mkdir()
    (tmp_path / "gemini" / ".agy-bridge-threads").symlink_to(target)
    prepare(layout(tmp_path), session)
    threads = tmp_path / "gemini" / ".agy-bridge-threads"
    assert not threads.is_symlink() and threads.is_dir()
    [private] = binds(layout(tmp_path), session)[:1]
    place = private.private / "antigravity-cli" / "token"
    assert place.is_file() and not place.is_symlink()
    # A link the agent made at the login's place in its own state, between two starts:
    place.unlink()
    place.symlink_to(target / "keep")
    prepare(layout(tmp_path), session)
    assert place.is_file() and not place.is_symlink()
    assert (target / "keep").read_text() == "mine" and sorted(target.iterdir()) == [target / "keep"]


def test_the_first_start_moves_only_that_conversation(tmp_path: Path) -> None:
    sim = tmp_path / "sim-home"
    (sim / "conversations").mkdir(parents=True)
    (sim / "brain" / "c-1").mkdir(parents=True)
    (sim / "conversations" / "c-1.json").write_text("one")
    (sim / "conversations" / "c-2.json").write_text("two")
    agy = tmp_path / "gemini" / "antigravity-cli" / "brain" / "c-1"
    agy.mkdir(parents=True)
    (agy / "transcript.jsonl").write_text("{}")
    session = tmp_path / "s"
    session.mkdir()
    moved = prepare(layout(tmp_path), session, "c-1")
    assert sorted(moved) == ["antigravity-cli/brain/c-1", "brain/c-1", "conversations/c-1.json"]
    assert not (sim / "conversations" / "c-1.json").exists()
    assert (sim / "conversations" / "c-2.json").exists()  # another thread's
    private = layout(tmp_path).private_dir(sim, session)
    assert (private / "conversations" / "c-1.json").read_text() == "one"
    # Once only: a later start of the thread moves nothing.
    (sim / "conversations" / "c-1.json").write_text("again")
    assert prepare(layout(tmp_path), session, "c-1") == []


def test_a_conversation_id_that_is_no_file_name_moves_nothing(tmp_path: Path) -> None:
    (tmp_path / "sim-home" / "conversations").mkdir(parents=True)
    (tmp_path / "sim-home" / "conversations" / "x.json").write_text("x")
    session = tmp_path / "s"
    session.mkdir()
    assert prepare(layout(tmp_path), session, "../conversations/x") == []


def test_private_state_beside_the_sessions_moves_where_every_instance_finds_it(
    tmp_path: Path,
) -> None:
    """The layout before: ``<session>/agy-state/<name>-<hash>``, under one instance's data
    directory. At start it moves, whole, to the state directory's folder of threads."""
    sessions = tmp_path / "data" / "sessions"
    old = layout(tmp_path).earlier_places(tmp_path / "sim-home", sessions / "slack-a")[0][0]
    (old / "conversations").mkdir(parents=True)
    (old / "conversations" / "c-1.json").write_text("one")
    (old / "link").symlink_to("/etc/passwd")
    # A thread whose folder is a link (the agent's doing): followed nowhere, left alone.
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "sim-home-x" / "conversations").mkdir(parents=True)
    (sessions / "slack-b").mkdir()
    (sessions / "slack-b" / "agy-state").symlink_to(elsewhere)
    assert migrate(layout(tmp_path), sessions) == 1
    new = layout(tmp_path).private_dir(tmp_path / "sim-home", sessions / "slack-a")
    assert (new / "conversations" / "c-1.json").read_text() == "one"
    assert (new / "link").is_symlink()  # moved as a link, not copied through
    assert not (sessions / "slack-a" / "agy-state").exists()
    assert (elsewhere / "sim-home-x" / "conversations").is_dir()
    assert not (tmp_path / "sim-home" / ".agy-bridge-threads" / "slack-b").exists()
    # Once: nothing is left to move, and a later start finds it in place.
    assert migrate(layout(tmp_path), sessions) == 0
    assert conversation_reachable(layout(tmp_path), sessions / "slack-a", "c-1")
    assert not conversation_reachable(layout(tmp_path), sessions / "slack-a", "c-2")


def test_with_a_root_the_folders_in_the_state_directories_move_there_too(tmp_path: Path) -> None:
    session = tmp_path / "data" / "sessions" / "slack-a"
    session.mkdir(parents=True)
    before = tmp_path / "sim-home" / ".agy-bridge-threads" / "slack-a"
    (before / "conversations").mkdir(parents=True)
    (before / "conversations" / "c-1.json").write_text("one")
    rooted = layout(tmp_path, root=tmp_path / "root")
    assert conversation_reachable(rooted, session, "c-1")  # in reach: moved at the start
    prepare(rooted, session, "c-1")
    new = rooted.private_dir(tmp_path / "sim-home", session)
    assert (new / "conversations" / "c-1.json").read_text() == "one" and not before.exists()
    # Another host's root: nothing of the thread there.
    assert not conversation_reachable(layout(tmp_path, root=tmp_path / "other"), session, "c-1")


def test_a_move_to_another_filesystem_copies_links_as_links_and_no_fifo(tmp_path: Path) -> None:
    """A ``state_root`` on other storage: no rename, a copy. A FIFO the agent left in its
    state is left out (opening it would block the bridge's start); links stay links."""
    other = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        if os.stat(other).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the same filesystem as the test's folder here")
        sessions = tmp_path / "data" / "sessions"
        rooted = layout(tmp_path, root=other)
        old = rooted.earlier_places(tmp_path / "sim-home", sessions / "slack-a")[0][0]
        (old / "conversations").mkdir(parents=True)
        (old / "conversations" / "c-1.json").write_text("one")
        (old / "link").symlink_to("/etc/passwd")
        os.mkfifo(old / "fifo")
        assert migrate(rooted, sessions) == 1
        new = rooted.private_dir(tmp_path / "sim-home", sessions / "slack-a")
        assert (new / "conversations" / "c-1.json").read_text() == "one"
        assert (new / "link").is_symlink() and not (new / "fifo").exists()
        assert not old.exists()
    finally:
        shutil.rmtree(other)

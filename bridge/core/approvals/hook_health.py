"""Threads whose agy was caught running tools without the gate, until an agy that runs the
hooks is back.

A thread whose agy skipped the hooks (:mod:`.hook_watch`) starts no new turn: the next agy
would be the same program with the same login and skip them again. The bridge cannot know
that an agy runs the hooks without letting it run a turn, so it takes a change of what made
agy skip them as the sign: agy's program (a new version installed: its file changes) or its
login (the login entries in its state directories, the config file). A restart of the bridge
also lets the thread go (the operator has looked). Held threads are kept per bridge process,
for every thread actor of that thread, and shown by ``!status``.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bridge.config import Config
from bridge.core.approvals.secrets import secret_paths

log = logging.getLogger(__name__)

Identity = tuple[tuple[str, int, int, int], ...]


def identity_of(paths: Sequence[Path]) -> Identity:
    """What the files that make agy what it is look like now (a missing one counts too)."""
    found = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            found.append((str(path), 0, 0, -1))
            continue
        found.append((str(path), st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(found)


def agy_files(command: Sequence[str], login: Sequence[Path]) -> list[Path]:
    """agy's program (its first word, found on PATH; a script run by an interpreter counts by
    its own file too) and its login files."""
    files: list[Path] = []
    for word in command[:2]:
        found = shutil.which(word) if os.sep not in word else word
        if found and Path(found).is_file():
            files.append(Path(found))
    return [*files, *login]


class HookHealth:
    """The held threads of this bridge process."""

    def __init__(self, identity: Callable[[], Identity]) -> None:
        self._identity = identity
        self._held: dict[str, tuple[Identity, float]] = {}

    def hold(self, key: str) -> None:
        self._held[key] = (self._identity(), time.time())

    def held(self, key: str) -> bool:
        """Whether the thread is held still (a changed agy or login lets it go)."""
        entry = self._held.get(key)
        if entry is None:
            return False
        if self._identity() != entry[0]:
            del self._held[key]
            log.info("agy or its login changed: a held thread may run turns again")
            return False
        return True

    def since(self, key: str) -> float | None:
        entry = self._held.get(key)
        return entry[1] if entry is not None else None


def status_line(health: HookHealth | None, key: str) -> str | None:
    if health is None or not health.held(key):
        return None
    return (
        "• Hooks: 🛑 stopped: agy ran tools without the gate's hooks; no new turn until an "
        "agy that runs them is back (`agy-bridge doctor --live`)"
    )


def health_for(config: Config) -> HookHealth:
    """The bridge's register: agy's program, its login and the config file tell a changed agy."""
    files = agy_files(config.agy.command, secret_paths(config))
    return HookHealth(lambda: identity_of(files))

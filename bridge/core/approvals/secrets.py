"""Secret paths: what the gate asks before anything reads, and whose values the scrubber learns.

agy's login (``[agy] login_entries`` in each of agy's state directories, bound into every
sandbox), the bridge's config file, and ``[approvals] secret_paths``. A read of one asks
whatever the program (:mod:`argv_checks`); and because a person may approve such a read
(or a program the gate cannot see through may print one), the scrubber learns the values
those files hold (:class:`SecretFiles`), reading them at start and again when they change,
so that no chat message, upload or status carries them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bridge.config import Config
from bridge.core.scrub import Scrubber

log = logging.getLogger(__name__)

# Keys of a JSON login whose string values are secrets (access_token, refresh_token,
# id_token, client_secret, api_key, password …).
_SECRET_KEY = re.compile(r"token|secret|key|pass|cred|auth|cookie|session|code", re.I)
# A value that looks like a credential wherever it stands: long, no blanks.
_TOKENISH = re.compile(r"[A-Za-z0-9_\-./+=~:]{20,}")
# In a line of words, the word after one of these is a secret.
_AFTER_SECRET_WORD = re.compile(r"(?i)\b(?:password|passwd|token|secret|api[_-]?key)\s+(\S+)")
MIN_VALUE = 8
MAX_FILE = 256 * 1024
MAX_FILES = 64
RECHECK_SECONDS = 1.0


def login_paths(config: Config) -> list[Path]:
    """agy's login entries, in every state directory (the paths agy and its sandbox see)."""
    from bridge.isolation import state_dirs  # the layer that knows agy's state layout

    dirs = state_dirs(config, config.agy.command)
    return [folder / entry for folder in dirs for entry in config.agy.login_entries]


def secret_paths(config: Config) -> tuple[Path, ...]:
    """Every path a read of asks: agy's login, the config file, ``[approvals] secret_paths``."""
    paths = login_paths(config)
    if config.source is not None:
        paths.append(config.source)
    paths += [path.expanduser() for path in config.approvals.secret_paths]
    return tuple(Path(os.path.abspath(path)) for path in paths)


class SecretFiles:
    """The secret values in a set of files (or folders), read again when one changes."""

    def __init__(self, paths: Sequence[Path], recheck: float = RECHECK_SECONDS):
        self.paths = tuple(paths)
        self._recheck = recheck
        self._checked = float("-inf")
        self._signature: tuple[Any, ...] | None = None
        self._values: tuple[str, ...] = ()
        self.generation = 0

    def values(self) -> tuple[str, ...]:
        """The values now (stat at most once a ``recheck``; read again on a change)."""
        now = time.monotonic()
        if now - self._checked < self._recheck:
            return self._values
        self._checked = now
        files = list(_files(self.paths))
        signature = tuple(_stat(path) for path in files)
        if signature != self._signature:
            self._signature = signature
            found: set[str] = set()
            for path in files:
                found.update(_read_values(path))
            if set(self._values) != found:
                self._values = tuple(sorted(found))
                self.generation += 1
                log.info("secret values learnt from %d file(s): %d", len(files), len(found))
        return self._values


def _files(paths: Sequence[Path]) -> Iterator[Path]:
    count = 0
    for path in paths:
        if path.is_dir():
            for folder, _, names in os.walk(path):
                for name in sorted(names):
                    count += 1
                    if count > MAX_FILES:
                        return
                    yield Path(folder) / name
        elif path.is_file():
            count += 1
            if count > MAX_FILES:
                return
            yield path


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _read_values(path: Path) -> set[str]:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE)
    except OSError:
        return set()
    text = data.decode("utf-8", "replace")
    return {value for value in values_in(text) if len(value) >= MIN_VALUE}


def values_in(text: str) -> set[str]:
    """The secret values a login or secrets file holds: in JSON, the string values under
    secret-like keys and any long token-like string; else each ``KEY=VALUE`` (or ``KEY:
    VALUE``) line's value and each line that is one token."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if data is not None and not isinstance(data, str | int | float | bool):
        return set(_json_values(data, ""))
    found = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"(?:export\s+)?[A-Za-z_][\w.\-]*\s*[=:]\s*(.+)$", line)
        value = match.group(1).strip().strip("'\"") if match else line
        if value and not any(c.isspace() for c in value):
            found.add(value)
        # `machine h login bob password s3cret` (.netrc), `token abc` …: the word after.
        found.update(_AFTER_SECRET_WORD.findall(line))
    return found


def _json_values(data: Any, key: str) -> Iterator[str]:
    if isinstance(data, dict):
        for name, value in data.items():
            yield from _json_values(value, str(name))
    elif isinstance(data, list):
        for item in data:
            yield from _json_values(item, key)
    elif isinstance(data, str):
        if _SECRET_KEY.search(key) or _TOKENISH.fullmatch(data):
            if not data.startswith(("http://", "https://")):
                yield data


def scrubber_for(config: Config) -> Scrubber:
    """The scrubber of everything the bridge posts: the config's secrets, and the values in
    agy's login and the other secret paths (read again when they change)."""
    return Scrubber(config.secret_values(), files=SecretFiles(secret_paths(config)))

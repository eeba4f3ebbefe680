"""Where the adapter keeps its state under the bridge's data directory, written privately.

``data_dir/matrix/`` holds ``login.json`` (user id, device id, access token), ``sync.json``
(the last processed ``next_batch``), ``cross_signing.json`` (the account's cross-signing
private keys), ``undecrypted.json`` (messages waiting for their room keys), ``upgrades.json``
(which room replaced which) and ``store/`` (nio's end-to-end encryption store); all readable by
the owner only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

RESET_FILE = "cross_signing_reset.json"


@dataclass(frozen=True)
class MatrixFiles:
    root: Path

    @classmethod
    def under(cls, data_dir: Path) -> MatrixFiles:
        return cls(root=data_dir / "matrix")

    @property
    def login(self) -> Path:
        return self.root / "login.json"

    @property
    def sync(self) -> Path:
        return self.root / "sync.json"

    @property
    def cross_signing(self) -> Path:
        return self.root / "cross_signing.json"

    @property
    def cross_signing_reset(self) -> Path:
        # Where a reset of the identity waits for the operator's approval (MAS), for doctor.
        return self.root / RESET_FILE

    @property
    def undecrypted(self) -> Path:
        return self.root / "undecrypted.json"

    @property
    def upgrades(self) -> Path:
        return self.root / "upgrades.json"

    @property
    def store(self) -> Path:
        return self.root / "store"

    def pending_reset_url(self) -> str | None:
        """The approval URL the last start was given, while a reset of the identity waits (for
        doctor, which reads it without importing matrix-nio)."""
        try:
            data = json.loads(self.cross_signing_reset.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        url = data.get("url") if isinstance(data, dict) else None
        return url if isinstance(url, str) else None

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.store.mkdir(parents=True, exist_ok=True)
        # The store holds encryption keys and login.json a token: only our user may read them.
        os.chmod(self.root, 0o700)
        os.chmod(self.store, 0o700)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)

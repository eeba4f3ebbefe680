"""Matrix rooms and threads as agy conversations (matrix-nio, end-to-end encryption).

The adapter's names are imported at their first use: the package's small modules (its files
under the data directory, for ``agy-bridge doctor``) can then be imported without matrix-nio,
which alone costs a second of CPU to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapter import MatrixAdapter, MatrixTuning, NotConnected

__all__ = ["MatrixAdapter", "MatrixTuning", "NotConnected"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(".adapter", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

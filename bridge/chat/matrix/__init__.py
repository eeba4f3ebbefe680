"""Matrix rooms and threads as agy conversations (matrix-nio, end-to-end encryption)."""

from .adapter import MatrixAdapter, MatrixTuning, NotConnected

__all__ = ["MatrixAdapter", "MatrixTuning", "NotConnected"]

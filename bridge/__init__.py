"""agy-bridge: chat threads as conversations of the Antigravity CLI (agy)."""

__version__ = "0.1.0"

"""A worktree thread's pull request (docs/pull-requests.md): the diff, the bridge-side push, the
PR on the forge, its checks followed back into the thread, the merge. The forge itself is
:mod:`bridge.forge`'s; this package joins it to threads."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridge.config import Config


def has_forge(config: Config) -> bool:
    """Whether any forge is configured: pull requests, their commands' forge side, webhooks."""
    return config.forge is not None or any(w.forge is not None for w in config.workspaces)

"""The adapter's task group while it runs, for the parts that start work of their own.

Slack wants events and clicks answered at once (three seconds for a click), so what follows
an answer (stopping a turn, a notice, a catch-up) runs as a task of the adapter's group.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from anyio.abc import TaskGroup


class TaskSlot:
    def __init__(self) -> None:
        self.group: TaskGroup | None = None

    @property
    def running(self) -> bool:
        return self.group is not None

    def spawn(self, task: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``task`` in the adapter's task group (nothing while it is not running)."""
        if self.group is not None:
            self.group.start_soon(task, *args)

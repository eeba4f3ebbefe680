"""A turn's tool calls as the answer stream's own tasks (``task_update`` chunks of
``chat.appendStream``, docs.slack.dev "text streaming"): one task per tool call, titled with its
one-line summary, ``in_progress`` while it runs and ``complete`` or ``error`` at its end.

The board only remembers what each task shows and which tasks the current stream has not been
told about yet; the reply sends those with its next append. A stream rolled over to a new
message starts with the tasks still running; the finished ones stay in the closed message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bridge.chat.slack.format import one_line
from bridge.core.events import ToolActivity

_STATUS = {"ACTIVE": "in_progress", "DONE": "complete", "ERROR": "error"}
# Slack shows a task's title on one line: keep it short.
TITLE_LIMIT = 120


def task_title(activity: ToolActivity) -> str:
    name = one_line(activity.name, 60) or "tool"
    summary = one_line(activity.summary, TITLE_LIMIT - len(name) - 2)
    return f"{name}: {summary}" if summary else name


@dataclass
class Task:
    id: str
    key: tuple[str, str]
    title: str
    status: str
    details: str | None = None

    def chunk(self) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "type": "task_update",
            "id": self.id,
            "title": self.title,
            "status": self.status,
        }
        if self.details:
            chunk["details"] = self.details
        return chunk


@dataclass
class TaskBoard:
    tasks: list[Task] = field(default_factory=list)
    # Task id -> the version the current stream has not been sent yet.
    dirty: dict[str, int] = field(default_factory=dict)
    _version: int = 0

    def record(self, activity: ToolActivity) -> None:
        """A tool call started (a new task) or ended (the latest running one of that call)."""
        key = (activity.name, activity.summary)
        status = _STATUS.get(activity.state, "in_progress")
        task = None
        if status != "in_progress":
            task = next(
                (t for t in reversed(self.tasks) if t.key == key and t.status == "in_progress"),
                None,
            )
        if task is None:
            task = Task(f"tool-{len(self.tasks) + 1}", key, task_title(activity), status)
            self.tasks.append(task)
        task.status = status
        if status == "error":
            task.details = one_line(activity.error or "failed", 200)
        self._touch(task)

    def _touch(self, task: Task) -> None:
        self._version += 1
        self.dirty[task.id] = self._version

    def pending(self) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """The chunks the current stream lacks, and what to pass :meth:`sent` once it has them."""
        chunks = [t.chunk() for t in self.tasks if t.id in self.dirty]
        return chunks, dict(self.dirty)

    def sent(self, versions: dict[str, int]) -> None:
        for task_id, version in versions.items():
            if self.dirty.get(task_id) == version:
                del self.dirty[task_id]

    def new_stream(self) -> None:
        """A new message streams the answer on: it starts with the tasks still running."""
        for task in self.tasks:
            if task.status == "in_progress":
                self._touch(task)

    def end(self, *, failed: bool) -> None:
        """The turn ended: a task still running ends with it."""
        for task in self.tasks:
            if task.status == "in_progress":
                task.status = "error" if failed else "complete"
                self._touch(task)

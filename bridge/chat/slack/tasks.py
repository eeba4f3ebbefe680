"""A turn's tool calls as the answer stream's own tasks (``task_update`` chunks of
``chat.appendStream``, docs.slack.dev "text streaming"): one task per tool call, titled with its
one-line summary, ``in_progress`` while it runs and ``complete`` or ``error`` at its end.

By default (``[slack] task_display = "plan"``) the stream starts with ``task_display_mode``
``plan``: Slack shows the tasks together as the agent's plan, under a title the board keeps
current with ``plan_update`` chunks ("Working: 2 of 3 steps done", then "Done: 3 steps").
With ``"timeline"`` the tasks are cards between the streamed text, and no plan title is sent
(a timeline shows none).

The board only remembers what each task shows and which tasks the current stream has not been
told about yet; the reply sends those with its next append. A stream rolled over to a new
message starts with the tasks still running; the finished ones stay in the closed message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.chat.slack.format import one_line
from bridge.core.events import ToolActivity

_STATUS = {"ACTIVE": "in_progress", "DONE": "complete", "ERROR": "error"}
# Slack shows a task's title on one line: keep it short.
TITLE_LIMIT = 120
TaskDisplay = Literal["plan", "timeline"]
# The plan's title among the board's dirty entries (no task id has a colon).
_PLAN = "plan:title"


def plan_title(tasks: list[Task], *, ended: bool = False, failed: bool = False) -> str:
    done = sum(1 for t in tasks if t.status in ("complete", "error"))
    total = len(tasks)
    steps = f"{total} step" + ("" if total == 1 else "s")
    if not ended:
        return f"Working: {done} of {steps} done"
    return f"Stopped after {done} of {steps}" if failed else f"Done: {steps}"


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
    # Task id (or the plan's title) -> the version the current stream has not been sent yet.
    dirty: dict[str, int] = field(default_factory=dict)
    mode: TaskDisplay = "plan"
    title: str = ""
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
        self._retitle(plan_title(self.tasks))

    def _touch(self, task: Task) -> None:
        self._version += 1
        self.dirty[task.id] = self._version

    def _retitle(self, title: str) -> None:
        if self.mode == "plan" and title != self.title:
            self.title = title
            self._version += 1
            self.dirty[_PLAN] = self._version

    def pending(self) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """The chunks the current stream lacks, and what to pass :meth:`sent` once it has them:
        the plan's title first, then the tasks."""
        chunks = [t.chunk() for t in self.tasks if t.id in self.dirty]
        if _PLAN in self.dirty:
            chunks.insert(0, {"type": "plan_update", "title": self.title})
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
        if self.mode == "plan" and self.title:
            self._version += 1
            self.dirty[_PLAN] = self._version

    def end(self, *, failed: bool) -> None:
        """The turn ended: a task still running ends with it, and the plan says how it went."""
        for task in self.tasks:
            if task.status == "in_progress":
                task.status = "error" if failed else "complete"
                self._touch(task)
        if self.tasks:
            self._retitle(plan_title(self.tasks, ended=True, failed=failed))

"""The marks on users' messages, in order per thread."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from anyio.abc import TaskGroup

from bridge.core.events import ChatAdapter, Reaction, ThreadRef

log = logging.getLogger(__name__)


class Marks:
    """The marks on users' messages (queued, injected, failed), applied per thread in order.

    Every status change of a thread's messages goes through one queue, drained by one task, so
    a later mark can never be overtaken by an earlier one (a message never keeps both the
    queued and the injected mark).
    """

    def __init__(self, adapter_of: Callable[[ThreadRef], ChatAdapter], task_group: TaskGroup):
        self._adapter_of = adapter_of
        self._task_group = task_group
        self._queues: dict[str, deque[tuple[str, Reaction]]] = {}

    def put(self, thread: ThreadRef, message_id: str, reaction: Reaction) -> None:
        queue = self._queues.get(thread.key)
        if queue is None:
            queue = self._queues[thread.key] = deque()
            self._task_group.start_soon(self._drain, thread, queue)
        queue.append((message_id, reaction))

    async def _drain(self, thread: ThreadRef, queue: deque[tuple[str, Reaction]]) -> None:
        adapter = self._adapter_of(thread)
        try:
            while queue:
                message_id, reaction = queue.popleft()
                try:
                    await adapter.react(thread, message_id, reaction)
                except Exception:
                    log.warning(
                        "could not mark a message", exc_info=True, extra={"chat_thread": thread.key}
                    )
        finally:
            del self._queues[thread.key]

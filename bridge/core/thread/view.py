"""What a thread's MCP servers (the chat tools) read of the thread."""

from __future__ import annotations

from typing import Protocol

from bridge.core.events import ChatAdapter, ThreadRef
from bridge.core.workspaces import Place


class ThreadView(Protocol):
    @property
    def ref(self) -> ThreadRef: ...

    @property
    def key(self) -> str: ...

    @property
    def adapter(self) -> ChatAdapter: ...

    @property
    def place(self) -> Place | None: ...

    async def history(self, limit: int) -> list[tuple[float, str, str]]:
        """(time, author label, text) of the thread's messages and answers, oldest first."""
        ...

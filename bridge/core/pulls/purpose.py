"""The pull request's description, written by the agent in a short turn of its own.

The request is stored in the thread's inbox as a message of the person who asked (so the turn
is theirs in usage and budgets, and the thread sees it run like any other), and its answer is
read from the turn that took it.
"""

from __future__ import annotations

import time
import uuid

import anyio

from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.router import NotHere, Router
from bridge.core.store import Store
from bridge.core.thread import commands as c

PURPOSE_PROMPT = (
    "[agy-bridge] A pull request is being opened for this thread's branch. Reply with its "
    "description only, in Markdown, at most 12 lines: first line a title under 70 characters, "
    "then a blank line, then what the change does and why (the thread's purpose), and how it "
    "was checked. Do not run tools and do not change files for this."
)


async def ask_purpose(
    store: Store, router: Router, thread: ThreadRef, author: Author, wait_seconds: float
) -> str | None:
    """The agent's answer to :data:`PURPOSE_PROMPT` (None: no answer in ``wait_seconds``)."""
    row_id = await submit_turn(store, router, thread, author, PURPOSE_PROMPT)
    if row_id is None:
        return None
    deadline = time.monotonic() + wait_seconds
    pause = 0.05
    while time.monotonic() < deadline:
        answer = await store.turn_answer(row_id)
        if answer is not None:
            state, text = answer
            return text.strip() if state == "done" and text and text.strip() else None
        await anyio.sleep(pause)
        pause = min(pause * 1.5, 1.0)
    return None


async def submit_turn(
    store: Store, router: Router, thread: ThreadRef, author: Author, text: str
) -> int | None:
    """``text`` stored as ``author``'s message of the thread and its actor told: a turn that
    runs like any other (budgets, approvals, ``!stop``). The inbox row's id."""
    event = f"agy-bridge-{uuid.uuid4().hex}"
    message = IncomingMessage(
        thread=thread, event_id=event, message_id=event, author=author, text=text
    )
    row_id = await store.add_message(message, record_thread=True)
    if row_id is None:
        return None
    actor = await router.actor_for(thread)
    if not isinstance(actor, NotHere):
        actor.tell(c.MessageStored(message.message_id, row_id))
    return row_id

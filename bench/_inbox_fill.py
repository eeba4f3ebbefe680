"""One instance filling the shared inbox for bench.instances (its inbox part):

    python -m bench._inbox_fill URL SECONDS TAG

prints ``{"stored": N}``. A module of its own, importing only the store: each run is a process
of its own, and bench.instances' imports (the bridge's app, the console driver) would cost it
about four times the CPU of its work at the smoke test's size.
"""

from __future__ import annotations

import json
import sys
import time

import anyio

from bridge.core.events import Author, IncomingMessage, ThreadRef
from bridge.core.store.opening import open_store


async def fill_inbox(url: str, seconds: float, tag: str, concurrency: int) -> int:
    """Store messages for ``seconds`` with ``concurrency`` tasks; how many were stored."""
    count = 0
    async with open_store(url) as store:
        deadline = time.monotonic() + seconds

        async def writer(w: int) -> None:
            nonlocal count
            n = 0
            while time.monotonic() < deadline:
                n += 1
                ref = ThreadRef(platform="bench", channel="C", thread=f"{tag}-{w}-{n % 50}")
                message = IncomingMessage(
                    thread=ref,
                    event_id=f"{tag}-{w}-{n}",
                    message_id=f"{w}-{n}",
                    author=Author(id="U1", display_name="bench"),
                    text="a message of ordinary length for a chat thread " * 3,
                )
                if await store.add_message(message) is not None:
                    await store.ensure_thread(ref)
                    count += 1

        async with anyio.create_task_group() as tg:
            for w in range(concurrency):
                tg.start_soon(writer, w)
    return count


def main(argv: list[str]) -> int:
    url, seconds, tag = argv
    stored = anyio.run(fill_inbox, url, float(seconds), tag, 16)
    print(json.dumps({"stored": stored}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Markdown posted as as many messages as it needs (in a thread, or opening one); a cut-off
notice once per key.

A notice that a turn was cut off is told before the store records it as told, so a reporter
killed in between leaves it to be told again (nothing lost). Told again by the same device, it
must not arrive twice (capabilities.TellsOnce): each piece's transaction id is made from the
notice's key, and a homeserver answers a send whose transaction id this device used before with
the event it made then, posting nothing (client-server API, "Transaction identifiers"; Synapse
keeps them a day). The device is the same one wherever the Matrix connection runs: a restarted
bridge logs in again with its stored token, and an instance that takes the leader's role over
uses the leader's files (bridge/leader.py).
"""

from __future__ import annotations

from collections.abc import Callable

from .format import Limits, Renderer, with_mentions, with_relation
from .outbox import MatrixOutbox


def transaction_id(key: str, piece: int) -> str:
    return f"agy-bridge.{key}.{piece}"


async def post_text(
    outbox: MatrixOutbox,
    renderer: Renderer,
    limits: Limits,
    room: str,
    root: str,
    text: str,
    remember: Callable[[str], None],
    key: str | None = None,
) -> None:
    """``text`` in ``room`` (in the Matrix thread ``root``, when there is one), each piece
    replying to the one before; with ``key``, each sent under a transaction id made from it."""
    latest: str | None = None
    encrypted = outbox.encrypts(room)
    for n, content in enumerate(renderer.pieces(text, limits, encrypted=encrypted)):
        with_relation(with_mentions(content), thread_root=root, latest=latest)
        tx_id = transaction_id(key, n) if key is not None else None
        latest = await outbox.send(room, content, tx_id=tx_id)
        remember(latest)


async def post_root(
    outbox: MatrixOutbox, renderer: Renderer, limits: Limits, room: str, text: str
) -> str:
    """``text`` as a new root message in ``room``, the rest of a long text in the Matrix
    thread under it; the root's event id."""
    root: str | None = None
    latest: str | None = None
    for content in renderer.pieces(text, limits, encrypted=outbox.encrypts(room)):
        with_mentions(content)
        if root is not None:
            with_relation(content, thread_root=root, latest=latest)
        latest = await outbox.send(room, content)
        root = root or latest
    assert root is not None
    return root

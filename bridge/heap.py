"""The garbage collector, set for a long-running server that streams.

By the time the bridge serves, it holds a large heap that lives as long as the process: the
imported Slack, Matrix, MCP and pydantic modules, their schemas and clients, the config, the
store and the listener. CPython's cyclic collector walks every tracked object of its oldest
generation at each full collection, and streaming agy's output allocates a few container
objects per line, which by default sets off a young collection every 700 of them and a full
one every second or so under load. With 200 threads streaming, the full passes alone cost a
quarter of all the streaming work they interrupted (``python -m bench.scale --what-if``, see
bench/README.md). Two settings, made once the bridge is ready:

- A collection of the young generation frees what the start left behind; then
  ``gc.freeze()`` moves what exists into a permanent generation those passes skip;
  objects created later (threads, sessions, turns) are collected as before. What is frozen is
  still freed by reference counting when nothing refers to it; only a cycle among frozen
  objects that becomes garbage would stay. The freeze comes before the chat connections start,
  so a reconnect's discarded client objects are not among them.
- The youngest generation is collected every 10,000 new container objects instead of 700:
  a turn's short-lived objects mostly die by reference counting before a collection sees them,
  instead of being promoted towards the oldest generation and its full passes. What waits
  longer is only cyclic garbage, at most that many objects.

Both are undone when the bridge stops (a test process opens many bridges).

A process started to be the bridge (``python -m bridge``) collects the young generation every
10,000 objects from its first line (:func:`for_the_start`): its start imports for over a second,
and nearly every container object the imports make lives as long as the process. With the
default 700, a Slack start made about 230 collections, one of them a full pass over the
imported heap, that freed next to nothing; with 10,000 about 15. The start makes no pass over
the middle generation either: such a pass walks everything the imports have made so far (some
100,000 objects, 0.035-0.045 s at a Slack start) and frees only the young garbage a young pass
would have freed, since cyclic garbage at a start dies young (the classes and functions that
``datetime``, attrs' and pydantic's slotted classes, ``inspect`` and ``enum`` discard while
their modules are imported). :func:`server_collector` collects the young generation before it
freezes, and the middle generation's setting is back to the interpreter's for the server (and
for commands that never serve, it only makes those passes ten times rarer).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 10_000
# Young passes before a pass over the middle generation, while the bridge starts (CPython's
# default: 10). A Slack start makes about 15 young passes, a Matrix one a few more.
START_MIDDLE_THRESHOLD = 100
# ... and while it serves: CPython's default.
SERVER_MIDDLE_THRESHOLD = 10


def for_the_start() -> None:
    """A process that is the bridge: the young generation collected every
    :data:`YOUNG_THRESHOLD` objects from now on (before the imports), the middle one only after
    :data:`START_MIDDLE_THRESHOLD` young passes; the oldest generation's threshold as it was."""
    gc.set_threshold(YOUNG_THRESHOLD, START_MIDDLE_THRESHOLD, gc.get_threshold()[2])


@contextmanager
def server_collector() -> Iterator[None]:
    """Collect the young generation, freeze everything alive now, collect the young
    generation less often; all undone on exit."""
    thresholds = gc.get_threshold()
    # The start's garbage is freed, not frozen. It is young: a collection frees what it finds
    # unreachable instead of moving it on, so only what died after surviving one is in the
    # older generations, frozen until the bridge stops (none at a Slack start, measured by
    # collecting everything at its stop). A pass over them walks the whole imported heap
    # (some 100,000 objects, 0.01-0.05 s of every start) to free nothing.
    gc.collect(0)
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, SERVER_MIDDLE_THRESHOLD, thresholds[2])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()

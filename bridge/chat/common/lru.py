"""A bounded map that forgets the least recently used keys (ids seen, authors, marks)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRUMap(Generic[K, V]):
    """At most ``capacity`` entries; past that the least recently written or read is dropped.

    ``get`` counts as a use (a key asked for again stays); ``peek`` and ``in`` do not.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()

    @property
    def capacity(self) -> int:
        return self._capacity

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        """Keys from the least to the most recently used."""
        return iter(list(self._items))

    def get(self, key: K) -> V | None:
        if key not in self._items:
            return None
        self._items.move_to_end(key)
        return self._items[key]

    def peek(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def add(self, key: K, value: V) -> bool:
        """Store ``value`` unless ``key`` is present; True when it was new (a "first time")."""
        if key in self._items:
            return False
        self.put(key, value)
        return True

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)

"""The bounded LRU map shared by the chat adapters."""

from __future__ import annotations

import pytest

from bridge.chat.common.lru import LRUMap


def test_keeps_the_most_recently_used_keys() -> None:
    items: LRUMap[str, int] = LRUMap(2)
    items.put("a", 1)
    items.put("b", 2)
    assert items.get("a") == 1  # a use: "b" is now the oldest
    items.put("c", 3)
    assert "b" not in items
    assert list(items) == ["a", "c"]
    assert len(items) == 2


def test_peek_and_contains_do_not_count_as_use() -> None:
    items: LRUMap[str, int] = LRUMap(2)
    items.put("a", 1)
    items.put("b", 2)
    assert items.peek("a") == 1
    assert "a" in items
    items.put("c", 3)
    assert "a" not in items
    assert items.get("a") is None


def test_add_tells_the_first_time_and_pop_forgets() -> None:
    items: LRUMap[tuple[str, str], None] = LRUMap(10)
    assert items.add(("U1", "C1"), None)
    assert not items.add(("U1", "C1"), None)
    assert items.pop(("U1", "C1")) is None
    assert items.add(("U1", "C1"), None)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LRUMap(0)

"""``@record`` behaves as the ``@dataclass`` it stands in for (bridge/simulator/record.py)."""

from __future__ import annotations

import dataclasses

import pytest

from bridge.simulator.record import field, record, replace


@record
class Mutable:
    name: str
    count: int = 0
    items: list[str] = field(default_factory=list)


@record(frozen=True)
class Frozen:
    name: str
    size: int = 1


@dataclasses.dataclass
class Reference:
    name: str
    count: int = 0
    items: list[str] = dataclasses.field(default_factory=list)


def test_construction_defaults_and_repr_match_a_dataclass() -> None:
    made = Mutable("a", items=["x"])
    assert (made.name, made.count, made.items) == ("a", 0, ["x"])
    assert repr(made) == repr(Reference("a", items=["x"])).replace("Reference", "Mutable")
    assert Mutable("a").items is not Mutable("a").items  # a fresh list each time
    assert "items" not in Mutable.__dict__  # no shared default left on the class


def test_wrong_arguments_are_refused_as_a_dataclass_refuses_them() -> None:
    with pytest.raises(TypeError, match="missing"):
        Mutable()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected"):
        Mutable("a", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple"):
        Mutable("a", name="b")  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional"):
        Frozen("a", 2, 3)  # type: ignore[call-arg]


def test_equality_is_by_fields_and_class() -> None:
    assert Mutable("a", 1) == Mutable("a", 1)
    assert Mutable("a", 1) != Mutable("a", 2)
    assert Frozen("a") != Mutable("a")
    with pytest.raises(TypeError):
        hash(Mutable("a"))  # mutable: unhashable, as with eq=True


def test_a_frozen_record_refuses_assignment_and_hashes_by_value() -> None:
    item = Frozen("a")
    with pytest.raises(AttributeError):
        item.size = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del item.name  # type: ignore[misc]
    assert hash(item) == hash(Frozen("a"))
    assert {item, Frozen("a")} == {item}


def test_replace_copies_with_changes() -> None:
    first = Mutable("a", 1, ["x"])
    second = replace(first, count=5)
    assert second == Mutable("a", 5, ["x"])
    assert first.count == 1
    assert replace(Frozen("a"), size=3) == Frozen("a", 3)

"""``@record``: the part of ``dataclasses`` the simulator uses, without its start-up cost.

Every turn process defines about twenty small classes of fields. ``dataclasses`` imports
``inspect`` (with ``ast``, ``dis``, ``tokenize``) and, for each class, writes ``__init__``,
``__repr__`` and ``__eq__`` as source text and compiles it: together about 25 ms of CPU, a
quarter of a turn process, in each of the hundreds a test run starts. Here the methods are
shared functions that read the class's field list, which costs next to nothing to set up; a
record is built a few times per turn, so its slower ``__init__`` does not matter.

What it keeps of ``@dataclass``: fields in annotation order, class-level defaults,
``field(default_factory=...)``, keyword or positional construction, ``==`` on the same class,
the same ``repr``, and ``frozen=True`` (no assignment, hashable). ``replace`` is
``dataclasses.replace``. The type checker sees a dataclass (``dataclass_transform``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: a turn does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform

    T = TypeVar("T")
    C = TypeVar("C", bound=type)
else:

    def dataclass_transform(**_kwargs: object) -> Callable[[T], T]:
        return lambda decorated: decorated


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], object]):
        self.make = make


def field(*, default_factory: Callable[[], T]) -> T:
    """A field whose default is made anew for each record (``dataclasses.field``)."""
    return _Factory(default_factory)  # type: ignore[return-value]


class _Fields:
    """A record class's fields: names in order, and how to fill the ones not given."""

    __slots__ = ("defaults", "frozen", "names")

    def __init__(self, cls: type, frozen: bool):
        self.frozen = frozen
        self.names: tuple[str, ...] = ()
        self.defaults: dict[str, object] = {}
        for base in reversed(cls.__mro__[1:]):
            inherited = base.__dict__.get("__record_fields__")
            if inherited is not None:
                self.names += tuple(n for n in inherited.names if n not in self.names)
                self.defaults.update(inherited.defaults)
        # The class's own annotations (strings: ``from __future__ import annotations``), read
        # without ``inspect.get_annotations``, which would import inspect.
        for name in cls.__dict__.get("__annotations__", {}):  # noqa: RUF063
            if name not in self.names:
                self.names += (name,)
            if name in cls.__dict__:
                self.defaults[name] = cls.__dict__[name]
                if isinstance(self.defaults[name], _Factory):
                    delattr(cls, name)  # as dataclasses does: no shared mutable default


def _init(self: Any, *args: object, **kwargs: object) -> None:
    fields: _Fields = type(self).__record_fields__
    name = type(self).__qualname__
    if len(args) > len(fields.names):
        raise TypeError(f"{name}() takes {len(fields.names)} positional arguments")
    values = dict(zip(fields.names, args, strict=False))
    for key, value in kwargs.items():
        if key not in fields.names:
            raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
        if key in values:
            raise TypeError(f"{name}() got multiple values for argument {key!r}")
        values[key] = value
    for key in fields.names:
        if key in values:
            value = values[key]
        elif key in fields.defaults:
            value = fields.defaults[key]
            value = value.make() if isinstance(value, _Factory) else value
        else:
            raise TypeError(f"{name}() missing required argument: {key!r}")
        object.__setattr__(self, key, value)


def _values(self: Any) -> tuple[object, ...]:
    return tuple(getattr(self, key) for key in type(self).__record_fields__.names)


def _repr(self: Any) -> str:
    names = type(self).__record_fields__.names
    shown = ", ".join(f"{key}={getattr(self, key)!r}" for key in names)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _frozen_setattr(self: Any, key: str, value: object) -> None:
    raise AttributeError(f"cannot assign to field {key!r} of a frozen {type(self).__qualname__}")


def _frozen_delattr(self: Any, key: str) -> None:
    raise AttributeError(f"cannot delete field {key!r} of a frozen {type(self).__qualname__}")


@dataclass_transform(field_specifiers=(field,))
def record(cls: C | None = None, *, frozen: bool = False) -> Any:
    """``@dataclass`` / ``@dataclass(frozen=True)`` for classes of plain fields."""

    def make(cls: C) -> C:
        cls.__record_fields__ = _Fields(cls, frozen)  # type: ignore[attr-defined]
        cls.__init__ = _init  # type: ignore[misc]
        cls.__repr__ = _repr  # type: ignore[assignment,method-assign]
        cls.__eq__ = _eq  # type: ignore[assignment,method-assign]
        if frozen:
            cls.__hash__ = _hash  # type: ignore[assignment,method-assign]
            cls.__setattr__ = _frozen_setattr  # type: ignore[assignment,method-assign]
            cls.__delattr__ = _frozen_delattr  # type: ignore[assignment,method-assign]
        else:
            cls.__hash__ = None  # type: ignore[assignment]  # mutable: unhashable
        return cls

    return make if cls is None else make(cls)


def replace(obj: T, **changes: object) -> T:
    """A copy of the record ``obj`` with ``changes`` (``dataclasses.replace``)."""
    fields: _Fields = type(obj).__record_fields__  # type: ignore[attr-defined]
    values = {key: getattr(obj, key) for key in fields.names}
    values.update(changes)
    return type(obj)(**values)

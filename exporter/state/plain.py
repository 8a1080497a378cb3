"""Frozen dataclasses as plain nested tuples and back, driven by their type hints.

A dataclass becomes the tuple of its fields' values in declaration order, a dict the
tuple of its (key, value) pairs, a StrEnum its value; what JSON gives back (lists) is
rebuilt to the declared types, and every value is checked against its hint: a record
that does not fit raises :class:`PlainError`, never a half-built object. Positional
fields keep records small; a change of a field list is a new state format version
(exporter/state/codec.py).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from functools import cache
from typing import Any


class PlainError(ValueError):
    """The plain data does not fit the declared type."""


def to_plain(obj: Any) -> Any:
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, str):
        return obj
    if dataclasses.is_dataclass(obj):
        return tuple(to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    if isinstance(obj, dict):
        return tuple((to_plain(k), to_plain(v)) for k, v in obj.items())
    if isinstance(obj, frozenset | set):
        return tuple(sorted(to_plain(v) for v in obj))
    if isinstance(obj, tuple | list):
        return tuple(to_plain(v) for v in obj)
    raise PlainError(f"cannot encode {type(obj).__name__}")


@cache
def _hints(cls: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def deep_tuple(v: Any) -> Any:
    """Lists (JSON arrays) as tuples, all the way down."""
    if isinstance(v, list | tuple):
        return tuple(deep_tuple(e) for e in v)
    return v


def from_plain(tp: Any, v: Any) -> Any:
    """``v`` rebuilt as ``tp``; :class:`PlainError` when it does not fit."""
    if tp is Any:
        return deep_tuple(v)
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _union(typing.get_args(tp), v)
    if origin is tuple:
        return _tuple(typing.get_args(tp), v)
    if origin is dict:
        kt, vt = typing.get_args(tp)
        return {from_plain(kt, k): from_plain(vt, x) for k, x in _pairs(v)}
    if origin is frozenset:
        (et,) = typing.get_args(tp)
        return frozenset(from_plain(et, e) for e in _seq(v))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, v)
    return _scalar(tp, v)


def _union(args: tuple[Any, ...], v: Any) -> Any:
    if v is None:
        if type(None) in args:
            return None
        raise PlainError("unexpected null")
    rest = [a for a in args if a is not type(None)]
    if len(rest) == 1:
        return from_plain(rest[0], v)
    for a in rest:  # unions of scalars only (int | float)
        try:
            return _scalar(a, v)
        except PlainError:
            continue
    raise PlainError(f"{v!r} fits none of {rest}")


def _tuple(args: tuple[Any, ...], v: Any) -> tuple[Any, ...]:
    items = _seq(v)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(from_plain(args[0], e) for e in items)
    if len(items) != len(args):
        raise PlainError(f"expected {len(args)} elements, got {len(items)}")
    return tuple(from_plain(a, e) for a, e in zip(args, items, strict=True))


def _dataclass(cls: type, v: Any) -> Any:
    hints = _hints(cls)
    items = _seq(v)
    if len(items) != len(hints):
        raise PlainError(f"{cls.__name__}: expected {len(hints)} fields, got {len(items)}")
    return cls(**{name: from_plain(tp, e) for (name, tp), e in zip(hints, items, strict=True)})


def _seq(v: Any) -> list[Any] | tuple[Any, ...]:
    if not isinstance(v, list | tuple):
        raise PlainError(f"expected an array, got {type(v).__name__}")
    return v


def _pairs(v: Any) -> list[tuple[Any, Any]]:
    out = []
    for e in _seq(v):
        if not isinstance(e, list | tuple) or len(e) != 2:
            raise PlainError("expected a [key, value] pair")
        out.append((e[0], e[1]))
    return out


def _scalar(tp: Any, v: Any) -> Any:
    if tp is bool:
        if isinstance(v, bool):
            return v
    elif tp is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    elif tp is float:
        if isinstance(v, int | float) and not isinstance(v, bool):
            return v
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(v)
        except ValueError:
            raise PlainError(f"{v!r} is no {tp.__name__}") from None
    elif tp is str:
        if isinstance(v, str):
            return v
    else:
        raise PlainError(f"unsupported type {tp!r}")
    raise PlainError(f"expected {tp.__name__}, got {type(v).__name__}")

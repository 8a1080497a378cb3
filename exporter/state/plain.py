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
import operator
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np

from exporter.contracts.status import Status
from exporter.contracts.view import (
    PartitionProgress,
    PartitionRows,
    PartitionView,
    ProgressRows,
    seconds,
)


class PlainError(ValueError):
    """The plain data does not fit the declared type."""


@cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


_SCALARS = frozenset({int, float, str, bool, type(None)})
_ARRAYS = frozenset({list, tuple})  # what a JSON array is read as, or was written from


@cache
def _fields_of(cls: type) -> Callable[[Any], tuple[Any, ...]] | None:
    """A dataclass's field values as a tuple, read at once (None: not a dataclass)."""
    names = _field_names(cls)
    if names is None:
        return None
    if len(names) == 1:
        return lambda obj: (getattr(obj, names[0]),)
    return operator.attrgetter(*names)


def to_plain(obj: Any) -> Any:
    kind = type(obj)
    if kind in _SCALARS:  # the common cases first: one set lookup, then two identity tests
        return obj
    if kind is tuple or kind is list:
        return _plain_items(obj)
    if kind is PartitionRows or kind is ProgressRows:  # plain as the views they are read as
        return obj.plain()
    fields = _fields_of(kind)
    if fields is not None:
        return _plain_items(fields(obj))
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, Mapping):  # a dict, or columns read as one (ProgressRows)
        return tuple((to_plain(k), to_plain(v)) for k, v in obj.items())
    if isinstance(obj, frozenset | set):
        return tuple(sorted(to_plain(v) for v in obj))
    if isinstance(obj, Sequence):  # a tuple, a list, or texts written when read (GroupReasons)
        return _plain_items(tuple(obj))
    raise PlainError(f"cannot encode {type(obj).__name__}")


def as_json(obj: Any) -> Any:
    """``json.dumps``'s ``default``: one level of :func:`to_plain` for what JSON has no
    type of (a dataclass as its field values, an enum as its value, a set sorted); the
    encoder calls it again for what those hold, so a state is walked once, in C."""
    fields = _fields_of(type(obj))
    if fields is not None:
        return fields(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, frozenset | set):
        return sorted(to_plain(v) for v in obj)
    if isinstance(obj, PartitionRows | ProgressRows):
        return obj.plain()
    if isinstance(obj, Mapping | Sequence):  # read as one (ProgressRows, GroupReasons)
        return to_plain(obj)
    raise PlainError(f"cannot encode {type(obj).__name__}")


def _plain_items(items: tuple[Any, ...] | list[Any]) -> tuple[Any, ...]:
    """Each item plain; a row of scalars as it is (the type set is tested in C: this runs
    for every partition of every group written)."""
    if _SCALARS.issuperset(map(type, items)):
        return tuple(items)
    return tuple([v if type(v) in _SCALARS else to_plain(v) for v in items])


def deep_tuple(v: Any) -> Any:
    """Lists (JSON arrays) as tuples, all the way down."""
    if isinstance(v, list | tuple):
        if _SCALARS.issuperset(map(type, v)):  # a row of scalars (the type set tested in C)
            return tuple(v)
        return tuple(map(deep_tuple, v))
    return v


Decoder = Callable[[Any], Any]


def from_plain(tp: Any, v: Any) -> Any:
    """``v`` rebuilt as ``tp``; :class:`PlainError` when it does not fit."""
    return decoder(tp)(v)


@cache
def decoder(tp: Any) -> Decoder:
    """The function that rebuilds plain data as ``tp``, made once per type: a state of
    100k group-partitions is decoded without inspecting a type hint per value."""
    if tp is Any:
        return deep_tuple
    if tp is PartitionRows:  # as the PartitionViews it is read as
        return _partition_rows
    origin = typing.get_origin(tp)
    if (origin is dict or origin is Mapping) and typing.get_args(tp)[1] is PartitionProgress:
        return _progress_rows
    if origin is typing.Union or origin is types.UnionType:
        return _union(typing.get_args(tp))
    if origin is tuple:
        return _tuple(typing.get_args(tp))
    if origin is Sequence:  # a Sequence is rebuilt as a tuple
        return _tuple((*typing.get_args(tp), ...))
    if origin is dict or origin is Mapping:  # a Mapping is rebuilt as a dict
        kd, vd = (decoder(a) for a in typing.get_args(tp))
        return lambda v: {kd(k): vd(x) for k, x in _pairs(v)}
    if origin is frozenset:
        ed = decoder(typing.get_args(tp)[0])
        return lambda v: frozenset(ed(e) for e in _seq(v))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp)
    return _scalar(tp)


def _union(args: tuple[Any, ...]) -> Decoder:
    nullable = type(None) in args
    rest = [decoder(a) for a in args if a is not type(None)]

    def dec(v: Any) -> Any:
        if v is None:
            if nullable:
                return None
            raise PlainError("unexpected null")
        if len(rest) == 1:
            return rest[0](v)
        for d in rest:  # unions of scalars only (int | float)
            try:
                return d(v)
            except PlainError:
                continue
        raise PlainError(f"{v!r} fits none of {args}")
    return dec


# The types a JSON value of each scalar kind may have (a bool is no int here); a kind
# ending in "?" may also be None (exporter/contracts/state.py PARTITION_COLUMNS).
_INT, _FLOAT, _STR, _BOOL = frozenset({int}), frozenset({int, float}), frozenset({str}), frozenset({bool})
_NONE = frozenset({type(None)})
KIND_TYPES = {"int": _INT, "float": _FLOAT, "bool": _BOOL, "str": _STR}
KIND_TYPES |= {f"{kind}?": types | _NONE for kind, types in KIND_TYPES.items()}
# What :func:`_scalar` takes as it is, by hint: a tuple of them is taken whole, its types
# tested in C, not value by value.
_TAKEN_AS_IS = {int: _INT, float: _FLOAT, str: _STR, bool: _BOOL}


def _tuple(args: tuple[Any, ...]) -> Decoder:
    if len(args) == 2 and args[1] is Ellipsis:
        if args[0] is Any:
            return lambda v: deep_tuple(_seq(v))
        ed, as_is = decoder(args[0]), _TAKEN_AS_IS.get(args[0])
        rows = args[0] == tuple[Any, ...]  # rows of plain values (a group's memory)

        def dec_all(v: Any) -> tuple[Any, ...]:
            items = _seq(v)
            if as_is is not None and as_is.issuperset(map(type, items)):
                return tuple(items)
            if rows and all(type(r) in _ARRAYS and _SCALARS.issuperset(map(type, r)) for r in items):
                return tuple(map(tuple, items))
            return tuple(map(ed, items))
        return dec_all
    eds = [decoder(a) for a in args]

    def dec(v: Any) -> tuple[Any, ...]:
        items = _seq(v)
        if len(items) != len(eds):
            raise PlainError(f"expected {len(eds)} elements, got {len(items)}")
        return tuple(d(e) for d, e in zip(eds, items, strict=True))
    return dec


def _dataclass(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    every = dataclasses.fields(cls)
    fields = [(f.name, decoder(hints[f.name])) for f in every]
    # A field is added at the end with a default, so a record written before it lacks
    # it and is read with the default: the fields before the first such one are needed.
    needed = len(every)
    while needed and _defaulted(every[needed - 1]):
        needed -= 1

    def dec(v: Any) -> Any:
        items = _seq(v)
        if not needed <= len(items) <= len(fields):
            raise PlainError(f"{cls.__name__}: expected {len(fields)} fields, got {len(items)}")
        return cls(**{name: d(e) for (name, d), e in zip(fields[:len(items)], items, strict=True)})
    return dec


def _defaulted(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def row_fits(types: tuple[frozenset[type], ...], values: Any) -> bool:
    """Each value's type among its column's (``values`` as long as ``types``), in C: a
    JSON value is exactly one of int, float, str, bool, None, list or dict."""
    return all(map(frozenset.__contains__, types, map(type, values)))


# PartitionView's fields, in order (its status as its value).
_VIEW_TYPES = (_STR, _INT, _INT | _NONE, _INT | _NONE, _INT | _NONE, _FLOAT | _NONE, _FLOAT, _STR, _STR,
               _STR, _BOOL, _STR)
_STATUS_OF = {s.value: s for s in Status}
_TP_TYPES = (_STR, _INT)
# PartitionProgress's fields, in order.
_PROGRESS_TYPES = (_FLOAT | _NONE, _FLOAT | _NONE, _FLOAT | _NONE, _INT, _INT)


def _rows_fit(rows: list[Any] | tuple[Any, ...], types: tuple[frozenset[type], ...]) -> bool:
    n = len(types)
    return all(type(r) in _ARRAYS and len(r) == n and row_fits(types, r) for r in rows)


def _partition_rows(v: Any) -> PartitionRows:
    """PartitionRows from the rows :meth:`PartitionRows.plain` gives, column by column; rows
    that do not fit go the PartitionView decoder, which says what is wrong."""
    rows = _seq(v)
    status = [_STATUS_OF.get(r[7]) for r in rows] if _rows_fit(rows, _VIEW_TYPES) else [None]
    if not rows or None in status:
        return PartitionRows.of(decoder(tuple[PartitionView, ...])(v))
    columns = list(zip(*rows, strict=True))
    columns[7] = status  # type: ignore[call-overload]
    return PartitionRows.of_columns(*columns)


def _progress_rows(v: Any) -> ProgressRows | dict[Any, Any]:
    """ProgressRows from the (partition, figures) pairs :meth:`ProgressRows.plain` gives;
    pairs that do not fit go the generic decoder, which says what is wrong."""
    pairs = _seq(v)
    if not (_rows_fit(pairs, (_ARRAYS, _ARRAYS)) and _rows_fit([k for k, _ in pairs], _TP_TYPES)
            and _rows_fit([x for _, x in pairs], _PROGRESS_TYPES)):
        kd, vd = decoder(tuple[str, int]), decoder(PartitionProgress)
        return {kd(k): vd(x) for k, x in _pairs(v)}
    tps = [(k[0], k[1]) for k, _ in pairs]
    consume, produce, catchup, lost, below = zip(*(x for _, x in pairs), strict=True) if pairs else ((),) * 5
    return ProgressRows(tps, seconds(consume), seconds(produce), seconds(catchup),
                        np.array(lost, np.int64), np.array(below, np.int64))


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


def _scalar(tp: Any) -> Decoder:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        def enum_value(v: Any) -> Any:
            try:
                return tp(v)
            except ValueError:
                raise PlainError(f"{v!r} is no {tp.__name__}") from None
        return enum_value
    accept = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}.get(tp)
    if accept is None:
        raise PlainError(f"unsupported type {tp!r}")
    name = tp.__name__
    if tp is bool:
        def exact(v: Any) -> Any:
            if isinstance(v, bool):
                return v
            raise PlainError(f"expected bool, got {type(v).__name__}")
        return exact

    def number_or_str(v: Any) -> Any:
        if isinstance(v, accept) and not isinstance(v, bool):
            return v
        raise PlainError(f"expected {name}, got {type(v).__name__}")
    return number_or_str

"""State records: what one record of the state topic holds, as bytes, and back.

Key (UTF-8): ``CLUSTER/g/GROUP`` for a group's :class:`SavedGroup`, ``CLUSTER/t/TOPIC``
for a topic's :class:`SavedTopic` (CLUSTER is lagwatch's configured cluster name, which
has no ``/``; a group id may have any character, so the key splits at the first two).
A deleted group's key gets a tombstone, so compaction removes it.

Value: one format-version byte (:data:`VERSION`), then zlib-compressed UTF-8 JSON::

    {"cluster_id": str, "at": epoch seconds written, "state": [...]}

``state`` is the SavedGroup or SavedTopic as positional arrays
(exporter/state/plain.py). Why JSON and zlib: a record can be read with
``kafka-console-consumer`` and ``zlib-flate``, and the positional arrays of one group
repeat topic names and times that zlib folds (docs/scaling.md has the sizes). It is
written with orjson and ISA-L's deflate at level 1 (zlib's where ISA-L is missing), and
read with orjson: the main process writes a tenth of the groups every cycle, and reads
them all before its first judgement after a start. At 50 partitions a group the standard
library's encoder and zlib's level 6 took about 0.65 ms a record, these 0.13 ms, for a
record about 7 % larger; orjson writes the same text as ``json.dumps`` with compact
separators, and refuses what is not JSON (NaN, Infinity) as the reader must.

The version byte comes first so that a later format can change everything after it; a
reader meets a version it does not know as ``bad_version``.

Decoding is strict and total: anything that does not fit raises :class:`StateError`
with a :class:`DropReason`, the label of ``lagwatch_state_records_dropped_total``.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from exporter.contracts.packed import DEFLATE
from exporter.contracts.state import PARTITION_KINDS, SavedGroup, SavedTopic
from exporter.state.plain import KIND_TYPES, PlainError, as_json, from_plain, row_fits

VERSION = 1
# A record inflates to at most this many bytes: a corrupt or hostile record cannot make
# the reader allocate more.
MAX_INFLATED = 256 * 1024 * 1024
GROUP, TOPIC = "g", "t"


class DropReason(StrEnum):
    """Why a state record was not imported (a closed set: a metric's label values)."""

    CORRUPT = "corrupt"  # not zlib, not JSON, or not a state envelope
    BAD_VERSION = "bad_version"  # a format version this lagwatch cannot read
    MALFORMED = "malformed"  # a state that does not fit the contract
    FOREIGN_CLUSTER = "foreign_cluster"  # written for another Kafka cluster id
    STALE = "stale"  # older than state.max_age


class StateError(ValueError):
    def __init__(self, reason: DropReason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Decoded:
    """One record read back: a group's or a topic's state, written at ``at``."""

    kind: str  # GROUP or TOPIC
    name: str  # the group id or the topic
    state: SavedGroup | SavedTopic
    at: float
    cluster_id: str


def key_of(cluster: str, kind: str, name: str) -> bytes:
    return f"{cluster}/{kind}/{name}".encode()


def parse_key(key: bytes | None, cluster: str) -> tuple[str, str] | None:
    """(kind, name) of a key of ``cluster``; None for another cluster's or a key that is
    none of ours (several lagwatch deployments may share one state topic)."""
    if not key:
        return None
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return None
    c, _, rest = text.partition("/")
    kind, sep, name = rest.partition("/")
    if c != cluster or not sep or kind not in (GROUP, TOPIC):
        return None
    return kind, name


def encode(state: SavedGroup | SavedTopic, cluster_id: str, at: float) -> bytes:
    doc = {"cluster_id": cluster_id, "at": at, "state": state}
    # A dataclass goes to as_json (its field values, positional), not to orjson's own
    # encoding (an object by field name).
    text = orjson.dumps(doc, default=as_json, option=orjson.OPT_PASSTHROUGH_DATACLASS)
    return bytes((VERSION,)) + DEFLATE.compress(text, 1)


def _envelope(value: bytes) -> dict[str, Any]:
    if not value:
        raise StateError(DropReason.CORRUPT, "empty value")
    if value[0] != VERSION:
        raise StateError(DropReason.BAD_VERSION, f"format version {value[0]}, this lagwatch reads {VERSION}")
    try:
        d = zlib.decompressobj()
        raw = d.decompress(value[1:], MAX_INFLATED)
        if d.unconsumed_tail or not d.eof:
            raise StateError(DropReason.CORRUPT, "truncated or oversized")
        doc = orjson.loads(raw)
    except (zlib.error, ValueError, UnicodeDecodeError, RecursionError) as e:
        if isinstance(e, StateError):
            raise
        raise StateError(DropReason.CORRUPT, str(e)[:200]) from None
    if (not isinstance(doc, dict) or not isinstance(doc.get("cluster_id"), str)
            or not isinstance(doc.get("at"), int | float) or isinstance(doc.get("at"), bool)
            or "state" not in doc):
        raise StateError(DropReason.CORRUPT, "not a state envelope")
    return doc


def decode(kind: str, name: str, value: bytes, cluster_id: str | None, now: float,
           max_age: float) -> Decoded:
    """The state in ``value`` (a record keyed ``kind``/``name``), checked: its format
    version, its cluster id (when known: None while the cluster's id is unknown), its age,
    every field. Raises :class:`StateError`."""
    doc = _envelope(value)
    if cluster_id is not None and doc["cluster_id"] != cluster_id:
        raise StateError(DropReason.FOREIGN_CLUSTER, f"written for Kafka cluster id "
                         f"{doc['cluster_id'][:64]!r}, this one is {cluster_id!r}")
    at = float(doc["at"])
    if not math.isfinite(at) or now - at > max_age:
        raise StateError(DropReason.STALE, f"written {now - at:.0f} s ago (state.max_age {max_age:g} s)")
    try:
        state = from_plain(SavedGroup if kind == GROUP else SavedTopic, doc["state"])
        _check(state, name)
    except (PlainError, TypeError, RecursionError) as e:
        raise StateError(DropReason.MALFORMED, str(e)[:200]) from None
    return Decoded(kind, name, state, at, doc["cluster_id"])


_PARTITION_TYPES = tuple(KIND_TYPES[k] for k in PARTITION_KINDS)
_TOPIC_TYPES = tuple(KIND_TYPES[k] for k in ("int", "int", "int", "int", "int?", "int?", "int?", "int?"))
_NUMBER = KIND_TYPES["float"]


def _fits(kind: str, v: Any) -> bool:
    return type(v) in KIND_TYPES[kind]


def _check(state: SavedGroup | SavedTopic, name: str) -> None:
    """What the type hints leave open: the name matches the key, every partition row has
    its fields' kinds, every flat point list its (number, ...) shape."""
    if isinstance(state, SavedTopic):
        if state.topic != name:
            raise PlainError(f"topic {state.topic!r} under the key of {name!r}")
        for row in state.partitions:
            if (len(row) != 10 or not row_fits(_TOPIC_TYPES, row[:8])
                    or not _numbers(row[8]) or len(row[8]) % 2 or not _fits("float?", row[9])):
                raise PlainError(f"topic {name!r}: a malformed partition row")
        return
    if state.group != name:
        raise PlainError(f"group {state.group!r} under the key of {name!r}")
    for row in state.partitions:
        if (len(row) != 2 + len(PARTITION_KINDS) or not _fits("str", row[0]) or not _fits("int", row[1])
                or not row_fits(_PARTITION_TYPES, row[2:])):
            raise PlainError(f"group {name!r}: a malformed partition row")
    if state.rates is not None and not all(_numbers(f) and len(f) % 3 == 0 for _, _, f in state.rates.points):
        raise PlainError(f"group {name!r}: malformed rate points")


def _numbers(values: Any) -> bool:
    return isinstance(values, tuple) and _NUMBER.issuperset(map(type, values))

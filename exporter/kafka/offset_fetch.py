"""OffsetFetch v8-v9 answers decoded straight into committed offsets per group.

The batched OffsetFetch of a coordinator (KIP-709) answers with every partition of every
group it holds: 100,000 group-partitions in a large cluster. kafka-python decodes that
into an object per group, topic and partition before the sampler keeps three numbers of
each, which made the decode the Kafka worker's largest cost in memory and CPU. This
decoder reads the same bytes once, in the layout of Kafka's message schema
(https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/OffsetFetchResponse.json,
flexible versions: KIP-482 compact strings, arrays and tagged fields), and keeps only
what :func:`~exporter.kafka.broker_requests.parse_offset_fetch` keeps.

It is plugged in for the exporter's own OffsetFetch requests only
(:class:`LeanOffsetFetchRequest`): kafka-python finds a response's decoder through the
request's header; every other request is decoded by kafka-python as before, and so is an
OffsetFetch below v8 (one group, no batching).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

_PARTITION = struct.Struct(">iqi")  # partition_index, committed_offset, committed_leader_epoch
# A partition in the common layout, whole: the three above, the metadata's length byte
# (null or empty: 0 or 1, no text), error_code, no tagged field (a count byte of 0).
_PLAIN_PARTITION = struct.Struct(">iqiBhB")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ERROR_TAGS = struct.Struct(">hB")  # error_code, then the count of tagged fields when under 128
# The versions read here: v8 batches groups (KIP-709), v10 names topics by id (KIP-848).
LEAN_VERSIONS = (8, 9)

TP = tuple[str, int]
# The worker's (topic, partition) keys, one object per partition: the answers of every
# coordinator and the snapshot's partitions (exporter/kafka/sampler.py) take theirs from
# here, so a group's offsets are keyed as the snapshot is without a copy, and the snapshot
# pickles each key once. :func:`keep_keys` bounds it to a cycle's partitions.
_keys: dict[TP, TP] = {}


def key_of(tp: TP) -> TP:
    """The worker's own key equal to ``tp``."""
    return _keys.setdefault(tp, tp)


def keep_keys(tps: Iterable[TP]) -> None:
    """Keep only these keys (a cycle's partitions): those of deleted topics go."""
    global _keys  # noqa: PLW0603 - one registry per worker process
    _keys = {tp: tp for tp in tps}


@dataclass(frozen=True, slots=True)
class CommittedOffsets:
    """A decoded OffsetFetch v8-v9 answer: each group's committed offsets, or its error
    code (0: none) and no offsets. ``throttle_time_ms`` is read by kafka-python's
    connection, which then holds back our next request as the broker's quota asks
    (KIP-219)."""
    version: int
    throttle_time_ms: int
    groups: dict[str, tuple[int, dict[tuple[str, int], int]]]


class _Reader:
    """A position in the answer's bytes and the few primitives of flexible versions."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def uvarint(self) -> int:
        data, pos, shift, out = self.data, self.pos, 0, 0
        while True:
            b = data[pos]
            pos += 1
            out |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return out
            shift += 7

    def string(self) -> str | None:
        """A compact (nullable) string: its length plus one, 0 for null."""
        n = self.uvarint() - 1
        if n < 0:
            return None
        start = self.pos
        self.pos = start + n
        return self.data[start:self.pos].decode()

    def int16(self) -> int:
        (v,) = _INT16.unpack_from(self.data, self.pos)
        self.pos += 2
        return v

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            size = self.uvarint()  # read before pos is taken: the read moves it
            self.pos += size


def _partitions(r: _Reader, topic: str, count: int, keys: dict[tuple[str, int], tuple[str, int]],
                offsets: dict[tuple[str, int], int]) -> None:
    """``count`` partitions of one topic: the committed offsets kept, the rest skipped.
    This runs once per group-partition. When every partition has the common layout
    (:data:`_PLAIN_PARTITION`: 20 bytes each) they are unpacked at once; else each is
    read in turn, the common layout without a call per field."""
    data, pos = r.data, r.pos
    size = _PLAIN_PARTITION.size
    end = pos + size * count
    # Each partition that starts at a multiple of 20 and has a length byte of 0 or 1 and
    # no tagged field is 20 bytes long: if all of them do, the next starts where it ends.
    if end <= len(data) and max(data[pos + 16:end:size], default=0) <= 1 and not any(data[pos + 19:end:size]):
        for part, offset, _epoch, _meta, error, _tags in _PLAIN_PARTITION.iter_unpack(data[pos:end]):
            if error == 0 and offset >= 0:
                key = (topic, part)
                offsets[keys.setdefault(key, key)] = offset
        r.pos = end
        return
    unpack, error_tags = _PARTITION.unpack_from, _ERROR_TAGS.unpack_from
    for _ in range(count):
        part, offset, _epoch = unpack(data, pos)
        size = data[pos + 16]  # the metadata's length plus one (0: null), not kept
        if size < 0x80:
            pos += 16 + (size or 1)  # the 16 bytes above, the length byte, the text
        else:
            r.pos = pos + 16
            size = r.uvarint() - 1
            pos = r.pos + size
        error, tags = error_tags(data, pos)
        pos += 3
        if tags:
            r.pos = pos - 1
            r.skip_tags()
            pos = r.pos
        if error == 0 and offset >= 0:
            key = (topic, part)
            offsets[keys.setdefault(key, key)] = offset
    r.pos = pos


def decode(data: bytes, version: int) -> CommittedOffsets:
    """The answer's body (after its header). A committed offset of -1 (none) or a
    partition with an error is left out, as kafka-python's decode then the parse did."""
    r = _Reader(data)
    (throttle,) = _INT32.unpack_from(data, 0)
    r.pos = 4
    keys = _keys  # one key per partition, shared
    groups: dict[str, tuple[int, dict[tuple[str, int], int]]] = {}
    for _ in range(r.uvarint() - 1):
        group_id = r.string() or ""
        offsets: dict[tuple[str, int], int] = {}
        for _ in range(r.uvarint() - 1):
            topic = r.string() or ""
            _partitions(r, topic, r.uvarint() - 1, keys, offsets)
            r.skip_tags()
        error = r.int16()
        r.skip_tags()
        groups[group_id] = (error, {} if error else offsets)
    r.skip_tags()
    if r.pos != len(data):  # a slice past the end does not raise: the length tells
        raise ValueError(f"OffsetFetch answer of {len(data)} bytes read as {r.pos}")
    return CommittedOffsets(version, throttle, groups)


class _Decoder:
    """What kafka-python asks of a response class: its header, then its body."""

    def __init__(self, version: int) -> None:
        self.version = version

    def parse_header(self, buf: Any) -> Any:
        return OffsetFetchResponse[self.version].parse_header(buf)

    def decode(self, buf: Any) -> CommittedOffsets:
        """kafka-python turns a ValueError or struct.error into KafkaProtocolError, the
        request's failure; a truncated answer would raise IndexError, so it is one too."""
        try:
            return decode(buf.read(), self.version)
        except IndexError as e:
            raise ValueError(f"OffsetFetch v{self.version} answer ends early") from e


class _LeanHeader(RequestHeader, init=False):
    __slots__ = ()

    def get_response_class(self) -> Any:
        if self.request_api_version in LEAN_VERSIONS:
            return _Decoder(self.request_api_version)
        return super().get_response_class()


class LeanOffsetFetchRequest(OffsetFetchRequest, init=False):
    """kafka-python's OffsetFetchRequest, whose v8-v9 answers :func:`decode` reads."""

    __slots__ = ()
    header_class = _LeanHeader

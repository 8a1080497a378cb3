"""A family's deflated text: what a large family's lines are kept as in a published
record (exporter/expose/textformat.py), and what the Kafka worker sends back of the
per-partition families it rendered (exporter/contracts/worker.py).

The text is a raw deflate stream (RFC 1951) ended by a sync flush, not by a final block,
with its length and CRC-32 beside it: such streams of independent compressors, one after
the other and closed by one final block, are one valid deflate stream (a block refers
back only within its own compressor's text), so a gzip-encoded scrape writes the deflated
bytes as they are, with no inflating and no deflating again (exporter/expose/gzip_scrape.py)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from types import ModuleType

try:  # ISA-L's deflate (python-isal): zlib's interface, several times faster at level 1
    from isal import isal_zlib as _isal_zlib
except ImportError:  # a platform without its wheel
    _isal_zlib = None

# Bytes of text one inflation step writes at most (what a scrape holds at a time).
UNPACK_PIECE = 1 << 20
# zlib's wbits for a raw deflate stream: no zlib header, no Adler-32 trailer.
RAW = -15
# What deflates and checksums the text: ISA-L where installed (a dependency), else zlib.
# Either writes standard raw deflate, which zlib inflates (:meth:`Packed.pieces`); on
# the per-partition families of 100,000 group-partitions (48 MB of text) ISA-L's level 1
# takes about a seventh of zlib's level 1 CPU and writes a sixth fewer bytes, and its
# CRC-32 a third (bench/results/profile-live-100k.md).
DEFLATE: ModuleType = _isal_zlib or zlib


class Packed:
    """The deflated text of one family: ``len()`` is the text's length, ``crc`` its
    CRC-32; :meth:`pieces` inflates it in pieces of at most UNPACK_PIECE bytes."""

    __slots__ = ("crc", "data", "size")

    def __init__(self, data: bytes, size: int, crc: int) -> None:
        self.data, self.size, self.crc = data, size, crc

    def __len__(self) -> int:
        return self.size

    def pieces(self) -> Iterator[bytes]:
        d = zlib.decompressobj(RAW)
        rest = self.data
        while rest:
            out = d.decompress(rest, UNPACK_PIECE)
            if out:
                yield out
            rest = d.unconsumed_tail
        tail = d.flush()
        if tail:
            yield tail

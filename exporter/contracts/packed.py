"""A family's deflated text: what a large family's lines are kept as in a published
record (exporter/expose/textformat.py), and what the Kafka worker sends back of the
per-partition families it rendered (exporter/contracts/worker.py)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

# Bytes of text one inflation step writes at most (what a scrape holds at a time).
UNPACK_PIECE = 1 << 20


class Packed:
    """The deflated text of one family: ``len()`` is the text's length,
    :meth:`pieces` inflates it in pieces of at most UNPACK_PIECE bytes."""

    __slots__ = ("data", "size")

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    def __len__(self) -> int:
        return self.size

    def pieces(self) -> Iterator[bytes]:
        d = zlib.decompressobj()
        rest = self.data
        while rest:
            out = d.decompress(rest, UNPACK_PIECE)
            if out:
                yield out
            rest = d.unconsumed_tail
        tail = d.flush()
        if tail:
            yield tail

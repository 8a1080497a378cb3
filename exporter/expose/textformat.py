"""The Prometheus text format (0.0.4) encoder of the view families.

prometheus_client's generic encoder costs about 3 µs a sample, too slow for
the hundreds of thousands of per-partition series of a large cluster; these
few functions encode each sample once, straight into one buffer per family.
Format: https://prometheus.io/docs/instrumenting/exposition_formats/

A family whose text outgrows :data:`PACK_ABOVE` is kept deflated (:class:`Packed`):
the text of a large cluster is about 550 bytes per group-partition, repetitive label
sets that a fast deflate level shrinks 15 to 40 times. It is deflated as it is encoded,
so no full text of a large family is ever held, and a record holds only the deflated
bytes, also while the next cycle's exposition is rendered next to it; a scrape inflates
it piece by piece as it writes the body.

The deflating runs on one helper thread (:data:`_DEFLATER`) while the cycle's thread
formats the next lines: the deflate (ISA-L's or zlib's,
:data:`~exporter.contracts.packed.DEFLATE`) releases the interpreter lock while it
compresses, so on a second core the deflate costs the cycle almost nothing. Each family
keeps at most :data:`IN_FLIGHT` pieces waiting, so the text held stays bounded.
"""

from __future__ import annotations

import collections
import math
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from exporter.contracts.packed import DEFLATE, RAW, Packed

# Bytes of encoded lines a family buffers before deflating them: below this a family
# stays plain text (small clusters, every test's hand-built view). The families of a
# cycle fill side by side, so the process holds thirty-odd such buffers at its peak.
PACK_ABOVE = 1 << 18
# A fast level, for ISA-L (0-3) and zlib (1-9) alike: zlib's level 1 costs about 0.25 s of
# CPU per 100 MB of text, against 0.9 s at level 6 for a few per cent less.
PACK_LEVEL = 1
# Pieces of one family handed to the deflating thread and not deflated yet, at most.
IN_FLIGHT = 2
# One thread deflates every family's pieces in the order they are handed over (a
# family's pieces must reach its compressor in order).
_DEFLATER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deflate")


def escape_label(v: str) -> str:
    """A label value as the text format wants it: backslash, newline and quote escaped."""
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def fmt_value(v: float | int) -> str:
    if isinstance(v, int):
        return str(v)
    return float_text(v)


def float_text(v: float) -> str:
    """:func:`fmt_value` of a float: a whole number without its ".0"."""
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def finite(v: float | None) -> bool:
    """Unknown values are left out, never NaN or Inf."""
    return v is not None and math.isfinite(v)


class Lines:
    """Sample lines of one family, encoded as they are added (a list of 400k small
    strings would cost more memory than the text itself), deflated past PACK_ABOVE."""

    __slots__ = ("name", "help", "kind", "buf", "_z", "_packed", "_pending", "_size", "_crc")

    def __init__(self, name: str, help_text: str, kind: str = "gauge") -> None:
        self.name, self.help, self.kind = name, help_text, kind
        self.buf = bytearray()
        self._z: Any = None  # the family's compressor (DEFLATE.compressobj) once it deflates
        self._packed: list[bytes] = []
        self._pending: collections.deque[Future[bytes]] = collections.deque()
        self._size = 0
        self._crc = 0  # CRC-32 of the text deflated so far (updated on the deflating thread)

    def add(self, labels: str, v: float | int) -> None:
        self.add_text(f"{self.name}{{{labels}}} {fmt_value(v)}\n")

    def add_text(self, text: str) -> None:
        """Whole sample lines already formatted (each ``name{labels} value\\n``)."""
        buf = self.buf
        buf += text.encode()
        if len(buf) > PACK_ABOVE:
            self._deflate()

    def _deflate(self) -> None:
        """The buffered lines handed to the deflating thread (the buffer is not touched
        again here); past :data:`IN_FLIGHT` pieces waiting, the oldest is waited for."""
        if self._z is None:
            self._z = DEFLATE.compressobj(PACK_LEVEL, DEFLATE.DEFLATED, RAW)
        buf, self.buf = self.buf, bytearray()
        self._size += len(buf)
        self._pending.append(_DEFLATER.submit(self._step, self._z, buf))
        while len(self._pending) > IN_FLIGHT:
            self._packed.append(self._pending.popleft().result())

    def body(self) -> memoryview | Packed:
        """The family's sample lines: a read-only view of the text, or the deflated text
        once it outgrew PACK_ABOVE."""
        if self._z is None:
            return memoryview(self.buf).toreadonly()  # a view, not a copy
        self._deflate()
        self._packed.extend(f.result() for f in self._pending)
        self._pending.clear()
        self._packed.append(self._z.flush(DEFLATE.Z_SYNC_FLUSH))
        body = Packed(b"".join(self._packed), self._size, self._crc)
        self._packed, self._z, self._crc = [], None, 0
        return body

    def _step(self, z: Any, buf: bytearray) -> bytes:
        """On the deflating thread, which takes a family's pieces in order."""
        self._crc = DEFLATE.crc32(buf, self._crc)
        return z.compress(buf)

    def header(self) -> str:
        return f"# HELP {self.name} {escape_help(self.help)}\n# TYPE {self.name} {self.kind}\n"

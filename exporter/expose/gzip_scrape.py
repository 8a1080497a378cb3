"""A scrape's body gzip-encoded (RFC 1952) without inflating what is kept deflated.

Prometheus asks every target for ``Accept-Encoding: gzip``. A large cluster's families
are kept as raw deflate streams ended by a sync flush (exporter/contracts/packed.py);
written one after the other, with the small families and headers deflated at the scrape
between them and one final empty block at the end, they make one deflate stream, and so
one gzip member. Its trailer needs the CRC-32 of the whole text, which is combined from
the pieces' own (:func:`crc32_combine`): Python's zlib has ``crc32`` but not zlib's
``crc32_combine``, whose method (multiplying by x^(8n) modulo the CRC polynomial) is
written out here in a few lines. A scrape of 100,000 group-partitions then writes about
4 MB and spends no CPU on the 55 MB of text it stands for.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from exporter.contracts.packed import DEFLATE, RAW, Packed
from exporter.expose.textformat import PACK_LEVEL

# Member header: magic, deflate, no flags, no mtime, no extra flags, unknown OS.
HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
# A final, empty block of fixed codes: BFINAL 1, BTYPE 01, end of block (RFC 1951 3.2.6).
FINAL_BLOCK = b"\x03\x00"
# CRC-32's polynomial, bit-reversed as zlib computes it (ISO 3309, RFC 1952 8).
_POLY = 0xEDB88320
_ONE = 1 << 31  # the polynomial 1 (x^0) in the reversed bit order


def _mult(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial, both in the reversed bit order."""
    product = 0
    while a:
        if a & _ONE:
            product ^= b
        a = (a << 1) & 0xFFFFFFFF
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


def _powers() -> list[int]:
    """x^(2^k) modulo the polynomial, k = 0..31 (x^1 is bit 30 in the reversed order)."""
    p = [_ONE >> 1]
    for _ in range(31):
        p.append(_mult(p[-1], p[-1]))
    return p


_X_2K = _powers()


def _shift(n: int) -> int:
    """x^(8n) modulo the polynomial: what appending n zero bytes multiplies a CRC by."""
    p, k = _ONE, 3
    while n:
        if n & 1:
            p = _mult(_X_2K[k % 32], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of A + B, from A's CRC, B's CRC and B's length."""
    return _mult(_shift(len2), crc1) ^ crc2


def gzip_chunks(chunks: Iterable[bytes | memoryview | Packed]) -> list[bytes]:
    """The scrape's chunks as one gzip member: deflated pieces as they are, the text
    between them deflated here (a compressor per run of text, as a block may refer back
    only within its own compressor's text)."""
    out = [HEADER]
    crc = size = 0
    text: list[bytes | memoryview] = []

    def deflate_text() -> None:
        nonlocal crc, size
        if not text:
            return
        joined = b"".join(text)
        z = DEFLATE.compressobj(PACK_LEVEL, DEFLATE.DEFLATED, RAW)
        out.append(z.compress(joined) + z.flush(DEFLATE.Z_SYNC_FLUSH))
        crc, size = crc32_combine(crc, DEFLATE.crc32(joined), len(joined)), size + len(joined)
        text.clear()

    for c in chunks:
        if isinstance(c, Packed):
            deflate_text()
            out.append(c.data)
            crc, size = crc32_combine(crc, c.crc, c.size), size + c.size
        elif c:
            text.append(c)
    deflate_text()
    out += [FINAL_BLOCK, struct.pack("<II", crc, size & 0xFFFFFFFF)]
    return out


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding header takes gzip (RFC 9110 12.5.3): its qvalue above 0,
    ``gzip`` (or ``x-gzip``) named rather than ``*`` when both are, a malformed qvalue
    refusing."""
    q: dict[str, float] = {}
    for item in (accept_encoding or "").split(","):
        coding, *params = (part.strip().lower() for part in item.split(";"))
        weight = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    weight = float(param[2:])
                except ValueError:
                    weight = 0.0
        if coding:
            q.setdefault(coding, weight)
    for coding in ("gzip", "x-gzip", "*"):
        if coding in q:
            return q[coding] > 0
    return False
    return False

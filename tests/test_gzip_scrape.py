"""A gzip-encoded scrape (exporter/expose/gzip_scrape.py) is the plain scrape, gzipped:
the standard library's gzip reads back the same bytes, whose CRC-32 and length its own
check of the trailer holds; the families kept deflated go in as they are kept; a real
HTTP exchange negotiates it from Accept-Encoding."""

from __future__ import annotations

import gzip
import random
import threading
import urllib.request
import zlib

import pytest

from bench.footprint import snapshot
from exporter.config import Thresholds
from exporter.contracts.packed import DEFLATE, Packed
from exporter.evaluate.evaluator import Evaluator
from exporter.expose import gzip_scrape, textformat
from exporter.expose.gzip_scrape import accepts_gzip, crc32_combine, gzip_chunks
from exporter.expose.render import render_cluster
from exporter.expose.scrape import body_of, scrape
from exporter.expose.server import make_server
from exporter.store import ClusterRecord, SelfStats, Store

pytestmark = pytest.mark.unit


def test_crc32_combine_is_the_crc_of_the_concatenation() -> None:
    rnd = random.Random(7)
    for _ in range(300):
        a = rnd.randbytes(rnd.choice([0, 1, 3, 64, 1000, 70_000]))
        b = rnd.randbytes(rnd.choice([0, 1, 5, 255, 4096, 300_000]))
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
        assert DEFLATE.crc32(b, DEFLATE.crc32(a)) == zlib.crc32(a + b)  # ISA-L's CRC-32 is zlib's


def test_the_text_is_deflated_by_isa_l() -> None:
    """A dependency (pyproject.toml): zlib stands in only where its wheel is missing."""
    assert DEFLATE.__name__ == "isal.isal_zlib"


def _record(groups: int) -> ClusterRecord:
    ev = Evaluator("bench", Thresholds(), 15.0)
    for c in range(3):
        view = ev.evaluate(snapshot(groups, 50, c, 1_000_000.0 + 15 * c, live=True))
    return ClusterRecord(view=view, stats=SelfStats(), exposition=render_cluster(view))


@pytest.mark.parametrize("kept", [DEFLATE, zlib], ids=["kept-isal", "kept-zlib"])
@pytest.mark.parametrize("between", [DEFLATE, zlib], ids=["between-isal", "between-zlib"])
@pytest.mark.parametrize("groups", [2, 120], ids=["small", "deflated"])
def test_a_gzipped_scrape_reads_back_as_the_plain_one(groups: int, kept: object, between: object,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """With either deflate (ISA-L's or zlib's) keeping the families and deflating the
    text between them at the scrape: standard deflate either way, one stream together."""
    monkeypatch.setattr(textformat, "DEFLATE", kept)
    monkeypatch.setattr(gzip_scrape, "DEFLATE", between)
    rec = _record(groups)
    chunks, _ = scrape([rec], None, 1_000_100.0)
    packed = [c for c in chunks if isinstance(c, Packed)]
    assert bool(packed) == (groups == 120)
    body = b"".join(gzip_chunks(chunks))
    assert gzip.decompress(body) == body_of(chunks)  # checks the trailer's CRC-32 and length
    for p in packed:  # kept deflated, written as they are
        assert p.data in body


def test_accept_encoding_is_read_as_rfc_9110_says() -> None:
    assert accepts_gzip("gzip") and accepts_gzip("deflate, gzip;q=0.5") and accepts_gzip("*")
    assert accepts_gzip("identity, GZIP")
    assert not accepts_gzip(None) and not accepts_gzip("") and not accepts_gzip("deflate, br")
    assert not accepts_gzip("gzip;q=0") and not accepts_gzip("gzip;q=x")
    # gzip named wins over *, wherever each stands; a q among other parameters counts
    assert not accepts_gzip("*, gzip;q=0") and not accepts_gzip("*;q=1, gzip;q=0")
    assert accepts_gzip("*;q=0, gzip") and not accepts_gzip("gzip;q=0, x-gzip")  # gzip's own word
    assert accepts_gzip("br, gzip;level=1;q=0.3") and not accepts_gzip("gzip;level=1;q=0")


def test_the_server_serves_gzip_to_whom_asks_and_text_to_the_others() -> None:
    rec = _record(120)
    store = Store([rec])
    server = make_server(store, ("127.0.0.1", 0))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            plain = r.read()
            assert r.headers.get("Content-Encoding") is None
        req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=60) as r:
            zipped = r.read()
            assert r.headers["Content-Encoding"] == "gzip" and r.headers["Vary"] == "Accept-Encoding"
            assert int(r.headers["Content-Length"]) == len(zipped)
    finally:
        server.shutdown()
        server.server_close()
    unzipped = gzip.decompress(zipped)
    # the self-metrics' scrape-time values may differ; every view family is the same
    assert unzipped.split(b"# HELP lagwatch_")[0] == plain.split(b"# HELP lagwatch_")[0]
    assert len(zipped) * 8 < len(plain)

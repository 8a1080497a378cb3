"""The status page at ``/`` in a real browser (headless Debian Chromium), against real groups.

An exporter of its own (group filter = this test's token, so the page holds
exactly our rows) watches the session broker, where this test makes groups in
five situations: caught up and empty (ok), lag and no member (stopped), a group
whose id is hostile HTML plus non-ASCII text (stopped), a slow consumer
(lagging) and a wedged instrumented consumer (livelocked). Chromium renders the
page: its DOM must hold one row per group with the right ``data-status``, the
hostile id as text only, and the meta refresh; its screenshot is saved to
test-artifacts/statuspage.png and must be a real picture of the requested size
showing the status colours.
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import threading
import uuid
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from devenv.kafka import KafkaCluster
from exporter.contracts.view import SEVERITY
from tests.conftest import ROOT_DIR, commit_offsets, create_topic, exporter_config, produce, wait_for
from tests.support.exporter_proc import ExporterProcess

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT_DIR / "test-artifacts"
# Tall enough for every row: worst first, the ok row comes last, under the non-ok rows'
# reasons of ten lines each.
WIDTH, HEIGHT = 1400, 1400
# Badge colours of exporter/expose/statuspage.py's CSS.
COLOURS = {"ok": (0x2E, 0x7D, 0x32), "lagging": (0xF9, 0xA8, 0x25),
           "livelocked": (0xC6, 0x28, 0x28), "stopped": (0x42, 0x42, 0x42)}


# -- browser ---------------------------------------------------------------------

def chromium(tmp_path: Path, *args: str, timeout: float = 90) -> str:
    # `make test` installs Debian's chromium; without it the test fails, it does not skip.
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} missing (apt-get install chromium)"
    """Run headless Chromium once with a fresh profile; return its stdout."""
    profile = tmp_path / f"chromium-profile-{uuid.uuid4().hex[:6]}"
    profile.mkdir()
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"chromium {' '.join(args)} did not finish in {timeout}s") from None
    finally:
        # the browser's helpers (zygote, renderers) share its process group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}:\n{err.decode(errors='replace')[-3000:]}"
    return out.decode()


class Rows(HTMLParser):
    """Rows of class 'group' (data-status, cell texts), script elements and meta tags."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[dict[str, Any]] = []
        self.scripts = 0
        self.metas: list[dict[str, str | None]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        elif tag == "meta":
            self.metas.append(a)
        elif tag == "tr" and "group" in (a.get("class") or "").split():
            self.rows.append({"status": a.get("data-status"), "cells": []})
        elif tag == "td" and self.rows and self._cell is None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1]["cells"].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


# -- PNG (zlib only; no imaging library in the dependencies) ---------------------

def read_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, rows) of an 8-bit RGB/RGBA non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    assert ihdr is not None and idat, "no IHDR/IDAT"
    w, h, depth, ctype, _comp, _filter, interlace = ihdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, ihdr
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    assert len(raw) == h * (stride + 1), "truncated image data"
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for x in range(bpp, stride):
                line[x] = (line[x] + line[x - bpp]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif f == 3:
            for x in range(stride):
                left = line[x - bpp] if x >= bpp else 0
                line[x] = (line[x] + ((left + prev[x]) >> 1)) & 0xFF
        elif f == 4:
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b = prev[x]
                c = prev[x - bpp] if x >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 0xFF
        else:
            assert f == 0, f"unknown filter {f}"
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def colours(bpp: int, rows: list[bytes]) -> dict[tuple[int, int, int], int]:
    count: dict[tuple[int, int, int], int] = {}
    for row in rows:
        for i in range(0, len(row), bpp):
            px = (row[i], row[i + 1], row[i + 2])
            count[px] = count.get(px, 0) + 1
    return count


# -- the world the page shows ------------------------------------------------------

class Feeder(threading.Thread):
    def __init__(self, kafka: KafkaCluster, rates: dict[str, float]) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 10})
        self.rates = rates
        self.stop_flag = threading.Event()

    def run(self) -> None:
        credit = dict.fromkeys(self.rates, 0.0)
        while not self.stop_flag.wait(0.1):
            for t, r in self.rates.items():
                credit[t] += r * 0.1
                while credit[t] >= 1:
                    self.producer.produce(t, value=b"y" * 50)
                    credit[t] -= 1
            self.producer.poll(0)
        self.producer.flush(10)


@pytest.fixture(scope="module")
def page(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    token = f"sp{uuid.uuid4().hex[:8]}"
    groups = {
        "ok": f"{token}-caught-up",
        "stopped": f"{token}-abandoned",
        "hostile": f"<script>alert(1)</script>\"'& Grüße 日本語 ☃ <b>{token}</b>",
        "lagging": f"{token}-slow",
        "livelocked": f"{token}-wedged",
    }
    expect = {"ok": "ok", "stopped": "stopped", "hostile": "stopped", "lagging": "lagging",
              "livelocked": "livelocked"}
    still = create_topic(kafka, f"{token}-still", partitions=1)
    produce(kafka, still, {0: 10})
    commit_offsets(kafka.bootstrap_servers, groups["ok"], still, {0: 10})
    commit_offsets(kafka.bootstrap_servers, groups["stopped"], still, {0: 2})
    commit_offsets(kafka.bootstrap_servers, groups["hostile"], still, {0: 4})
    live = {k: create_topic(kafka, f"{token}-{k}", partitions=1) for k in ("lagging", "livelocked")}
    feeder = Feeder(kafka, {live["lagging"]: 20, live["livelocked"]: 10})
    feeder.start()
    tmp = tmp_path_factory.mktemp("statuspage")
    cfg = exporter_config(tmp, kafka.bootstrap_servers, clusters=[
        {"name": "browser", "bootstrap_servers": kafka.bootstrap_servers, "groups": {"allow": token}}])
    exp = ExporterProcess(None, config=cfg)
    consumers = [
        subprocess.Popen([sys.executable, "-m", "devenv.scenario_consumer", "--bootstrap",
                          kafka.bootstrap_servers, "--group", groups[k], "--topic", live[k], *extra],
                         cwd=ROOT_DIR, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for k, extra in (("lagging", ["--mode", "slow", "--delay", "0.25"]),
                         ("livelocked", ["--mode", "blocked", "--after", "5",
                                         "--client-id", "wedged-worker"]))]
    try:
        exp.wait_ready()

        def all_there() -> dict[str, str] | None:
            got = {g["group"]: g["status"] for g in exp.api("clusters/browser/groups")}
            now = {k: got.get(name) for k, name in groups.items()}
            return now if now == expect else None

        try:
            wait_for(all_there, 90, "every group in its status")
        except AssertionError:
            got = {g["group"]: g["status"] for g in exp.api("clusters/browser/groups")}
            raise AssertionError(f"want {expect}, have {got}") from None
        yield {"exporter": exp, "groups": groups, "expect": expect, "token": token}
    finally:
        for c in consumers:
            c.terminate()
        for c in consumers:
            try:
                c.wait(15)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait(5)
        feeder.stop_flag.set()
        feeder.join(15)
        exp.stop()
        os.unlink(exp.log.name)


def test_rendered_dom_has_one_escaped_row_per_group(page: dict[str, Any], tmp_path: Path) -> None:
    dom = chromium(tmp_path, "--dump-dom", page["exporter"].base + "/")
    parsed = Rows()
    parsed.feed(dom)
    rows = {r["cells"][0]: r for r in parsed.rows}
    groups, expect = page["groups"], page["expect"]
    assert len(parsed.rows) == len(groups), [r["cells"][:3] for r in parsed.rows]
    for key, name in groups.items():
        assert name in rows, f"no row for {name!r}; rows: {list(rows)}"
        row = rows[name]
        assert row["status"] == expect[key], (name, row)
        assert row["cells"][2] == expect[key]  # the visible badge says the same
    # The hostile id is text in its cell, nothing more: no element was created from it.
    assert parsed.scripts == 0, "a <script> element reached the DOM"
    assert "<b>" not in dom and "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "Grüße 日本語 ☃" in dom
    # Non-ok rows carry reasons; the livelocked one names the wedged member.
    assert "last polled" in rows[groups["livelocked"]]["cells"][6]
    assert "wedged-worker" in rows[groups["livelocked"]]["cells"][6]
    assert "no member owns" in rows[groups["stopped"]]["cells"][6]
    # Worst first (the exporter's severity order), so trouble is at the top of the page.
    order = [r["status"] for r in parsed.rows]
    assert order == sorted(order, key=lambda s: -SEVERITY[s]), order
    refresh = [m for m in parsed.metas if (m.get("http-equiv") or "").lower() == "refresh"]
    assert refresh and int(refresh[0]["content"] or "0") > 0, parsed.metas


def test_screenshot_shows_the_groups(page: dict[str, Any], tmp_path: Path) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "statuspage.png"
    shot.unlink(missing_ok=True)
    # Every compositor stage before the capture: on a loaded machine a headless screenshot
    # otherwise can hold a frame painted only in part.
    chromium(tmp_path, f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
             "--run-all-compositor-stages-before-draw", page["exporter"].base + "/")
    assert shot.exists() and shot.stat().st_size > 1000
    w, h, bpp, rows = read_png(shot.read_bytes())
    assert (w, h) == (WIDTH, HEIGHT)
    seen = colours(bpp, rows)
    assert len(seen) > 50, f"only {len(seen)} colours: blank page?"
    white = seen.get((255, 255, 255), 0)
    assert white < w * h * 0.98, "almost all white"
    for status, rgb in COLOURS.items():
        near = sum(n for px, n in seen.items() if max(abs(a - b) for a, b in zip(px, rgb, strict=True)) <= 4)
        assert near >= 100, f"no {status} badge colour {rgb} in the screenshot"

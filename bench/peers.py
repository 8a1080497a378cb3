"""KMinion and kafka_exporter on the fleet of a ``bench_core`` run, one after the other.

Both collect from Kafka when scraped, so a scrape's duration is their whole cycle. The
binaries are built by the caller from the peers' public sources; this module only runs
them, on loopback, against the run's broker, with the same group and topic filters as
lagwatch. Each peer is started alone, scraped once to warm up (connections, metadata),
then ``scrapes`` times one after the other, each as Prometheus asks (gzip where the peer
offers it: both do, compressing at the scrape); its peak RSS (VmHWM) is read before it stops.
"""

from __future__ import annotations

import gzip
import os
import re
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from devenv.kafka import die_with_parent, free_port
from devenv.procs import memory_mb

# The per group-partition lag series of each peer, counted to show it saw the whole fleet.
LAG_SERIES = {"kminion": b"kminion_kafka_consumer_group_topic_partition_lag{",
              "kafka_exporter": b"kafka_consumergroup_lag{"}


def kminion_command(binary: str, bootstrap: str, topic: str, group_prefix: str, port: int,
                    tmp: Path) -> tuple[list[str], dict[str, str]]:
    """KMinion's defaults except: loopback, the run's topic and groups, consumer groups read
    through the Admin API (``scrapeMode: adminApi``, per partition), warnings only."""
    cfg = tmp / "kminion.yml"
    cfg.write_text(yaml.safe_dump({
        "logger": {"level": "warn"},
        "kafka": {"brokers": [bootstrap]},
        "minion": {"consumerGroups": {"enabled": True, "scrapeMode": "adminApi",
                                      "granularity": "partition",
                                      "allowedGroups": [f"/^{re.escape(group_prefix)}/"]},
                   "topics": {"allowedTopics": [topic]}},
        "exporter": {"host": "127.0.0.1", "port": port}}))
    return [binary], {"CONFIG_FILEPATH": str(cfg)}


def kafka_exporter_command(binary: str, bootstrap: str, topic: str, group_prefix: str, port: int,
                           tmp: Path) -> tuple[list[str], dict[str, str]]:
    """kafka_exporter's defaults except: loopback, the run's topic and groups, and the
    protocol of Kafka 4.0 (its default, 2.0.0, asks for versions Kafka 4 no longer serves)."""
    del tmp
    return [binary, f"--kafka.server={bootstrap}", f"--web.listen-address=127.0.0.1:{port}",
            f"--topic.filter=^{re.escape(topic)}$", f"--group.filter=^{re.escape(group_prefix)}.*",
            "--kafka.version=4.0.0"], {}


PEERS = {"kminion": kminion_command, "kafka_exporter": kafka_exporter_command}


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:  # a busy machine: the figures are taken already
        proc.kill()
        proc.wait(30)


def scrape(url: str, timeout: float = 600) -> tuple[float, int, bytes]:
    """One scrape as Prometheus asks for it (``Accept-Encoding: gzip``): seconds to its
    last byte, bytes on the wire, and the text (inflated after the timing where the
    server gzipped it; an older lagwatch answers text)."""
    s = time.monotonic()
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
        took = time.monotonic() - s
        zipped = r.headers.get("Content-Encoding") == "gzip"
    return took, len(body), gzip.decompress(body) if zipped else body


def _first_scrape(proc: subprocess.Popen, url: str, log: Path, deadline: float) -> bytes:
    """The first successful scrape (the warm-up), waiting for the peer to listen."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            return scrape(url)[2]
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"no /metrics in time: {log.read_text()[-2000:]}")


def measure_peer(name: str, binary: str, bootstrap: str, topic: str, group_prefix: str,
                 scrapes: int, preexec: Callable[[], None] = die_with_parent) -> dict[str, float | str]:
    """Run one peer alone and scrape it ``scrapes`` times after a warm-up scrape
    (``preexec`` runs in its process before it starts)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        argv, env = PEERS[name](binary, bootstrap, topic, group_prefix, port, Path(tmp))
        log = Path(tmp) / "peer.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                    preexec_fn=preexec)
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            _first_scrape(proc, url, log, time.monotonic() + 600)
            took, sizes, series = [], [], []
            for _ in range(scrapes):
                t, _wire, body = scrape(url)
                took.append(t)
                sizes.append(len(body))
                series.append(body.count(LAG_SERIES[name]))
            rss = memory_mb(proc.pid, "VmHWM")
        finally:
            stop(proc)
    return {"name": name, "scrape_s": statistics.median(took), "scrape_max_s": max(took),
            "scrapes": scrapes, "peak_rss_mb": rss, "metrics_mb": max(sizes) / 1e6,
            "lag_series": min(series)}

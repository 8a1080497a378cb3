"""Soak: consumer churn and topic churn against one local broker; RSS and open fds over time.

    .venv/bin/python -m bench.soak --minutes 30

Every few seconds a new topic and a consumer group with a live consumer process
appear, the oldest consumer is killed, and the oldest topic and group are
deleted, so groups, topics, members and series keep coming and going. Every
minute it prints the exporter's RSS and open file descriptors (main process
and Kafka worker child) and how many groups it exports. A benchmark: nothing
is asserted; flat columns are the result.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import deque
from pathlib import Path

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from devenv.kafka import KafkaCluster, die_with_parent, free_port
from devenv.procs import children, memory_mb, open_fds
from tests.support.exporter_proc import parse_metrics, select

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--churn-every", type=float, default=5.0)
    ap.add_argument("--live", type=int, default=6, help="consumer groups alive at once")
    args = ap.parse_args()
    with KafkaCluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        bs = cluster.bootstrap_servers
        exporter, port = _start_exporter(Path(tmp), bs)
        churn = _Churn(bs, args.live)
        start = time.monotonic()
        next_report = start
        print(f"{'min':>5} {'main RSS MB':>11} {'main fds':>8} {'worker RSS MB':>13} {'worker fds':>10} "
              f"{'groups':>6} {'series':>7}", flush=True)
        try:
            while time.monotonic() - start < args.minutes * 60:
                churn.step()
                if time.monotonic() >= next_report:
                    next_report += 60
                    _print_row(port, exporter.pid, start)
                time.sleep(args.churn_every)
        finally:
            churn.stop()
            exporter.terminate()
            exporter.wait(30)
    return 0


def _start_exporter(tmp: Path, bs: str) -> tuple[subprocess.Popen, int]:
    """The exporter on a free port, once it answers (at most 60 s)."""
    port = free_port()
    cfg = tmp / "soak.yml"
    cfg.write_text(yaml.safe_dump({
        "interval": 2, "listen": f"127.0.0.1:{port}",
        "thresholds": {"stall_after": 20, "livelock_after": 20, "report_expiry": 60},
        "clusters": [{"name": "soak", "bootstrap_servers": bs}]}))
    exporter = subprocess.Popen([sys.executable, "-m", "exporter", "--config", str(cfg)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=die_with_parent)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the exporter answers
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
            break
        except OSError:
            time.sleep(0.3)
    return exporter, port


def _print_row(port: int, pid: int, start: float) -> None:
    """One row: the exporter's and its worker's RSS and fds, the groups and series served."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    m = parse_metrics(body.decode())
    groups = len(select(m, "kafka_consumergroup_members"))
    main_rss, main_fds = memory_mb(pid), open_fds(pid)
    # the Kafka worker (and multiprocessing's small resource tracker)
    kid_stats = [(memory_mb(k), open_fds(k)) for k in children(pid)]
    w_rss, w_fds = sum(r for r, _ in kid_stats), sum(f for _, f in kid_stats)
    print(f"{(time.monotonic() - start) / 60:>5.1f} {main_rss:>11.0f} {main_fds:>8} "
          f"{w_rss:>13.0f} {w_fds:>10} {groups:>6} {len(m):>7}", flush=True)


class _Churn:
    """Topics and groups coming and going: each step a new topic with a live consumer; past
    ``keep`` of them the oldest consumer is killed and its topic and group deleted."""

    def __init__(self, bs: str, keep: int) -> None:
        self.bs, self.keep, self.n = bs, keep, 0
        self.admin = AdminClient({"bootstrap.servers": bs})
        self.live: deque[tuple[str, str, subprocess.Popen]] = deque()
        self.topics: deque[str] = deque()
        self.doomed: deque[tuple[float, str]] = deque()
        self._stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bs, "linger.ms": 20})
        threading.Thread(target=self._produce, daemon=True).start()

    def _produce(self) -> None:
        while not self._stop.wait(0.2):
            for t in list(self.topics):
                with contextlib.suppress(Exception):  # topic just deleted
                    self.producer.produce(t, value=b"x" * 200)
            self.producer.poll(0)

    def step(self) -> None:
        self.n += 1
        topic, group = f"soak-t{self.n}", f"soak-g{self.n}"
        self.admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        self.topics.append(topic)
        mode = ("healthy", "nocommit", "slow")[self.n % 3]
        proc = subprocess.Popen(
            [sys.executable, "-m", "devenv.scenario_consumer", "--mode", mode, "--bootstrap", self.bs,
             "--group", group, "--topic", topic, "--instrument"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent)
        self.live.append((topic, group, proc))
        if len(self.live) > self.keep:
            old_topic, old_group, old = self.live.popleft()
            old.kill()
            old.wait(10)
            self.topics.remove(old_topic)
            self.admin.delete_topics([old_topic])[old_topic].result(30)
            self.doomed.append((time.monotonic(), old_group))
        # a killed member leaves after its session timeout (6 s): delete its group later
        while self.doomed and time.monotonic() - self.doomed[0][0] > 15:
            _t, g = self.doomed.popleft()
            with contextlib.suppress(Exception):
                self.admin.delete_consumer_groups([g])[g].result(30)

    def stop(self) -> None:
        self._stop.set()
        for _t, _g, p in self.live:
            p.kill()


if __name__ == "__main__":
    sys.exit(main())

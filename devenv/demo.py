"""``make demo``: a live lag picture from nothing but the repository.

    python -m devenv.demo [--duration SECONDS] [--table-every SECONDS]

Starts, all on loopback:

* a Kafka broker (devenv.kafka.KafkaCluster, KRaft, temporary directory);
* a workload: a producer thread writing four topics, and consumer processes
  (devenv.scenario_consumer) that end up in different statuses:

  =====================  ===========  =============================================
  group                  status       why
  =====================  ===========  =============================================
  orders-service         ok           consumes and commits as fast as it is fed
  payments-reconciler    lagging      4 records/s against 20 records/s produced
  invoice-renderer       livelocked   instrumented; its handler wedges after 20
                                      records while librdkafka keeps heartbeating
  audit-archiver         stalled      polls but never commits
  nightly-report         stopped      committed offsets, no member
  =====================  ===========  =============================================

* the exporter (``python -m exporter``) with demo-sized thresholds (2 s cycles,
  15 s to livelocked, 20 s to stalled);
* a Prometheus (``/usr/bin/prometheus`` or the one on PATH) scraping it as job
  ``lagwatch`` with alerts/lagwatch.rules.yml loaded; without Prometheus the
  demo says so and runs without it.

It prints the URLs, then every few seconds a status table read from the
exporter's JSON API. Ctrl-C or SIGTERM (or ``--duration``) stops everything:
consumers first, then the exporter and Prometheus, then the broker; every child
is waited for and every temporary directory removed. All temporary files live
under one directory, printed on a ``TEMPDIRS`` line at start. Children are in
their own sessions (so a Ctrl-C reaches only the demo, which stops them in
order) and die with the demo if it is killed outright (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devenv.kafka import BrokerStartError, KafkaCluster, commit_offsets, die_with_parent, free_port

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "demo"
INTERVAL = 2.0
STALL_AFTER = 20.0
LIVELOCK_AFTER = 15.0

# topic -> (partitions, records per second)
TOPICS = {
    "demo-orders": (3, 20.0),
    "demo-payments": (1, 20.0),
    "demo-invoices": (1, 10.0),
    "demo-audit": (1, 5.0),
}


@dataclass(frozen=True)
class Consumer:
    group: str
    topic: str
    mode: str
    expect: str
    extra: tuple[str, ...] = ()


CONSUMERS = (
    Consumer("orders-service", "demo-orders", "healthy", "ok"),
    Consumer("payments-reconciler", "demo-payments", "slow", "lagging", ("--delay", "0.25")),
    Consumer("invoice-renderer", "demo-invoices", "blocked", "livelocked",
             ("--after", "20", "--client-id", "invoice-renderer-1")),
    Consumer("audit-archiver", "demo-audit", "nocommit", "stalled"),
)
STOPPED_GROUP = ("nightly-report", "demo-orders")  # committed offsets, never any member

STATUS_COLOURS = {"ok": "32", "lagging": "33", "stalled": "33;1", "livelocked": "31;1",
                  "stopped": "35", "rewind": "35", "error": "31"}


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM, raised by the signal handler wherever the main thread is. A
    BaseException, as KeyboardInterrupt is: the code it interrupts retries on Exception
    (KafkaCluster.wait_ready's metadata polls), and would swallow the one signal."""


class SignalLatch:
    """The handler of Ctrl-C and SIGTERM: raises Interrupted, and keeps the signal apart from
    the raise. A signal that lands while the main thread runs code whose exceptions Python
    ignores (a weakref callback in importlib's module locks, a ``__del__``) loses its
    Interrupted, so the demo's loops also call ``check``. Once ``stopping`` is set, signals
    are ignored so that the cleanup finishes."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.stopping = False

    def __call__(self, signum: int, _frame: object) -> None:
        if self.stopping:
            return
        self.received.append(signal.Signals(signum).name)
        raise Interrupted(self.received[-1])

    def check(self) -> None:
        """Raise Interrupted if a signal came, whether or not its own raise got through."""
        if self.received:
            raise Interrupted(self.received[0])


LATCH = SignalLatch()


def say(*words: object) -> None:
    print(*words, flush=True)


def _port(preferred: int) -> int:
    """The conventional port if it is free on loopback, else any free one."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            return free_port()
    return preferred


def _get_json(url: str, timeout: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class DemoCluster(KafkaCluster):
    """KafkaCluster whose JVMs ignore the terminal's Ctrl-C.

    A JVM started with SIGINT ignored keeps it ignored (no shutdown hook on
    SIGINT), so a Ctrl-C reaches only the demo, which stops the consumers while
    the broker is still there and then the broker itself with SIGTERM.
    """

    def waiting(self) -> None:
        LATCH.check()

    def _spawn(self, b: Any) -> None:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            super()._spawn(b)
        finally:
            signal.signal(signal.SIGINT, old)


class Producer(threading.Thread):
    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="demo-producer", daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                                       "client.id": "demo-producer"})
        self.stop_flag = threading.Event()
        self.sent = 0

    def run(self) -> None:
        tick = 0.1
        credit = dict.fromkeys(TOPICS, 0.0)
        while not self.stop_flag.wait(tick):
            for topic, (_parts, rate) in TOPICS.items():
                credit[topic] += rate * tick
                while credit[topic] >= 1:
                    value = json.dumps({"n": self.sent, "at": time.time()}).encode()
                    with contextlib.suppress(BufferError):
                        self.producer.produce(topic, value=value)
                        self.sent += 1
                    credit[topic] -= 1
            self.producer.poll(0)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(5)
        self.producer.flush(5)
        self.producer.close()  # no reconnect attempts (and log lines) once the broker is gone


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root: Path | None = None
        self.cluster: DemoCluster | None = None
        self.producer: Producer | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.exporter_url = ""
        self.prometheus_url = ""
        self.started = time.monotonic()

    # -- children ------------------------------------------------------------
    def spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        assert self.root
        log = self.root / "logs" / f"{name}.log"
        self.logs[name] = log
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=die_with_parent)
        self.procs[name] = proc
        return proc

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join(self.logs[name].read_text(errors="replace").splitlines()[-lines:])
        except (KeyError, OSError):
            return "(no log)"

    # -- start ---------------------------------------------------------------
    def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="lagwatch-demo-"))
        (self.root / "logs").mkdir()
        say(f"TEMPDIRS {self.root}")
        say("starting Kafka (first start can take ~20 s) ...")
        self.cluster = DemoCluster(brokers_count=1, heap="512m")
        saved, tempfile.tempdir = tempfile.tempdir, str(self.root)  # broker dir inside ours
        try:
            self.cluster.start()
        finally:
            tempfile.tempdir = saved
        LATCH.check()
        bootstrap = self.cluster.bootstrap_servers
        say(f"Kafka {self.cluster.version} up at {bootstrap} (data in {self.cluster.root})")
        self._topics(bootstrap)
        self.producer = Producer(bootstrap)
        self.producer.start()
        for c in CONSUMERS:
            self.spawn(c.group, [sys.executable, "-m", "devenv.scenario_consumer", "--mode", c.mode,
                                 "--bootstrap", bootstrap, "--group", c.group, "--topic", c.topic,
                                 *c.extra])
        LATCH.check()
        self._exporter(bootstrap)
        self._prometheus()

    def _topics(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        futs = admin.create_topics([NewTopic(t, num_partitions=p, replication_factor=1)
                                    for t, (p, _rate) in TOPICS.items()])
        for f in futs.values():
            f.result(30)
        group, topic = STOPPED_GROUP
        # Offsets committed by a tool that never joins: a group with lag and no member.
        commit_offsets(bootstrap, group, topic, dict.fromkeys(range(TOPICS[topic][0]), 0))

    def _exporter(self, bootstrap: str) -> None:
        assert self.root
        port = _port(9308)
        cfg = {
            "interval": INTERVAL,
            "request_timeout": 5,
            "log_level": "WARNING",
            "thresholds": {"stall_after": STALL_AFTER, "livelock_after": LIVELOCK_AFTER,
                           "lag_seconds": 3600, "window": 120, "report_stale_after": 10,
                           "report_expiry": 300},
            "clusters": [{"name": CLUSTER, "bootstrap_servers": bootstrap}],
        }
        path = self.root / "lagwatch.yml"
        path.write_text(yaml.safe_dump(cfg))
        proc = self.spawn("exporter", [sys.executable, "-m", "exporter", "--config", str(path),
                                       "--listen", f"127.0.0.1:{port}"])
        self.exporter_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            LATCH.check()
            if proc.poll() is not None:
                raise RuntimeError(f"the exporter exited with {proc.returncode}:\n"
                                   f"{self.log_tail('exporter')}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(self.exporter_url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the exporter was not ready within 60 s:\n{self.log_tail('exporter')}")
            time.sleep(0.3)

    def _prometheus(self) -> None:
        assert self.root
        binary = next((b for b in ("/usr/bin/prometheus", shutil.which("prometheus")) if b and
                       os.access(b, os.X_OK)), None)
        if binary is None:
            say("Prometheus not found (Debian: apt-get install prometheus); running without it")
            return
        port = _port(9090)
        target = self.exporter_url.removeprefix("http://")
        cfg = {
            "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
            "rule_files": [str(ROOT / "alerts" / "lagwatch.rules.yml")],
            "scrape_configs": [{"job_name": "lagwatch", "static_configs": [{"targets": [target]}]}],
        }
        path = self.root / "prometheus.yml"
        path.write_text(yaml.safe_dump(cfg))
        proc = self.spawn("prometheus", [
            binary, f"--config.file={path}", f"--storage.tsdb.path={self.root / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1d",
            "--log.level=warn"])
        self.prometheus_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            LATCH.check()
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(self.prometheus_url + "/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
            time.sleep(0.3)
        say(f"Prometheus did not come up; running without it:\n{self.log_tail('prometheus')}")
        self._stop_procs(["prometheus"])
        self.prometheus_url = ""

    # -- run -----------------------------------------------------------------
    def banner(self) -> None:
        assert self.cluster
        e, p = self.exporter_url, self.prometheus_url
        lines = [
            "",
            "lagwatch demo is running:",
            f"  status page   {e}/",
            f"  metrics       {e}/metrics",
            f"  API           {e}/api/v1/clusters/{CLUSTER}/groups",
        ]
        if p:
            lines += [f"  Prometheus    {p}/graph?g0.expr=kafka_consumergroup_max_lag_seconds",
                      f"  alerts        {p}/alerts"]
        else:
            lines += ["  Prometheus    (not running)"]
        lines += [
            f"  Kafka         {self.cluster.bootstrap_servers}",
            "Expected within about a minute: "
            + ", ".join(f"{c.group} {c.expect}" for c in CONSUMERS)
            + f", {STOPPED_GROUP[0]} stopped.",
            "Ctrl-C stops everything." if not self.args.duration
            else f"Stopping by itself after {self.args.duration:g} s (or on Ctrl-C).",
            "",
        ]
        say("\n".join(lines))

    def table(self) -> str:
        elapsed = time.monotonic() - self.started
        head = f"--- {time.strftime('%H:%M:%S')}  (+{elapsed:.0f}s)  cluster {CLUSTER} ---"
        try:
            groups = _get_json(f"{self.exporter_url}/api/v1/clusters/{CLUSTER}/groups")
        except (OSError, ValueError) as err:
            return f"{head}\n  exporter API not answering: {err}"
        colour = sys.stdout.isatty()
        rows = [f"  {'GROUP':<22} {'TYPE':<8} {'STATUS':<11} {'LAG(OFFSETS)':>12} {'LAG(SECONDS)':>12}"]
        for g in sorted(groups, key=lambda g: g["group"]):
            lag_s = g.get("max_lag_seconds")
            status = g["status"]
            cell = f"{status:<11}"
            if colour and status in STATUS_COLOURS:
                cell = f"\x1b[{STATUS_COLOURS[status]}m{cell}\x1b[0m"
            lag = g.get("lag_offsets")
            rows.append(f"  {g['group']:<22} {g['type']:<8} {cell} "
                        f"{'-' if lag is None else lag:>12} "
                        f"{'-' if lag_s is None else f'{lag_s:.1f}':>12}")
        if not groups:
            rows.append("  (no consumer groups yet)")
        return "\n".join([head, *rows, *self._prometheus_line()])

    def _prometheus_line(self) -> list[str]:
        if not self.prometheus_url:
            return []
        try:
            up = _get_json(self.prometheus_url + "/api/v1/query?" +
                           urllib.parse.urlencode({"query": 'up{job="lagwatch"}'}))["data"]["result"]
            alerts = _get_json(self.prometheus_url + "/api/v1/alerts")["data"]["alerts"]
        except (OSError, ValueError, KeyError) as err:
            return [f"  prometheus: not answering ({err})"]
        target = "up" if up and up[0]["value"][1] == "1" else "not scraped yet"
        by_state: dict[str, list[str]] = {}
        for a in alerts:
            by_state.setdefault(a["state"], []).append(
                f"{a['labels'].get('alertname')}{{group={a['labels'].get('group', '')}}}")
        parts = [f"{len(v)} {k} ({', '.join(sorted(v))})" for k, v in sorted(by_state.items())]
        return [f"  prometheus: target lagwatch {target}; alerts: {'; '.join(parts) or 'none yet'}"]

    def watch(self) -> int:
        every = self.args.table_every
        end = self.started + self.args.duration if self.args.duration else None
        next_table = time.monotonic()
        while True:
            LATCH.check()
            now = time.monotonic()
            if end is not None and now >= end:
                say(f"--duration {self.args.duration:g} s reached")
                return 0
            assert self.cluster
            if not all(b.alive() for b in self.cluster.brokers):
                say(f"the Kafka broker died:\n{self.cluster.brokers[0].log_tail(15)}")
                return 1
            for name, proc in list(self.procs.items()):
                if proc.poll() is not None:
                    say(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
                    del self.procs[name]
                    if name == "exporter":
                        return 1
                    if name == "prometheus":
                        self.prometheus_url = ""
            if now >= next_table:
                say(self.table())
                next_table = now + every
            time.sleep(0.25)

    # -- stop ----------------------------------------------------------------
    def _stop_procs(self, names: list[str], timeout: float = 10.0) -> None:
        procs = [(n, self.procs.pop(n)) for n in names if n in self.procs]
        for _n, p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.terminate()
        deadline = time.monotonic() + timeout
        for n, p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"{n} did not stop within {timeout:g} s; killing it")
                p.kill()
                p.wait(5)

    def stop(self) -> None:
        if self.producer is not None:
            with contextlib.suppress(Exception):
                self.producer.stop()
        consumers = [c.group for c in CONSUMERS]
        self._stop_procs([n for n in self.procs if n in consumers])  # while the broker is still up
        self._stop_procs(list(self.procs))
        if self.cluster is not None:
            self.cluster.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            if self.root.exists():
                say(f"could not remove {self.root}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devenv.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=0.0,
                    help="stop by itself after this many seconds (default: run until Ctrl-C)")
    ap.add_argument("--table-every", type=float, default=5.0,
                    help="seconds between status tables (default 5)")
    args = ap.parse_args(argv)

    signal.signal(signal.SIGINT, LATCH)
    signal.signal(signal.SIGTERM, LATCH)
    # A demo that does not stop tells where it is: tests/test_demo.py asks on a timeout.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    demo = Demo(args)
    code = 1
    try:
        demo.start()
        demo.banner()
        code = demo.watch()
    except Interrupted as sig:
        say(f"{sig}: stopping")
        code = 0
    except (BrokerStartError, RuntimeError, OSError) as err:
        say(f"demo failed: {err}")
        code = 1
    finally:
        LATCH.stopping = True
        say("stopping consumers, exporter, Prometheus and Kafka ...")
        demo.stop()
        say("demo stopped; nothing left running")
    return code


if __name__ == "__main__":
    sys.exit(main())

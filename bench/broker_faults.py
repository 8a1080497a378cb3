"""Broker faults under a 200-group fleet (issue 25's fault acceptance): a broker restart and
then a SIGKILL of a group coordinator must not crash the Kafka worker, fail a cycle
(``lagwatch_up`` 0), take a healthy group out of ``ok``, or restart a stalled group's clock.

    .venv/bin/python -m bench.broker_faults [--out bench/results/broker-faults.md]

One 3-broker KRaft cluster (replication factor 3), the exporter (``python -m exporter``,
2 s interval, ``--interval`` to change it), and 200 groups:

- 196 commit-only groups, caught up on quiet topics (``ok``, no members);
- 3 live groups (devenv/fleet_consumer.py, one commit per record; two classic, one KIP-848)
  on a topic produced at 20 records/s;
- 1 stalled group: a member that keeps polling but stopped committing, its topic produced
  at 5 records/s (``stalled`` after ``stall_after`` 20 s).

Once every group shows its status, the faults, one after the other: a broker restart
(SIGTERM, controlled shutdown) of a broker that coordinates some groups but not the stalled
one, then SIGKILL of the stalled group's coordinator, restarted once its groups have moved.
A recorder reads ``/metrics`` and the JSON API continuously (at most every 0.5 s). Exit
status 1 if a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devenv.fleet_workloads import Proc, ProducerProcess, TopicSpec, coordinators, create_topics, in_child
from devenv.kafka import KafkaCluster
from devenv.procs import children
from exporter.evaluate.constants import UNREADABLE_GRACE_CYCLES, UNREADABLE_GRACE_SECONDS
from tests.support.exporter_proc import ExporterProcess, select, value

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "faults"
INTERVAL = 2.0
STALL_AFTER = 20.0
QUIET_TOPICS = 4
QUIET_PARTITIONS = 6
QUIET_RECORDS = 10  # per partition, all committed
FAILED_STAGES = ("metadata", "worker_crash", "sample_exception", "cycle")  # a failed cycle's stages


def commit_quiet_groups(bootstrap: str, groups: dict[str, str]) -> None:
    """Child process: each group commits the end of its quiet topic without joining it."""
    from tests.conftest import commit_offsets

    for group, topic in groups.items():
        commit_offsets(bootstrap, group, topic, dict.fromkeys(range(QUIET_PARTITIONS), QUIET_RECORDS))


class Recorder(threading.Thread):
    """Scrapes the exporter: per scrape, its cycle count, ``lagwatch_up``, the worker's pid,
    each group's status and the stalled group's ``stalled_seconds``."""

    def __init__(self, exp: ExporterProcess, stalled_group: str) -> None:
        super().__init__(daemon=True)
        self.exp, self.stalled_group = exp, stalled_group
        self.scrapes: list[dict[str, Any]] = []
        self.missed = 0
        self.stop_flag = threading.Event()
        self.expected: dict[str, str] = {}  # set once the fleet shows its statuses
        self.reasons: dict[str, tuple[str, list[str]]] = {}  # group -> (status, reasons) off it

    def run(self) -> None:
        while not self.stop_flag.wait(0.5):
            try:
                m = self.exp.metrics()
            except Exception:  # noqa: BLE001 - counted: an unanswered scrape
                self.missed += 1
                continue
            try:  # statuses with their reasons, from the same record
                docs = {d["group"]: d for d in _group_docs(self.exp.api(f"clusters/{CLUSTER}/groups"))}
            except Exception:  # noqa: BLE001 - counted: an unanswered scrape
                self.missed += 1
                continue
            statuses = {g: d["status"] for g, d in docs.items()}
            stalled = select(m, "kafka_consumergroup_stalled_seconds", group=self.stalled_group)
            self.scrapes.append({
                "t": time.time(), "cycles": value(m, "lagwatch_cycles_total", cluster=CLUSTER) or 0,
                "up": value(m, "lagwatch_up", cluster=CLUSTER), "workers": tuple(children(self.exp.proc.pid)),
                "statuses": statuses, "stalled_seconds": max(stalled.values(), default=None),
                "errors": {dict(lab)["stage"]: v for lab, v in
                           select(m, "lagwatch_errors_total", cluster=CLUSTER).items()},
                "duration": value(m, "lagwatch_cycle_duration_seconds", cluster=CLUSTER)})
            off = [g for g, want in self.expected.items() if statuses.get(g, "absent") != want
                   and g not in self.reasons]
            for g in off[:max(0, 6 - len(self.reasons))]:
                d = docs.get(g, {})
                self.reasons[g] = (d.get("status", "absent"), list(d.get("reasons", []))[:3])

    def last(self) -> dict[str, Any]:
        while not self.scrapes:
            time.sleep(0.5)
        return self.scrapes[-1]

    def wait(self, cond: Any, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout  # a hang guard only
        while time.monotonic() < deadline:
            if self.scrapes and cond(self.scrapes[-1]):
                return self.scrapes[-1]
            time.sleep(0.5)
        raise TimeoutError(f"{what}: not within {timeout:.0f} s; last scrape {self.scrapes[-1:]}")

    def wait_cycles(self, n: int) -> None:
        start = self.last()["cycles"]
        self.wait(lambda s: s["cycles"] >= start + n, n * INTERVAL * 10 + 60, f"{n} cycles")


def _group_docs(doc: Any) -> list[dict[str, Any]]:
    return doc["groups"] if isinstance(doc, dict) else doc


@dataclass
class Fault:
    what: str
    node: int
    start: float
    end: float = 0.0
    detail: str = ""


def exporter_config(workdir: Path, bootstrap: str) -> str:
    cfg = {"interval": INTERVAL, "request_timeout": 5,
           "thresholds": {"stall_after": STALL_AFTER, "livelock_after": STALL_AFTER, "lag_seconds": 3600,
                          "window": 600, "report_stale_after": 60, "report_expiry": 900},
           "clusters": [{"name": CLUSTER, "bootstrap_servers": bootstrap}]}
    path = workdir / "lagwatch.yml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def consumer(name: str, bootstrap: str, group: str, topic: str, log_dir: Path, *extra: str) -> Proc:
    return Proc(name, [sys.executable, "-m", "devenv.fleet_consumer", "--bootstrap", bootstrap,
                       "--group", group, "--topic", topic, "--commit", "record", *extra], log_dir)


def restart_fault(cluster: KafkaCluster, coords: dict[str, int], avoid: int) -> Fault:
    """A controlled restart of the broker coordinating the most groups, the stalled one's aside."""
    load = Counter(coords.values())
    node = max((b.node_id for b in cluster.brokers if b.node_id != avoid), key=lambda n: load.get(n, 0))
    b = next(x for x in cluster.brokers if x.node_id == node)
    f = Fault("broker restart (SIGTERM, controlled shutdown)", node, time.time(),
              detail=f"coordinated {load.get(node, 0)} of the 200 groups")
    cluster.restart_broker(b)
    f.end = time.time()
    return f


def kill_fault(cluster: KafkaCluster, node: int, groups: list[str], coords: dict[str, int]) -> Fault:
    """SIGKILL of ``node``; restarted 15 s after its groups have moved (at most 90 s)."""
    mine = [g for g, n in coords.items() if n == node]
    b = next(x for x in cluster.brokers if x.node_id == node)
    f = Fault("coordinator SIGKILL", node, time.time(), detail=f"coordinated {len(mine)} of the 200 groups")
    cluster.stop_broker(b, kill=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        time.sleep(2)
        now = _coordinators(cluster, mine)
        if len(now) == len(mine) and node not in now.values():
            f.detail += f"; they moved in {time.time() - f.start:.0f} s"
            break
    time.sleep(15)
    cluster.restart_broker(b)
    f.end = time.time()
    return f


def _coordinators(cluster: KafkaCluster, groups: list[str]) -> dict[str, int]:
    try:
        return in_child(coordinators, cluster.bootstrap_servers, groups, timeout=90)
    except Exception:  # noqa: BLE001 - the child died or timed out: nothing known this time
        return {}


@dataclass
class Run:
    faults: list[Fault]
    rec: Recorder
    healthy: list[str]
    stalled: str
    fault_start: float  # the first fault's start
    fault_end: float  # the last fault's end
    stalled_before: tuple[float, float]  # (time, stalled_seconds) of the last scrape before
    crashes_in_log: int = 0
    notes: list[str] = field(default_factory=list)


def run(workdir: Path, log: Any) -> Run:
    prefix = f"bf{os.urandom(2).hex()}"
    cluster = KafkaCluster(brokers_count=3)
    procs: list[Proc] = []
    producer = exp = rec = None
    try:
        log("starting 3 Kafka brokers")
        cluster.start()
        quiet = [TopicSpec(f"{prefix}-quiet{i}", partitions=QUIET_PARTITIONS, rate=0,
                           prefill=QUIET_RECORDS * QUIET_PARTITIONS) for i in range(QUIET_TOPICS)]
        live, stall = TopicSpec(f"{prefix}-live", rate=20), TopicSpec(f"{prefix}-stall", rate=5)
        create_topics(cluster, [*quiet, live, stall])
        commit_only = {f"{prefix}-idle{i:03d}": quiet[i % QUIET_TOPICS].name for i in range(196)}
        log("committing 196 commit-only groups")
        in_child(commit_quiet_groups, cluster.bootstrap_servers, commit_only, timeout=600)
        producer = ProducerProcess(cluster, [live, stall], time.time())
        lives = [f"{prefix}-live{i}" for i in range(3)]
        stalled = f"{prefix}-stalled"
        _start_consumers(procs, cluster, workdir, lives, live.name, stalled, stall.name)
        exp = ExporterProcess(None, config=exporter_config(workdir, cluster.bootstrap_servers))
        exp.wait_ready(120)
        rec = Recorder(exp, stalled)
        rec.start()
        healthy = [*commit_only, *lives]
        log("waiting for 200 groups: 199 ok, 1 stalled")
        rec.wait(lambda s: s["statuses"].get(stalled) == "stalled"
                 and all(s["statuses"].get(g) == "ok" for g in healthy), 300, "the fleet's statuses")
        rec.expected = {**dict.fromkeys(healthy, "ok"), stalled: "stalled"}
        rec.wait_cycles(5)
        before = rec.last()
        coords = _coordinators(cluster, [*lives, stalled]) | _coordinators(cluster, list(commit_only))
        faults = _faults(cluster, rec, coords, stalled, log)
        r = Run(faults, rec, healthy, stalled, faults[0].start, faults[-1].end,
                (before["t"], before["stalled_seconds"] or 0.0))
        out = exp.output()
        r.crashes_in_log = out.count("Kafka worker process died") + out.count("Kafka worker did not answer")
        for p in procs:
            if not p.alive():
                r.notes.append(f"consumer {p.name} died: {p.log_path.read_text()[-500:]}")
        return r
    finally:
        if rec is not None:
            rec.stop_flag.set()
        for p in procs:
            with contextlib.suppress(Exception):
                p.terminate()
        if producer is not None:
            producer.stop()
        if exp is not None:
            exp.stop()
        cluster.stop()


def _start_consumers(procs: list[Proc], cluster: KafkaCluster, workdir: Path, lives: list[str],
                     live_topic: str, stalled: str, stall_topic: str) -> None:
    """The live groups' consumers and the one that stalls, each caught up, into ``procs``
    (so that the run stops them whatever happens); then the last one stops committing."""
    for i, g in enumerate(lives):
        procs.append(consumer(g, cluster.bootstrap_servers, g, live_topic, workdir,
                              *(["--protocol", "consumer"] if i == 2 else [])))
    procs.append(consumer(stalled, cluster.bootstrap_servers, stalled, stall_topic, workdir,
                          "--behaviour", "nocommit"))
    for p in procs:
        if p.wait_event("CAUGHT_UP", 120) is None:
            raise RuntimeError(f"{p.name} never caught up: {p.log_path.read_text()[-2000:]}")
    procs[-1].signal(signal.SIGUSR1)  # from now on it polls and never commits


def _faults(cluster: KafkaCluster, rec: Recorder, coords: dict[str, int], stalled: str, log: Any
            ) -> list[Fault]:
    """A broker restart, then SIGKILL of the stalled group's coordinator, each followed by
    cycles to recover in."""
    victim = coords.get(stalled)
    if victim is None:
        raise RuntimeError("the stalled group's coordinator is unknown")
    log("FAULT: broker restart")
    faults = [restart_fault(cluster, coords, avoid=victim)]
    log(f"  broker {faults[-1].node} back after {faults[-1].end - faults[-1].start:.0f} s")
    rec.wait_cycles(5)
    log(f"FAULT: SIGKILL of broker {victim}, the stalled group's coordinator")
    faults.append(kill_fault(cluster, victim, list(coords), coords))
    log(f"  broker {victim} back after {faults[-1].end - faults[-1].start:.0f} s ({faults[-1].detail})")
    rec.wait_cycles(15)
    return faults


def analyse(r: Run) -> tuple[list[str], list[str]]:
    """The figures (Markdown lines) and the failed checks."""
    s = r.rec.scrapes
    during = [x for x in s if x["t"] >= r.fault_start]
    first, last = s[0], s[-1]
    down = [x for x in s if x["up"] != 1]
    failed = {st: last["errors"].get(st, 0) - first["errors"].get(st, 0) for st in FAILED_STAGES}
    errors = {st: last["errors"].get(st, 0) - first["errors"].get(st, 0) for st in last["errors"]}
    workers = {w for x in s for w in x["workers"]}
    left: dict[str, Counter[str]] = {}
    for x in during:
        for g in r.healthy:
            st = x["statuses"].get(g, "absent")
            if st != "ok":
                left.setdefault(g, Counter())[st] += 1
    stalled = Counter(x["statuses"].get(r.stalled, "absent") for x in during)
    t0, s0 = r.stalled_before
    secs = [(x["t"], x["stalled_seconds"]) for x in s if x["t"] >= t0]
    restarts = [(round(t - r.fault_start), v) for (_, a), (t, v) in zip(secs, secs[1:], strict=False)
                if a is not None and (v is None or v < a)]
    end_t, end_v = secs[-1]
    drift = (end_v or 0.0) - (s0 + end_t - t0)
    durations = [x["duration"] for x in during if x["duration"] is not None]
    cyc = [x["cycles"] for x in during]
    figures = [
        f"| cycles from the first fault to the end | {cyc[-1] - cyc[0]:.0f} |",
        f"| scrapes / unanswered / longest gap between two | {len(s)} / {r.rec.missed} / "
        f"{max(b['t'] - a['t'] for a, b in zip(s, s[1:], strict=False)):.1f} s |",
        f"| scrapes with `lagwatch_up` != 1 | {len(down)} |",
        f"| failed cycles by error stage ({', '.join(FAILED_STAGES)}) | "
        f"{', '.join(f'{k} {v:.0f}' for k, v in failed.items())} |",
        f"| errors counted during the run, by stage | "
        f"{', '.join(f'{k} {v:.0f}' for k, v in sorted(errors.items()) if v) or 'none'} |",
        f"| Kafka worker processes seen / crashes in the log | {len(workers)} / {r.crashes_in_log} |",
        f"| healthy groups (of {len(r.healthy)}) that left `ok` | {len(left)} "
        f"{'; '.join(f'{g}: {dict(c)}' for g, c in sorted(left.items())[:5])} |",
        f"| stalled group's status in scrapes after the first fault | {dict(stalled)} |",
        f"| `stalled_seconds` before the faults → at the end (wall clock between) | "
        f"{s0:.0f} → {end_v or 0:.0f} ({end_t - t0:.0f} s) |",
        f"| `stalled_seconds` minus (before + wall clock) at the end / restarts of it | "
        f"{drift:+.1f} s / {len(restarts)} |",
        f"| cycle duration during the faults, median / max | "
        f"{sorted(durations)[len(durations) // 2]:.2f} / {max(durations):.2f} s |",
    ]
    checks = []
    if down or any(failed.values()):
        checks.append(f"a cycle failed: {len(down)} scrapes with lagwatch_up != 1, {failed}")
    if len(workers) != 1 or r.crashes_in_log:
        checks.append(f"the Kafka worker was replaced: pids {sorted(workers)}, {r.crashes_in_log} crashes")
    if left:
        checks.append(f"{len(left)} healthy groups left ok: {sorted(left)[:5]}")
    if set(stalled) != {"stalled"}:
        checks.append(f"the stalled group was not stalled throughout: {dict(stalled)}")
    if restarts or abs(drift) > 3 * INTERVAL:
        checks.append(f"stalled_seconds restarted or drifted: {restarts[:3]}, drift {drift:+.1f} s")
    figures += [f"| reasons of `{g}` when `{st}` | {'; '.join(rs)} |"
                for g, (st, rs) in r.rec.reasons.items()]
    return figures, checks + r.notes


def report(r: Run, figures: list[str], checks: list[str], started: float, load: tuple[str, str]) -> str:
    from devenv.jars import DEFAULT_KAFKA_VERSION

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    faults = [f"- {f.what}: broker {f.node}, {f.detail}; back after {f.end - f.start:.0f} s, "
              f"{f.start - r.fault_start:.0f} s after the first fault began" for f in r.faults]
    return "\n".join([
        "# Broker faults under 200 groups (issue 25)", "",
        "`python -m bench.broker_faults`: 3 KRaft brokers (replication factor 3), the exporter at a "
        f"{INTERVAL:g} s interval (request timeout 5 s, `stall_after` {STALL_AFTER:g} s), 196 "
        "commit-only groups caught up, 3 live groups (two classic, one KIP-848) and one stalled "
        "group (a member polling without committing while records arrive); a broker restart, then "
        "SIGKILL of the stalled group's coordinator. A recorder scraped `/metrics` continuously "
        f"(at most every 0.5 s). The exporter keeps an unreadable group's last judgement for "
        f"{UNREADABLE_GRACE_CYCLES} cycles and at least {UNREADABLE_GRACE_SECONDS:g} s "
        f"({max(UNREADABLE_GRACE_CYCLES * INTERVAL, UNREADABLE_GRACE_SECONDS):g} s here), then "
        "shows it `error`.", "",
        f"- Machine: {os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}; the "
        f"brokers, consumers and exporter on it, shared with other engineers' test runs (load "
        f"average {load[0]} at the start, {load[1]} at the end).",
        f"- Kafka {DEFAULT_KAFKA_VERSION}; commit {commit}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}.", "",
        *faults, "", "| | observed |", "|---|---|", *figures, "",
        "## Checks", "", *(f"- FAILED: {c}" for c in checks), *([] if checks else ["- all passed"]), ""])


def main(argv: list[str] | None = None) -> int:
    global INTERVAL, STALL_AFTER  # noqa: PLW0603 - read by the recorder, the config and the report
    ap = argparse.ArgumentParser(prog="python -m bench.broker_faults", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="write the Markdown report here")
    ap.add_argument("--interval", type=float, default=INTERVAL, help="exporter sampling interval, seconds")
    ap.add_argument("--stall-after", type=float, default=STALL_AFTER, help="thresholds.stall_after, seconds")
    opts = ap.parse_args(argv)
    INTERVAL, STALL_AFTER = opts.interval, opts.stall_after
    started = time.time()
    load0 = f"{os.getloadavg()[0]:.1f}"

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    with tempfile.TemporaryDirectory(prefix="lagwatch-faults-") as tmp:
        r = run(Path(tmp), log)
    figures, checks = analyse(r)
    text = report(r, figures, checks, started, (load0, f"{os.getloadavg()[0]:.1f}"))
    print(text)
    if opts.out:
        Path(opts.out).write_text(text)
    return 1 if checks else 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: G groups with committed offsets on P partitions, one local broker.

    .venv/bin/python -m bench.bench_core                 # the default sizes
    .venv/bin/python -m bench.bench_core --sizes 100x10
    .venv/bin/python -m bench.bench_core --sizes 2000x50 --brokers 3
    .venv/bin/python -m bench.bench_core --sizes 10000x50 --metrics-detail bounded --not-ok 0.01
    .venv/bin/python -m bench.bench_core --sizes 2000x50 --live \
        --kminion /path/to/kminion --kafka-exporter /path/to/kafka_exporter

Prints one table, a row per size: the whole cycle (median and max of
lagwatch_cycle_duration_seconds), its Kafka part (sampling), the rest (record timestamps,
evaluation and rendering, in the main process), Kafka requests per cycle
(lagwatch_kafka_requests_total: every sampling request sent) and per broker, the time a
scrape of /metrics takes (the slowest; gzip-encoded, as Prometheus asks for it), its size
(text, and gzipped), and the peak RSS of the process tree
(the main process and its Kafka worker, each's VmHWM), with the load average before and
after. Under each row: how many groups had each status at the last cycle. ``--not-ok F``
commits a fraction F of the groups behind the high watermark and the others at it (caught
up); by default every group is behind.

``--live`` keeps the fleet in use during the run (bench/live.py): every partition written
and every group committing a few records behind the HW every ``--live-every`` seconds, so
every value changes every cycle; it prints how often the groups committed while measured
and the writer's CPU a round (``--live-writer``: requests built once a round, bench/commits.py,
by default; ``admin``, confluent_kafka's Admin client, several times the CPU).
``--kminion`` and ``--kafka-exporter`` take the paths of binaries built from the peers'
sources: after lagwatch stops, each runs alone on the same broker and fleet and is scraped
``--peer-scrapes`` times (bench/peers.py). ``--pin`` runs the measured tool on CPU 0 and
the broker and the live fleet on CPU 1 (`sched_setaffinity`), as when they run on other
machines: on a 2-core machine they otherwise take most of the cores under ``--live``.
A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import wait
from pathlib import Path

import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.live import WRITERS, LiveFleet
from bench.peers import measure_peer, scrape, stop
from devenv.kafka import KafkaCluster, die_with_parent, free_port
from devenv.procs import children, memory_mb
from exporter.expose.metrics import CycleStage
from tests.support.exporter_proc import Samples, parse_metrics, value

ROOT = Path(__file__).resolve().parent.parent
SETUP_HW = 100  # records setup writes to each partition
SELF_LINES = re.compile(rb"^(?:# (?:HELP|TYPE) )?lagwatch_.*$", re.M)
STATUS_LINE = re.compile(rb'^kafka_consumergroup_status\{[^}]*status="(\w+)"\} 1(?:\.0)?$', re.M)


def setup(cluster: KafkaCluster, groups: int, partitions: int, tag: str, not_ok: float) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = f"bench-{tag}"
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20})
    for part in range(partitions):
        for i in range(SETUP_HW):
            p.produce(topic, value=b"x", partition=part)
            if i % 50 == 0:
                p.poll(0)
    p.flush(60)
    todo = [f"bench-{tag}-g{g:05d}" for g in range(groups)]
    for _attempt in range(30):
        # A fresh broker answers commits COORDINATOR_LOAD_IN_PROGRESS while it loads
        # __consumer_offsets, per partition in the result (no exception): retry those groups.
        todo = commit(admin, todo, topic, partitions, lambda g: at_of(g, not_ok))
        if not todo:
            return
        time.sleep(1)
    raise RuntimeError(f"{len(todo)} groups could not commit their offsets")


def at_of(g: int, not_ok: float) -> int:
    """Where setup commits group ``g``: a fraction ``not_ok`` of the groups behind the high
    watermark (50-99), the others at it (100)."""
    every = round(1 / not_ok) if not_ok > 0 else 0
    return 50 + (g % 50) if every and g % every == 0 else 100


def commit(admin: AdminClient, gids: list[str], topic: str, partitions: int,
           at: Callable[[int], int]) -> list[str]:
    """Commit each group's offsets, every partition at ``at(group number)``, 200 groups in
    flight at a time; the groups that failed."""
    failed = []
    for i in range(0, len(gids), 200):
        futs = {}
        for gid in gids[i:i + 200]:
            offsets = [TopicPartition(topic, part, at(int(gid.rsplit("-g", 1)[1])))
                       for part in range(partitions)]
            futs[gid] = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(gid, offsets)])[gid]
        wait(list(futs.values()), 120)
        for gid, f in futs.items():
            try:
                if any(tp.error is not None for tp in f.result().topic_partitions):
                    failed.append(gid)
            except Exception:  # noqa: BLE001 - retried
                failed.append(gid)
    return failed


# lagwatch_cycle_stage_seconds' stages, in order.
STAGES = tuple(stage.value for stage in CycleStage)


def _self_metrics(body: bytes) -> Samples:
    """lagwatch's own series of a scrape: its ``lagwatch_*`` lines alone are parsed (the
    whole of a 50 MB /metrics would cost the benchmark seconds of the CPU it measures)."""
    return parse_metrics(b"\n".join(SELF_LINES.findall(body)).decode() + "\n")


def statuses(body: bytes) -> Counter[str]:
    """How many groups have each status in a scrape of lagwatch."""
    return Counter(m.decode() for m in STATUS_LINE.findall(body))


def _exporter(cluster: KafkaCluster, tag: str, detail: str, port: int, tmp: str,
              group_partitions: int, preexec: Callable[[], None]) -> subprocess.Popen:
    """lagwatch on the groups of ``tag``, its cardinality cap above the fleet's size (the
    default, 500,000, would drop groups past it from what is served)."""
    cfg = Path(tmp) / "bench.yml"
    cfg.write_text(yaml.safe_dump({
        "interval": 15, "request_timeout": 30, "listen": f"127.0.0.1:{port}",
        "max_group_partitions": max(500_000, group_partitions),
        "metrics_detail": detail,
        "clusters": [{"name": "bench", "bootstrap_servers": cluster.bootstrap_servers,
                      "groups": {"allow": f"^bench-{tag}-"}, "reports": {"enabled": False}}]}))
    return subprocess.Popen([sys.executable, "-m", "exporter", "--config", str(cfg)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=preexec)


def _cluster_doc(base: str) -> dict | None:
    """The cluster's JSON document (a few hundred bytes): what tells a new cycle cheaply."""
    try:
        with urllib.request.urlopen(f"{base}/api/v1/clusters/bench", timeout=60) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def _watch(proc: subprocess.Popen, base: str, cycles: int, deadline: float) -> dict[str, list]:
    """Poll the cluster's JSON document every 0.5 s until ``cycles`` cycles are seen; per new
    cycle, two scrapes of /metrics (the first builds the families, the second is cached),
    its self-metrics from the first, and the time the cycle was seen. /metrics is scraped
    once per cycle as Prometheus would at ``scrape_interval`` = ``interval``, not at every
    poll: a full exposition every 0.5 s would take CPU from the cycles measured."""
    seen: dict[str, list] = {"cycle": [], "sample": [], "reqs": [], "render": [], "sizes": [],
                             "gzip_sizes": [], "at": [], "statuses": [], "stages": [], "at_rest": []}
    seen_cycles, last_at = 0, None
    while len(seen["cycle"]) < cycles and time.monotonic() < deadline:
        doc = _cluster_doc(base)
        if doc is None or not doc.get("up") or doc.get("sampled_at") in (None, last_at):
            time.sleep(0.5)
            continue
        last_at = doc["sampled_at"]
        s = time.monotonic()
        took, wire, body = scrape(f"{base}/metrics", 60)
        m = _self_metrics(body)
        n = value(m, "lagwatch_cycles_total", cluster="bench") or 0
        if n > seen_cycles and (value(m, "lagwatch_up", cluster="bench") or 0) == 1:
            seen_cycles = int(n)
            seen["at"].append(s)
            seen["cycle"].append(value(m, "lagwatch_cycle_duration_seconds") or 0)
            if n == 1:  # the first cycle after the start: every partition new to the memory
                seen["first"] = [seen["cycle"][-1]]
            seen["stages"].append({st: value(m, "lagwatch_cycle_stage_seconds", stage=st) or 0.0
                                   for st in STAGES})
            seen["sample"].append(value(m, "lagwatch_sample_duration_seconds") or 0)
            seen["reqs"].append((n, value(m, "lagwatch_kafka_requests_total") or 0))
            seen["render"].append(took)
            seen["sizes"].append(len(body))
            seen["gzip_sizes"].append(wire)
            seen["statuses"].append(statuses(body))
            seen["at_rest"].append(int(value(m, "lagwatch_groups_at_rest", cluster="bench") or 0))
            seen["render"].append(scrape(f"{base}/metrics", 60)[0])
        time.sleep(0.5)
    return seen


def measure(cluster: KafkaCluster, tag: str, groups: int, partitions: int, cycles: int,
            detail: str = "full", preexec: Callable[[], None] = die_with_parent) -> dict:
    """Run lagwatch on the groups of ``tag`` until ``cycles`` cycles are seen; its figures."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = _exporter(cluster, tag, detail, port, tmp, groups * partitions, preexec)
        try:
            deadline = time.monotonic() + 120 + cycles * (40 + groups * partitions / 2000)
            w = _watch(proc, f"http://127.0.0.1:{port}", cycles, deadline)
            rss = memory_mb(proc.pid, "VmHWM")
            worker_rss = sum(memory_mb(k, "VmHWM") for k in children(proc.pid))
        finally:
            stop(proc)
    reqs = w["reqs"]
    per_cycle = ((reqs[-1][1] - reqs[1][1]) / (reqs[-1][0] - reqs[1][0])
                 if len(reqs) >= 3 and reqs[-1][0] > reqs[1][0] else float("nan"))
    cyc, smp = w["cycle"][1:] or w["cycle"], w["sample"][1:] or w["sample"]
    rest = [c - s for c, s in zip(cyc, smp, strict=True)]
    return {"cycle_s": statistics.median(cyc), "cycle_max_s": max(cyc),
            "sample_s": statistics.median(smp), "main_s": statistics.median(rest),
            "requests_per_cycle": per_cycle, "render_s": max(w["render"]),
            "metrics_mb": max(w["sizes"]) / 1e6, "gzip_mb": max(w["gzip_sizes"]) / 1e6,
            "peak_rss_mb": rss, "worker_rss_mb": worker_rss,
            "window": (w["at"][0], w["at"][-1]), "statuses": w["statuses"][-1], "at_rest": w["at_rest"],
            "cycles": w["cycle"], "evaluations": [c["evaluation"] for c in w["stages"]],
            "first_s": w["first"][0] if w.get("first") else None,
            "stages": {st: statistics.median(c[st] for c in w["stages"][1:] or w["stages"]) for st in STAGES}}


HEADER = (f"{'groups':>6} {'parts':>5} {'group-parts':>11} {'cycle s':>8} {'max s':>6} {'kafka s':>8} "
          f"{'eval+render s':>13} {'req/cycle':>9} {'per broker':>10} {'scrape s':>8} "
          f"{'/metrics MB (gzip)':>18} "
          f"{'peak RSS MB main+worker':>23}")


def row(g: int, p: int, r: dict, brokers: int) -> str:
    return (f"{g:>6} {p:>5} {g * p:>11} {r['cycle_s']:>8.2f} {r['cycle_max_s']:>6.2f} "
            f"{r['sample_s']:>8.2f} {r['main_s']:>13.2f} {r['requests_per_cycle']:>9.0f} "
            f"{r['requests_per_cycle'] / brokers:>10.1f} {r['render_s']:>8.2f} "
            f"{r['metrics_mb']:>11.1f} ({r['gzip_mb']:>4.1f}) "
            f"{r['peak_rss_mb']:>11.0f} + {r['worker_rss_mb']:.0f} "
            f"= {r['peak_rss_mb'] + r['worker_rss_mb']:.0f}")


# --pin: the measured tool (lagwatch's two processes, or a peer) on CPU 0, the broker and
# this process (the live fleet's writer) on CPU 1: as when the brokers and the consumers
# run on other machines, which on one 2-core machine otherwise take most of the cores.
TOOL_CPUS, FLEET_CPUS = {0}, {1}


def _preexec(pin: bool) -> Callable[[], None]:
    """What a measured tool's process runs before it starts: pinned with ``--pin`` (its
    children inherit it), and dying with this process."""
    if not pin:
        return die_with_parent

    def pinned() -> None:
        os.sched_setaffinity(0, TOOL_CPUS)
        die_with_parent()
    return pinned


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` on ``cpus``; threads started later inherit their creator's."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


def load() -> str:
    return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_size(cluster: KafkaCluster, args: argparse.Namespace, g: int, p: int) -> None:
    """One size: set the fleet up, measure lagwatch, then each peer given, one after the other;
    with ``--live`` the fleet is written and committed from before lagwatch starts until the
    last peer stops."""
    not_ok = 0.0 if args.live else args.not_ok
    tag = f"{g}x{p}" + ("-live" if args.live else f"-{not_ok:g}" if not_ok < 1 else "")
    setup(cluster, g, p, tag, not_ok)
    fleet = None
    if args.live:
        gids = [f"bench-{tag}-g{i:05d}" for i in range(g)]
        fleet = LiveFleet(cluster.bootstrap_servers, f"bench-{tag}", gids, p, SETUP_HW, commit,
                          every=args.live_every, writer=args.live_writer).start()
    try:
        before = load()
        r = measure(cluster, tag, g, p, args.cycles, args.metrics_detail, _preexec(args.pin))
        print(row(g, p, r, args.brokers), f"  [{before}; after: {load()}]", flush=True)
        first = "not seen" if r["first_s"] is None else f"{r['first_s']:.2f} s"
        print(f"  lagwatch statuses at the last cycle: {dict(r['statuses'])}; first cycle {first}",
              flush=True)
        print("  lagwatch cycle stages (median s): "
              + ", ".join(f"{st} {v:.2f}" for st, v in r["stages"].items())
              + f"; groups at rest, each cycle: {r['at_rest']}", flush=True)
        print("  each cycle, whole / evaluation s: " + ", ".join(
            f"{c:.2f} / {e:.2f}" for c, e in zip(r["cycles"], r["evaluations"], strict=True)), flush=True)
        if fleet:
            print(f"  {fleet.summary(*r['window'])}", flush=True)
        for name, binary in (("kminion", args.kminion), ("kafka_exporter", args.kafka_exporter)):
            if binary:
                peer_row(cluster, name, binary, tag, args.peer_scrapes, fleet, _preexec(args.pin))
    finally:
        if fleet:
            fleet.stop()


def peer_row(cluster: KafkaCluster, name: str, binary: str, tag: str, scrapes: int,
             fleet: LiveFleet | None, preexec: Callable[[], None]) -> None:
    before, t0 = load(), time.monotonic()
    try:
        r = measure_peer(name, binary, cluster.bootstrap_servers, f"bench-{tag}", f"bench-{tag}-", scrapes,
                         preexec)
    except RuntimeError as e:
        print(f"  {name}: failed: {e}", flush=True)
        return
    print(f"  {name:<14} scrape {r['scrape_s']:.2f} s median, {r['scrape_max_s']:.2f} s max "
          f"({r['scrapes']} scrapes after a warm-up), peak RSS {r['peak_rss_mb']:.0f} MB, "
          f"/metrics {r['metrics_mb']:.1f} MB, {r['lag_series']} group-partition lag series "
          f"[{before}; after: {load()}]", flush=True)
    if fleet:
        print(f"    {fleet.summary(t0, time.monotonic())}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100x10,1000x20,2000x50,10000x50")
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--metrics-detail", default="full", choices=("full", "bounded"))
    ap.add_argument("--not-ok", type=float, default=1.0, help="fraction of the groups behind")
    ap.add_argument("--live", action="store_true",
                    help="keep every partition written and every group committing during the run")
    ap.add_argument("--live-every", type=float, default=2.0, help="seconds between live rounds")
    ap.add_argument("--live-writer", default="raw", choices=WRITERS,
                    help="the live fleet's commits: requests built once a round, or the Admin client")
    ap.add_argument("--kminion", help="path of a KMinion binary: measured after lagwatch")
    ap.add_argument("--kafka-exporter", help="path of a kafka_exporter binary: measured after lagwatch")
    ap.add_argument("--peer-scrapes", type=int, default=3)
    ap.add_argument("--pin", action="store_true",
                    help="the measured tool on CPU 0, the broker and the live fleet on CPU 1")
    args = ap.parse_args()
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    print(HEADER, flush=True)
    with KafkaCluster(brokers_count=args.brokers, heap="2g" if args.brokers == 1 else "1g") as cluster:
        if args.pin:
            for b in cluster.brokers:
                assert b.proc is not None
                pin_threads(b.proc.pid, FLEET_CPUS)
            pin_threads(os.getpid(), FLEET_CPUS)
            print(f"pinned: the measured tool on CPUs {sorted(TOOL_CPUS)}, the broker and the "
                  f"fleet on {sorted(FLEET_CPUS)}", flush=True)
        for g, p in sizes:
            run_size(cluster, args, g, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())

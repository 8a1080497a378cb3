"""Benchmark: G groups with committed offsets on P partitions, one local broker.

    .venv/bin/python -m bench.bench_core                 # the default sizes
    .venv/bin/python -m bench.bench_core --sizes 100x10
    .venv/bin/python -m bench.bench_core --sizes 2000x50 --brokers 3
    .venv/bin/python -m bench.bench_core --sizes 10000x50 --metrics-detail bounded --not-ok 0.01

Prints one table, a row per size: the whole cycle (median and max of
lagwatch_cycle_duration_seconds), its Kafka part (sampling), the rest (record timestamps,
evaluation and rendering, in the main process), Kafka requests per cycle
(lagwatch_kafka_requests_total: every sampling request sent) and per broker, the time a
scrape of /metrics takes (the slowest), its size, and the peak RSS of the process tree
(the main process and its Kafka worker, each's VmHWM). ``--not-ok F`` commits a
fraction F of the groups behind the high watermark and the others at it (caught up);
by default every group is behind. A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import wait
from pathlib import Path

import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from devenv.kafka import KafkaCluster, die_with_parent, free_port
from devenv.procs import children, memory_mb
from tests.exporter_proc import parse_metrics, value

ROOT = Path(__file__).resolve().parent.parent


def setup(cluster: KafkaCluster, groups: int, partitions: int, tag: str, not_ok: float) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = f"bench-{tag}"
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20})
    for part in range(partitions):
        for i in range(100):
            p.produce(topic, value=b"x", partition=part)
            if i % 50 == 0:
                p.poll(0)
    p.flush(60)
    todo = [f"bench-{tag}-g{g:05d}" for g in range(groups)]
    for _attempt in range(30):
        # A fresh broker answers commits COORDINATOR_LOAD_IN_PROGRESS while it loads
        # __consumer_offsets, per partition in the result (no exception): retry those groups.
        todo = _commit(admin, todo, topic, partitions, not_ok)
        if not todo:
            return
        time.sleep(1)
    raise RuntimeError(f"{len(todo)} groups could not commit their offsets")


def _commit(admin: AdminClient, gids: list[str], topic: str, partitions: int, not_ok: float) -> list[str]:
    """Commit each group's offsets (a fraction ``not_ok`` of the groups behind, the
    others at the high watermark, 100); the groups that failed."""
    every = round(1 / not_ok) if not_ok > 0 else 0
    failed = []
    for i in range(0, len(gids), 200):
        futs = {}
        for gid in gids[i:i + 200]:
            g = int(gid.rsplit("-g", 1)[1])
            at = 50 + (g % 50) if every and g % every == 0 else 100
            offsets = [TopicPartition(topic, part, at) for part in range(partitions)]
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


def measure(cluster: KafkaCluster, groups: int, partitions: int, cycles: int, detail: str = "full",
            not_ok: float = 1.0) -> dict[str, float]:
    tag = f"{groups}x{partitions}" + (f"-{not_ok:g}" if not_ok < 1 else "")
    t0 = time.monotonic()
    setup(cluster, groups, partitions, tag, not_ok)
    setup_s = time.monotonic() - t0
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "bench.yml"
        cfg.write_text(yaml.safe_dump({
            "interval": 15, "request_timeout": 30, "listen": f"127.0.0.1:{port}",
            "metrics_detail": detail,
            "clusters": [{"name": "bench", "bootstrap_servers": cluster.bootstrap_servers,
                          "groups": {"allow": f"^bench-{tag}-"}, "reports": {"enabled": False}}]}))
        proc = subprocess.Popen([sys.executable, "-m", "exporter", "--config", str(cfg)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=die_with_parent)
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            cycle_times, sample_times, render, sizes = [], [], [], []
            reqs: list[tuple[float, float]] = []
            seen_cycles = 0
            deadline = time.monotonic() + 120 + cycles * (40 + groups * partitions / 2000)
            while len(cycle_times) < cycles and time.monotonic() < deadline:
                try:
                    s = time.monotonic()
                    body = urllib.request.urlopen(url, timeout=60).read()
                    took = time.monotonic() - s
                except OSError:
                    time.sleep(0.5)
                    continue
                m = parse_metrics(body.decode())
                n = value(m, "lagwatch_cycles_total", cluster="bench") or 0
                if n > seen_cycles and (value(m, "lagwatch_up", cluster="bench") or 0) == 1:
                    seen_cycles = int(n)
                    cycle_times.append(value(m, "lagwatch_cycle_duration_seconds") or 0)
                    sample_times.append(value(m, "lagwatch_sample_duration_seconds") or 0)
                    reqs.append((n, value(m, "lagwatch_kafka_requests_total") or 0))
                    render.append(took)  # first scrape of a new view: families are built here
                    sizes.append(len(body))
                    # a second scrape of the same view shows the cached cost
                    s = time.monotonic()
                    urllib.request.urlopen(url, timeout=60).read()
                    render.append(time.monotonic() - s)
                time.sleep(0.5)
            rss = memory_mb(proc.pid, "VmHWM")
            worker_rss = sum(memory_mb(k, "VmHWM") for k in children(proc.pid))
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:  # a busy machine: the figures are taken already
                proc.kill()
                proc.wait(30)
    per_cycle = ((reqs[-1][1] - reqs[1][1]) / (reqs[-1][0] - reqs[1][0])
                 if len(reqs) >= 3 and reqs[-1][0] > reqs[1][0] else float("nan"))
    rest = [c - s for c, s in zip(cycle_times, sample_times, strict=True)]
    return {"groups": groups, "partitions": partitions, "setup_s": setup_s,
            "cycle_s": statistics.median(cycle_times[1:] or cycle_times),
            "cycle_max_s": max(cycle_times[1:] or cycle_times),
            "sample_s": statistics.median(sample_times[1:] or sample_times),
            "main_s": statistics.median(rest[1:] or rest),
            "requests_per_cycle": per_cycle,
            "render_s": max(render), "render_median_s": statistics.median(render),
            "metrics_mb": max(sizes) / 1e6, "peak_rss_mb": rss, "worker_rss_mb": worker_rss}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100x10,1000x20,2000x50,10000x50")
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--metrics-detail", default="full", choices=("full", "bounded"))
    ap.add_argument("--not-ok", type=float, default=1.0, help="fraction of the groups behind")
    args = ap.parse_args()
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    print(f"{'groups':>6} {'parts':>5} {'group-parts':>11} {'cycle s':>8} {'max s':>6} {'kafka s':>8} "
          f"{'eval+render s':>13} {'req/cycle':>9} {'per broker':>10} {'scrape s':>8} {'/metrics MB':>11} "
          f"{'peak RSS MB main+worker':>23}", flush=True)
    with KafkaCluster(brokers_count=args.brokers, heap="2g" if args.brokers == 1 else "1g") as cluster:
        for g, p in sizes:
            r = measure(cluster, g, p, args.cycles, args.metrics_detail, args.not_ok)
            print(f"{g:>6} {p:>5} {g * p:>11} {r['cycle_s']:>8.2f} {r['cycle_max_s']:>6.2f} "
                  f"{r['sample_s']:>8.2f} {r['main_s']:>13.2f} {r['requests_per_cycle']:>9.0f} "
                  f"{r['requests_per_cycle'] / args.brokers:>10.1f} {r['render_s']:>8.2f} "
                  f"{r['metrics_mb']:>11.1f} {r['peak_rss_mb']:>11.0f} + {r['worker_rss_mb']:.0f} "
                  f"= {r['peak_rss_mb'] + r['worker_rss_mb']:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

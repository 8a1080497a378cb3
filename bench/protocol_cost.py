"""Benchmark: what kafka-python (exporter/kafka/broker_requests.py) costs against the hand-written
client it replaced (exporter/leo.py, read from git history at LEO_COMMIT).

    .venv/bin/python -m bench.protocol_cost [--partitions 50,2000] [--rounds 20]

Prints, each in a fresh interpreter: import time and the resident memory it adds,
and per partition count the median and p95 latency of one log end offset request
(ListOffsets, replica_id -2) to a local broker. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from devenv.kafka import KafkaCluster

ROOT = Path(__file__).resolve().parent.parent
LEO_COMMIT = "cad7e0d"  # the last commit with exporter/leo.py

_PROBE = r"""
import json, resource, statistics, sys, time
sys.path[:0] = sys.argv[1].split(":")
which, bootstrap, topics, rounds = sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5])
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20
before = rss()
t = time.perf_counter()
if which == "kafka-python":
    from exporter.kafka.broker_requests import DEBUGGING_REPLICA_ID, BrokerRequests
else:
    from old_leo import LeoReader
imported = time.perf_counter() - t
host, port = bootstrap.split(":")
out = {"import_s": imported, "import_mb": rss() - before}
if which == "kafka-python":
    client = BrokerRequests({}, bootstrap, 10.0, "bench")
    fetch = lambda tps: client.list_offsets({1: tps}, replica_id=DEBUGGING_REPLICA_ID)[0]
else:
    client = LeoReader({}, 10.0)
    fetch = lambda tps: client.fetch(host, int(port), tps)
for name, n in topics:
    tps = [(name, p) for p in range(n)]
    deadline = time.monotonic() + 60
    while len(fetch(tps)) < n:  # a new topic's leaders take a moment
        assert time.monotonic() < deadline, "no log end offsets"
        time.sleep(0.5)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fetch(tps)
        times.append(time.perf_counter() - t)
    times.sort()
    out[str(n)] = (statistics.median(times), times[int(0.95 * (len(times) - 1))])
out["connected_mb"] = rss() - before
print(json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.protocol_cost", description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", default="50,2000")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.partitions.split(",")]
    with tempfile.TemporaryDirectory() as tmp, KafkaCluster() as cluster:
        old = subprocess.run(["git", "show", f"{LEO_COMMIT}:exporter/leo.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        (Path(tmp) / "old_leo.py").write_text(old)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        topics = [(f"cost-{n}", n) for n in sizes]
        for name, n in topics:
            admin.create_topics([NewTopic(name, n, 1)])[name].result(120)
        print(f"{'client':<14} {'import s':>9} {'import MB':>10} {'connected MB':>13}  "
              + "  ".join(f"{n} partitions: median / p95 ms" for n in sizes))
        for which in ("hand-written", "kafka-python"):
            res = subprocess.run(
                [sys.executable, "-c", _PROBE, f"{ROOT}:{tmp}", which, cluster.bootstrap_servers,
                 json.dumps(topics), str(args.rounds)],
                cwd=ROOT, capture_output=True, text=True)
            if res.returncode:
                sys.exit(f"{which}: {res.stderr[-2000:]}")
            r = json.loads(res.stdout.strip().splitlines()[-1])
            lat = "  ".join(f"{r[str(n)][0] * 1000:>14.1f} / {r[str(n)][1] * 1000:.1f}" for n in sizes)
            mem = f"{r['import_mb']:>10.1f} {r['connected_mb']:>13.1f}"
            print(f"{which:<14} {r['import_s']:>9.3f} {mem}  {lat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

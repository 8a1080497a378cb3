"""Sampling requests per cycle of N replicas against one process, on B local brokers.

    .venv/bin/python -m bench.replica_requests --brokers 3 --replicas 3 --groups 200 \
        [--partitions 12] [--offsets-partitions 50] [--shards 0] [--extra-topics 0]

Creates a topic of P partitions and G groups with committed offsets (no members), as
``bench_core`` does (:func:`bench.bench_core.setup`), then runs one process (its state
in a topic of its own, as by default) and N replicas (``state.replicas``) side by side,
all at ``interval: 1``. After a settling spell it reads each one's
``lagwatch_kafka_requests_total`` and ``lagwatch_cycles_total`` twice, ``--seconds``
apart, and prints per process the requests a cycle, the bytes its processes (the main
one and its Kafka worker) received from the brokers a cycle, the CPU seconds they used a
cycle (``utime`` and ``stime`` in ``/proc``), their peak RSS (each one's ``VmHWM``,
added), the groups it serves and the shards it owns. Requests are per broker and
coordinator (docs/design.md, Replicas): what the figures show is how far sharding
divides them, and what the requests carry. The bytes are each TCP connection's
``bytes_received`` (``ss -tinp``, the kernel's tcp_info) to a broker's port: a replica's
include its coordination group's heartbeats and its state topic's traffic. A benchmark,
not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import tempfile
import time
from contextlib import ExitStack

from confluent_kafka.admin import AdminClient, NewTopic

from bench.bench_core import setup
from devenv.kafka import KafkaCluster
from devenv.procs import children, cpu_seconds, memory_mb
from tests.conftest import exporter_config
from tests.support.exporter_proc import ExporterProcess, Samples, select, value

TAG, PARTITIONS = "rq", 12  # the fleet: topic bench-rq, groups bench-rq-g00000 ...


def _read(m: Samples) -> tuple[float, float, int, float | None]:
    """Cycles, requests, groups served and shards owned, as one scrape says them."""
    served = {dict(lab)["group"] for lab in select(m, "kafka_consumergroup_status")}
    return (value(m, "lagwatch_cycles_total", cluster="test") or 0.0,
            value(m, "lagwatch_kafka_requests_total", cluster="test") or 0.0, len(served),
            value(m, "lagwatch_shards_owned", cluster="test"))


def _cpu(pid: int) -> float:
    """CPU seconds (user and system) the process ``pid`` and its children have used."""
    total = 0.0
    for p in (pid, *children(pid)):
        with contextlib.suppress(OSError):  # a child gone meanwhile
            total += cpu_seconds(p)
    return total


def _peak_mb(pid: int) -> float:
    """The peak RSS of the process ``pid`` plus that of each child (each its own peak)."""
    return sum(memory_mb(p, "VmHWM") for p in (pid, *children(pid)))


def _received(pid: int, ports: set[int]) -> int:
    """Bytes the process ``pid`` and its children have received so far on their open TCP
    connections to ``ports`` (each socket's ``bytes_received`` in ``ss -tinp``)."""
    pids = {pid, *children(pid)}
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout
    total, counted = 0, False
    for line in out.splitlines():
        if not line[:1].isspace():  # a socket's line; its tcp_info follows, indented
            fields, owner = line.split(), re.search(r"pid=(\d+)", line)
            counted = (len(fields) > 4 and int(fields[4].rsplit(":", 1)[1]) in ports
                       and owner is not None and int(owner.group(1)) in pids)
        elif counted and (m := re.search(r"bytes_received:(\d+)", line)):
            total += int(m.group(1))
    return total


def _extra_topics(k: KafkaCluster, n: int) -> None:
    if not n:
        return
    admin = AdminClient({"bootstrap.servers": k.bootstrap_servers})
    names = [f"bench-{TAG}-extra-{i:05d}" for i in range(n)]
    for i in range(0, n, 100):
        for fut in admin.create_topics([NewTopic(t, 6, 1) for t in names[i:i + 100]]).values():
            fut.result(60)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--partitions", type=int, default=PARTITIONS, help="partitions of the groups' topic")
    ap.add_argument("--extra-topics", type=int, default=0,
                    help="topics of 6 partitions no group reads: they weigh on every Metadata answer")
    ap.add_argument("--offsets-partitions", type=int, default=10,
                    help="the brokers' offsets.topic.num.partitions (Kafka's default: 50)")
    ap.add_argument("--shards", type=int, default=PARTITIONS,
                    help="partitions of the replicas' state topic (0: lagwatch's default)")
    args = ap.parse_args()
    brokers = {"offsets.topic.num.partitions": str(args.offsets_partitions)}
    with KafkaCluster(brokers_count=args.brokers, heap="1g", extra_config=brokers) as k, \
            ExitStack() as stack:
        setup(k, args.groups, args.partitions, TAG, 1.0)
        _extra_topics(k, args.extra_topics)
        tmp = tempfile.mkdtemp(prefix="lagwatch-rq-")
        cluster = {"name": "test", "bootstrap_servers": k.bootstrap_servers,
                   "groups": {"allow": f"^bench-{TAG}-"}}
        # like the replicas it keeps its state (the default), in a topic of its own
        single = exporter_config(tmp, k.bootstrap_servers,
                                 clusters=[{**cluster, "state": {"topic": "__lagwatch_state_rq_one"}}])
        state = {"topic": "__lagwatch_state_rq", "replicas": True}
        if args.shards:
            state["partitions"] = args.shards
        replica = exporter_config(tmp, k.bootstrap_servers, clusters=[{**cluster, "state": state}])
        procs = [("one process", stack.enter_context(ExporterProcess(None, config=single)))]
        procs += [(f"replica {i + 1}", stack.enter_context(ExporterProcess(None, config=replica)))
                  for i in range(args.replicas)]
        for _name, p in procs:
            p.wait_ready()
        time.sleep(20)  # the coordination group settled, every shard read back
        ports = {int(hp.rsplit(":", 1)[1]) for hp in k.bootstrap_servers.split(",")}

        def probe(p: ExporterProcess) -> tuple[tuple[float, float, int, float | None], int, float]:
            # each figure read right after the process's own scrape: a scrape of a large
            # exposition takes seconds, and every figure's window must be the same
            return _read(p.metrics()), _received(p.proc.pid, ports), _cpu(p.proc.pid)
        before = [probe(p) for _n, p in procs]
        time.sleep(args.seconds)
        after = [probe(p) for _n, p in procs]
        peaks = [_peak_mb(p.proc.pid) for _n, p in procs]
        print(f"{args.brokers} broker(s) with {args.offsets_partitions} __consumer_offsets "
              f"partitions, {args.groups} groups x {args.partitions} partitions, {args.replicas} "
              "replicas beside one process", flush=True)
        for (name, _p), ((c0, r0, _g, _s), b0, t0), ((c1, r1, served, shards), b1, t1), peak in zip(
                procs, before, after, peaks, strict=True):
            cycles = max(1.0, c1 - c0)
            owned = "" if shards is None else f", {shards:.0f} shard(s)"
            print(f"  {name:<12} {(r1 - r0) / cycles:5.1f} requests a cycle over {c1 - c0:.0f} cycles, "
                  f"{(b1 - b0) / cycles / 1024:7.1f} kB received a cycle, "
                  f"{(t1 - t0) / cycles:5.2f} CPU s a cycle, peak RSS {peak:4.0f} MB, "
                  f"{served} groups served{owned}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

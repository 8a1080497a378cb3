"""One broker of three SIGSTOPped for 60 s (issue 25): does every exporter cycle still
complete, and how many cycles does a commit to a group coordinated elsewhere take to show?

    .venv/bin/python -m bench.paused_broker [--pause 60]

One 3-broker KRaft cluster, the exporter (interval 1 s, request timeout 2 s), two groups
with committed offsets coordinated by two brokers other than the controller. The first
group's coordinator is paused; meanwhile a committer moves the other group's offset every
second and a reader reads ``/metrics`` every 0.5 s. A benchmark: it prints, asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

from devenv.kafka import KafkaCluster
from tests.conftest import (
    commit_offsets,
    create_topic,
    exporter_config,
    groups_on_two_brokers,
    produce,
    unique,
)
from tests.support.exporter_proc import ExporterProcess, group_offsets, value

Read = tuple[float, float, float, float | None]  # (time, cycles completed, lagwatch_up, committed)


def measure(exp: ExporterProcess, k: KafkaCluster, topic: str, group: str, seconds: float
            ) -> tuple[list[Read], list[tuple[int, float]]]:
    """Reads of the exporter while a committer moves ``group``'s offset every second."""
    commits: list[tuple[int, float]] = []
    stop = threading.Event()

    def committer() -> None:
        off = 10
        while not stop.is_set():
            commit_offsets(k.bootstrap_servers, group, topic, {0: off})
            commits.append((off, time.time()))
            off += 1
            time.sleep(1.0)

    th = threading.Thread(target=committer, daemon=True)
    th.start()
    reads: list[Read] = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        m = exp.metrics()
        reads.append((time.time(), value(m, "lagwatch_cycles_total", cluster="test") or 0.0,
                      value(m, "lagwatch_up", cluster="test") or 0.0,
                      group_offsets(m, group, "kafka_consumergroup_committed_offset").get((topic, 0))))
        time.sleep(0.5)
    stop.set()
    th.join(10)
    return reads, commits


def report(reads: list[Read], commits: list[tuple[int, float]]) -> None:
    longest, since = 0.0, reads[0][0]
    for (_ta, ca, _ua, _oa), (tb, cb, _ub, _ob) in zip(reads, reads[1:], strict=False):
        if cb != ca:
            since = tb
        longest = max(longest, tb - since)
    shown = []  # cycles from a commit to the first read showing it
    for off, tc in commits:
        c0 = next((c for t, c, _u, _o in reads if t >= tc), None)
        seen = next((c for t, c, _u, o in reads if t >= tc and o is not None and o >= off), None)
        if c0 is not None and seen is not None:
            shown.append(seen - c0)
    print(f"reads: {len(reads)}; lagwatch_up values: {sorted({u for _t, _c, u, _o in reads})}")
    print(f"cycles completed: {reads[-1][1] - reads[0][1]:.0f} in {reads[-1][0] - reads[0][0]:.0f} s; "
          f"longest time without one: {longest:.1f} s")
    if shown:
        print(f"commits shown: {len(shown)} of {len(commits)}; cycles from commit to shown: "
              f"median {statistics.median(shown):.0f}, max {max(shown):.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.paused_broker")
    ap.add_argument("--pause", type=float, default=60.0, help="seconds the broker stays paused")
    args = ap.parse_args()
    with KafkaCluster(brokers_count=3) as k:
        topic = create_topic(k, unique("paused"), partitions=1, rf=3)
        produce(k, topic, {0: 100_000}, acks="all")
        victim_id, paused_g, _other, live_g = groups_on_two_brokers(k, topic, "paused", 1)
        victim = next(b for b in k.brokers if b.node_id == victim_id)
        cfg = exporter_config(tempfile.mkdtemp(), k.bootstrap_servers, interval=1.0, request_timeout=2.0)
        with ExporterProcess(None, config=cfg) as exp:
            exp.wait_ready()
            time.sleep(5)
            victim.pause()
            try:
                reads, commits = measure(exp, k, topic, live_g, args.pause)
            finally:
                victim.resume()
    print(f"paused: broker {victim_id} ({paused_g}'s coordinator) for {args.pause:.0f} s; "
          f"{live_g} coordinated by another broker; exporter interval 1 s, request timeout 2 s")
    report(reads, commits)


if __name__ == "__main__":
    main()

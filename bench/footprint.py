"""The main process's share of the cycle, without Kafka: evaluation and rendering of G
groups x P partitions from synthetic snapshots, with tracemalloc's top allocation sites.

    .venv/bin/python -m bench.footprint --groups 2000 --partitions 50 --cycles 6
    .venv/bin/python -m bench.footprint --groups 2000 --partitions 50 --trace

The snapshots are the ones bench/bench_core.py makes a broker serve (one topic, every
group committed on every partition, no members), the high watermark advancing on a
tenth of the partitions each cycle (``--idle``: standing still, as on the broker of
bench/bench_core.py once its setup is done). A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc

from exporter.config import Thresholds
from exporter.contracts.snapshot import GroupSample, GroupType, PartitionOffsets, Snapshot
from exporter.evaluate.evaluator import Evaluator
from exporter.expose.render import render_cluster


def snapshot(groups: int, partitions: int, cycle: int, t: float, not_ok: float = 1.0,
             produce: bool = True, live: bool = False) -> Snapshot:
    topic = f"bench-{groups}x{partitions}"
    if live:
        return live_snapshot(groups, partitions, cycle, t)
    parts = {(topic, p): PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0,
                                          hw=100 + (cycle if produce and p % 10 == 0 else 0),
                                          lso=100, leo=100) for p in range(partitions)}
    every = max(1, round(1 / not_ok)) if not_ok > 0 else 0
    gs = {}
    for g in range(groups):
        gid = f"bench-{groups}x{partitions}-g{g:05d}"
        off = 50 + (g % 50) if every and g % every == 0 else 100
        gs[gid] = GroupSample(group_id=gid, type=GroupType.CLASSIC, state="empty",
                              committed={(topic, p): off for p in range(partitions)})
    return Snapshot(cluster="bench", taken_at=t, duration=0.5, partitions=parts, groups=gs, brokers=1)


def live_snapshot(groups: int, partitions: int, cycle: int, t: float) -> Snapshot:
    """The live shape: every partition written every cycle, every group committing a few
    records behind the HW every cycle (assign()-style commits, no members: every group ok)."""
    topic = f"bench-{groups}x{partitions}"
    hw = 100 + 20 * cycle
    parts = {(topic, p): PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0, hw=hw + p % 3,
                                          lso=hw + p % 3, leo=hw + p % 3) for p in range(partitions)}
    gs = {}
    for g in range(groups):
        gid = f"bench-{groups}x{partitions}-g{g:05d}"
        gs[gid] = GroupSample(group_id=gid, type=GroupType.CLASSIC, state="empty",
                              committed={(topic, p): hw - 1 - (g + p) % 5 for p in range(partitions)})
    return Snapshot(cluster="bench", taken_at=t, duration=0.5, partitions=parts, groups=gs, brokers=1)


def rss_mb() -> tuple[float, float]:
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0]) / 1024
    return vals["VmRSS"], vals["VmHWM"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--not-ok", type=float, default=1.0, help="fraction of groups with lag")
    ap.add_argument("--trace", action="store_true", help="tracemalloc: top allocation sites")
    ap.add_argument("--bounded", action="store_true")
    ap.add_argument("--idle", action="store_true", help="no records produced: the HW stands still")
    ap.add_argument("--live", action="store_true",
                    help="every partition written and every group committing every cycle")
    ap.add_argument("--profile", help="write a cProfile of the cycles after the first to this file")
    args = ap.parse_args()
    ev = Evaluator("bench", Thresholds(), 15.0)
    if args.trace:
        tracemalloc.start(3)
    t = 1_000_000.0
    ev_s, re_s, size = [], [], 0
    exposition = None
    for c in range(args.cycles):
        snap = snapshot(args.groups, args.partitions, c, t + 15 * c, args.not_ok, not args.idle, args.live)
        s = time.process_time()
        view = ev.evaluate(snap)
        ev_s.append(time.process_time() - s)
        s = time.process_time()
        exposition = render_cluster(view, bounded=args.bounded) if args.bounded else render_cluster(view)
        re_s.append(time.process_time() - s)
        size = sum(len(h) + len(b) for _n, h, b in exposition)
        del snap, view
        gc.collect()
        print(f"cycle {c}: evaluate {ev_s[-1]:.2f} s, render {re_s[-1]:.2f} s, "
              f"/metrics {size / 1e6:.1f} MB, RSS {rss_mb()[0]:.0f} MB", flush=True)
    print(f"median evaluate {statistics.median(ev_s[1:]):.2f} s, render {statistics.median(re_s[1:]):.2f} s, "
          f"peak RSS {rss_mb()[1]:.0f} MB")
    if args.trace:
        snap_ = tracemalloc.take_snapshot()
        print(f"traced now {sum(s.size for s in snap_.statistics('filename')) / 1e6:.1f} MB, "
              f"peak {tracemalloc.get_traced_memory()[1] / 1e6:.1f} MB")
        for st in snap_.statistics("lineno")[:25]:
            print(f"{st.size / 1e6:8.1f} MB {st.count:>9} {st.traceback[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

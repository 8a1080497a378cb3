"""The state topic's size and write rate, without Kafka: the records lagwatch would write
for G groups x P partitions (bench/footprint.py's synthetic snapshots), encoded as the
state topic holds them (exporter/state/codec.py).

    .venv/bin/python -m bench.state_size --groups 2000 --partitions 50 --cycles 40

Prints: the whole state (every group's and topic's record, what a restart reads), per
group and per group-partition; the time to encode it, and to decode and import it into a
fresh evaluator; then, cycle by cycle with the default write policy
(exporter/state/sync.py), the records and bytes each cycle writes. A benchmark, not a
test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench.footprint import snapshot
from exporter.config import ClusterConfig, Thresholds
from exporter.contracts.worker import StateLoadReply, StateWriteReply
from exporter.evaluate.evaluator import Evaluator
from exporter.state.sync import StateSync


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--cycles", type=int, default=40, help="cycles judged before the state is measured")
    ap.add_argument("--measure", type=int, default=20, help="cycles whose writes are measured")
    ap.add_argument("--not-ok", type=float, default=1.0, help="fraction of groups with lag")
    ap.add_argument("--interval", type=float, default=30.0)
    a = ap.parse_args()
    cfg = ClusterConfig(bootstrap_servers="127.0.0.1:9092", name="bench")
    ev = Evaluator("bench", Thresholds(), a.interval)
    t = 1_800_000_000.0
    for c in range(a.cycles):
        ev.evaluate(snapshot(a.groups, a.partitions, c, t, a.not_ok), now=t)
        t += a.interval
    sync = StateSync(cfg)
    sync.restore(ev, StateLoadReply("bench-cluster-id", {}), t)  # an empty topic: nothing to import
    view = ev.last_good
    assert view is not None
    t0 = time.process_time()
    full = sync.records(ev, view, a.cycles, t)
    encode_s = time.process_time() - t0
    size = sum(len(v or b"") + len(k) for k, v, _ in full)
    gps = a.groups * a.partitions
    print(f"{a.groups} groups x {a.partitions} partitions ({gps} group-partitions), "
          f"{a.not_ok:.0%} with lag, after {a.cycles} cycles of {a.interval:g} s")
    print(f"whole state: {len(full)} records, {size / 1e6:.2f} MB "
          f"({size / a.groups:.0f} B per group, {size / gps:.1f} B per group-partition); "
          f"largest record {max(len(v or b'') for _k, v, _ in full) / 1e3:.1f} kB; "
          f"encoded in {encode_s:.2f} s CPU")
    fresh = StateSync(cfg)
    t0 = time.process_time()
    fresh.restore(Evaluator("bench", Thresholds(), a.interval),
                  StateLoadReply("bench-cluster-id", {k: (v, t) for k, v, _ in full}), t)
    print(f"restore (decode + import): {time.process_time() - t0:.2f} s CPU, "
          f"{fresh.restored_groups} groups, dropped {sum(fresh.dropped.values())}")
    sync.wrote(StateWriteReply(len(full), 0))
    per_cycle = []
    for c in range(a.cycles, a.cycles + a.measure):
        view = ev.evaluate(snapshot(a.groups, a.partitions, c, t, a.not_ok), now=t)
        recs = sync.records(ev, view, c + 1, t)
        per_cycle.append((len(recs), sum(len(v or b"") + len(k) for k, v, _ in recs)))
        sync.wrote(StateWriteReply(len(recs), 0))
        t += a.interval
    n = [r for r, _ in per_cycle]
    b = [x for _, x in per_cycle]
    print(f"writes over {a.measure} cycles (state.write_every {cfg.state_write_every}): "
          f"records per cycle mean {statistics.mean(n):.0f} (max {max(n)}), "
          f"bytes per cycle mean {statistics.mean(b) / 1e6:.2f} MB (max {max(b) / 1e6:.2f} MB), "
          f"{statistics.mean(b) / a.interval / 1e3:.1f} kB/s at interval {a.interval:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

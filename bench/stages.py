"""Where a cycle's time goes in the main process: evaluation split by stage, then
rendering, on the synthetic snapshots of bench/footprint.py (no Kafka).

    .venv/bin/python -m bench.stages --live                 # the live shape, 2000 x 50
    .venv/bin/python -m bench.stages --behind --one-at-a-time

Each stage's functions are wrapped with a process-time counter, so a stage's figure
includes the stages it calls (indented under it) and the wrappers' own cost (about
0.3 us a call). Prints the mean of the cycles after the first two. A benchmark, not a
test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import sys
import time

from bench.footprint import rss_mb, snapshot
from exporter.config import Thresholds
from exporter.evaluate import evaluator as ev_mod
from exporter.evaluate import progress, rebalances
from exporter.expose.render import render_cluster
from exporter.runtime import collect_less

# (label, owner of the function, its name); indented labels are parts of the one above.
STAGES: tuple[tuple[str, object, str], ...] = (
    ("evaluation (all of it)", ev_mod.Evaluator, "evaluate"),
    ("  HW history", ev_mod.Evaluator, "_update_history"),
    ("  groups prepared (members, cycle facts)", ev_mod.Evaluator, "_prepared"),
    ("    column samples gathered", ev_mod.Evaluator, "_column_batch"),
    ("      lag seconds", ev_mod.Evaluator, "_lag_seconds"),
    ("  memory step in columns", ev_mod.Evaluator, "_judge_columns"),
    ("  groups judged (views, status, reasons)", ev_mod.Evaluator, "_group"),
    ("    partitions one at a time", ev_mod.Evaluator, "_partition"),
    ("    partitions classified from columns", ev_mod.Evaluator, "_classified"),
    ("    exposure", ev_mod, "_exposure"),
    ("  rates, catch-up, losses", progress.ProgressTracker, "many"),
    ("  rebalances", rebalances.RebalanceTracker, "one"),
    ("  rest (enter, settle)", ev_mod, "enter"),
)


def _wrap(spent: collections.Counter, label: str, owner: object, name: str) -> None:
    f = getattr(owner, name)

    @functools.wraps(f)
    def timed(*a: object, **k: object) -> object:
        s = time.process_time()
        try:
            return f(*a, **k)
        finally:
            spent[label] += time.process_time() - s

    setattr(owner, name, timed)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--cycles", type=int, default=6)
    shape = ap.add_mutually_exclusive_group()
    shape.add_argument("--live", action="store_true", help="every partition written, every group committing")
    shape.add_argument("--behind", action="store_true", help="every group behind, none committing (stopped)")
    ap.add_argument("--one-at-a-time", action="store_true", help="judge no partition in columns")
    args = ap.parse_args()
    spent: collections.Counter = collections.Counter()
    for label, owner, name in STAGES:
        _wrap(spent, label, owner, name)
    collect_less()  # as the exporter's process does
    ev = ev_mod.Evaluator("bench", Thresholds(), 15.0, columns=not args.one_at_a_time)
    total: collections.Counter = collections.Counter()
    measured = 0
    for c in range(args.cycles):
        snap = snapshot(args.groups, args.partitions, c, 1_000_000.0 + 15 * c, live=args.live,
                        produce=not args.behind)
        spent.clear()
        view = ev.evaluate(snap)
        s = time.process_time()
        render_cluster(view)
        spent["rendering"] += time.process_time() - s
        if c >= 2:
            total.update(spent)
            measured += 1
        del view, snap
        gc.collect()
    print(f"{args.groups} groups x {args.partitions} partitions, "
          f"{'live' if args.live else 'behind' if args.behind else 'default'} shape, "
          f"{'one at a time' if args.one_at_a_time else 'columns'}; mean of {measured} cycles, process time")
    for label, *_ in (*STAGES, ("rendering",)):
        print(f"{label:48s} {total[label] / measured:7.3f} s")
    print(f"peak RSS {rss_mb()[1]:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Instructions a steady cycle costs the main process's evaluation and the Kafka worker's
per-partition lines, counted by valgrind (callgrind's ``Ir``): the same count on a busy
machine and an idle one, where process time on a shared 2-core VM moves by half between
two runs of the same code. For an A/B of a change to the evaluator or the renderer.

    .venv/bin/python -m bench.instructions                      # all behind, 200 x 50
    .venv/bin/python -m bench.instructions --live --groups 400
    .venv/bin/python -m bench.instructions --stage lines

Each figure is two runs of a child interpreter under ``valgrind --tool=callgrind``
(``PYTHONHASHSEED=0``) on ``bench.footprint``'s synthetic snapshots, made before the
measured cycles: one runs ``--warm`` cycles, the other ``--warm`` + ``--cycles``; their
difference over ``--cycles`` is what one steady cycle costs, without the interpreter's
start, the imports and the snapshots. A run of 200 x 50 takes about a minute per child
(valgrind runs Python about 50 times slower). Needs valgrind (Debian: ``apt-get install
valgrind``). A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTED = re.compile(r"Collected : (\d+)")


def child(stage: str, groups: int, partitions: int, live: bool, warm: int, measured: int, made: int) -> None:
    """In the measured interpreter: ``made`` snapshots (as many in both runs), ``warm``
    cycles, then ``measured`` more of ``stage``."""
    import pickle

    from bench.footprint import snapshot
    from exporter.config import Thresholds
    from exporter.evaluate.evaluator import Evaluator
    from exporter.expose.partition_lines import PartitionLines
    from exporter.expose.render import chunk_of
    from exporter.runtime import collect_less

    collect_less()  # as the exporter's process does
    ev = Evaluator("bench", Thresholds(), 15.0)
    snaps = [snapshot(groups, partitions, c, 1_000_000.0 + 15 * c, live=live, produce=live)
             for c in range(made)]
    view = None
    for snap in snaps[:warm + measured if stage == "evaluation" else warm]:
        view = ev.evaluate(snap)
    if stage == "lines" and view is not None:  # the worker's part: the chunks as they cross the pipe
        views = list(view.groups.values())
        chunks = [pickle.dumps(chunk_of(1, "bench", views[i:i + 100], False))
                  for i in range(0, len(views), 100)]
        for cycle in range(measured):
            lines = PartitionLines(cycle)
            for data in chunks:
                lines.add(pickle.loads(data))
            lines.bodies()


def instructions(stage: str, args: argparse.Namespace, measured: int) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m",
           "bench.instructions", "--child", stage, "--groups", str(args.groups),
           "--partitions", str(args.partitions), "--warm", str(args.warm), "--cycles", str(measured),
           "--made", str(args.warm + args.cycles)]
    if args.live:
        cmd.append("--live")
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    found = COLLECTED.search(out.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", choices=["evaluation", "lines"], default="evaluation")
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--live", action="store_true", help="every partition written, every group committing")
    ap.add_argument("--warm", type=int, default=3, help="cycles before the measured ones")
    ap.add_argument("--cycles", type=int, default=4, help="cycles measured")
    ap.add_argument("--child", choices=["evaluation", "lines"], help=argparse.SUPPRESS)
    ap.add_argument("--made", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.groups, args.partitions, args.live, args.warm, args.cycles, args.made)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    base = instructions(args.stage, args, 0)
    total = instructions(args.stage, args, args.cycles)
    shape = "live" if args.live else "all behind"
    rows = args.groups * args.partitions
    per_cycle = (total - base) / args.cycles
    print(f"{args.stage}, {shape}, {args.groups} x {args.partitions}: {per_cycle / 1e6:.1f} M instructions "
          f"a steady cycle ({per_cycle / rows:,.0f} a group-partition; {args.cycles} after {args.warm})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

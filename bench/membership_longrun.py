"""Membership models over a long run: issue 23's long-run acceptance, against one local
broker, a real exporter and a real Prometheus with the shipped rules.

    .venv/bin/python -m bench.membership_longrun [--duration 600] [--record FILE]

Three groups, each on its own one-partition topic fed at about 20 records a second:

- ``longrun-ckpt-5s`` and ``longrun-ckpt-60s``: clients committing outside group
  membership (``assign()``, as Flink's Kafka source does), each taking a record only once it
  is ``--behind`` seconds old (reading steadily behind), committing their position every
  5 s and every 60 s. They must read ``ok`` at every cycle from two cycles after their
  first commit (READY) to the end, and no alert may ever be pending or firing for them.
- ``longrun-member-90s``: a group member polling all the time and committing every 90 s,
  with a per-group ``stall_after`` of 60 (``group_thresholds``) over a cluster
  ``stall_after`` of 30. Once its cadence is shown (the cycle after the second commit
  lagwatch sees: the first gap between commits) it must never read ``stalled``. Near the
  end it stops committing while records keep arriving (STOP-COMMITS, then LAST-COMMIT):
  it must read ``stalled`` past its allowance (the learnt gap plus one interval, see
  docs/statuses.md, ``stalled``) and no later than the first cycle after it plus one.

The harness reads the exporter's JSON API at every cycle and Prometheus's ALERTS series,
prints a report per group (statuses with counts, first non-ok cycle, alerts seen) and exits
1 if a check fails. Timing is judged in exporter cycles, so a busy machine changes nothing.
``--record FILE`` writes the exporter's inputs, narrowed to the three groups, with the
marks, as a replay fixture (tests/test_replay_longrun.py).

A quick check of the harness (about 3 minutes; the 60 s client's cadence is then past
4 x stall_after, so it reads stopped and the run fails, as it should):
``--duration 100 --interval 2 --stall-after 8 --member-every 16 --member-stall-after 10
--behind 3``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
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
from confluent_kafka import Consumer, TopicPartition

from devenv.kafka import KafkaCluster
from exporter import recording
from tests.support.exporter_proc import ExporterProcess, parse_metrics
from tests.support.prometheus_proc import PrometheusProcess, promtool
from tests.test_membership import SlowCommitter, SteadyProducer

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "alerts" / "lagwatch.rules.yml"
CLUSTER = "longrun"
FAST, SLOW, MEMBER = "longrun-ckpt-5s", "longrun-ckpt-60s", "longrun-member-90s"


class BehindCheckpointer(threading.Thread):
    """assign() without group membership; takes each record once it is ``behind`` seconds
    old, and commits the position after the last record taken every ``every`` seconds."""

    def __init__(self, bootstrap: str, group: str, topic: str, every: float, behind: float) -> None:
        super().__init__(daemon=True)
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"})
        self.topic, self.every, self.behind = topic, every, behind
        self.stop_flag = threading.Event()
        self.commits: list[float] = []  # wall-clock time of each commit

    def run(self) -> None:
        self.c.assign([TopicPartition(self.topic, 0)])
        self.last, self.position = time.monotonic(), -1
        while not self.stop_flag.is_set():
            msg = self.c.poll(0.1)
            if msg is not None and msg.error() is None:
                ready_at = msg.timestamp()[1] / 1000 + self.behind
                while time.time() < ready_at and not self.stop_flag.is_set():
                    self._checkpoint()
                    time.sleep(0.02)
                self.position = msg.offset() + 1
            self._checkpoint()
        self.c.close()  # no final commit, no group to leave

    def _checkpoint(self) -> None:
        """Commit the position after the last record taken, every ``every`` seconds."""
        if time.monotonic() - self.last < self.every:
            return
        if self.position >= 0:
            self.c.commit(offsets=[TopicPartition(self.topic, 0, self.position)], asynchronous=False)
            self.commits.append(time.time())
        self.last = time.monotonic()

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(15)


@dataclass
class Watched:
    group: str
    statuses: list[tuple[int, str]] = field(default_factory=list)  # (cycle, status)
    committed: list[tuple[int, int | None]] = field(default_factory=list)  # (cycle, offset)
    reasons: tuple[str, ...] = ()
    membership: str = ""

    def commit_cycles(self) -> list[int]:
        """The cycles at which its committed offset was seen to move forward."""
        out, prev = [], None
        for n, off in self.committed:
            if off is not None and (prev is None or off > prev):
                out.append(n)
            prev = off if off is not None else prev
        return out


def _cycles_total(exp: ExporterProcess) -> int:
    m = parse_metrics(exp.get("/metrics")[1].decode())
    return int(sum(v for (name, _lab), v in m.items() if name == "lagwatch_cycles_total"))


def _sample(exp: ExporterProcess, w: Watched, n: int) -> None:
    code, body, _ = exp.get(f"/api/v1/clusters/{CLUSTER}/groups/{w.group}")
    if code != 200:  # not listed yet
        return
    doc = json.loads(body)
    w.statuses.append((n, doc["status"]))
    w.committed.append((n, doc["partitions"][0]["committed_offset"] if doc["partitions"] else None))
    w.reasons, w.membership = tuple(doc["reasons"]), doc.get("membership", "")


def exporter_config(work: Path, bootstrap: str, p: argparse.Namespace, record: Path) -> str:
    cfg = {"interval": p.interval, "record_dir": str(record),
           "thresholds": {"stall_after": p.stall_after},
           "clusters": [{"name": CLUSTER, "bootstrap_servers": bootstrap,
                         "group_thresholds": [{"match": f"^{MEMBER}$",
                                               "thresholds": {"stall_after": p.member_stall_after}}]}]}
    path = work / "lagwatch.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


class Run:
    """The processes, the samples and the marks of one run."""

    def __init__(self, kafka: KafkaCluster, exp: ExporterProcess, prom: PrometheusProcess,
                 p: argparse.Namespace) -> None:
        self.kafka, self.exp, self.prom, self.p = kafka, exp, prom, p
        self.watched = {g: Watched(g) for g in (FAST, SLOW, MEMBER)}
        self.marks: list[recording.Mark] = []
        self.cycle_of: dict[str, int] = {}  # mark key -> exporter cycle count when it happened
        self.alerts_now: dict[str, set[tuple[str, str]]] = {g: set() for g in self.watched}
        self.last_cycle = -1
        self.member_summary: tuple[list[int], list[int], int | None, int] | None = None

    def mark(self, group: str, event: str, at: float | None = None) -> None:
        at = time.time() if at is None else at
        self.marks.append(recording.Mark(group, group, event, round(at, 3)))
        self.cycle_of[f"{group} {event}"] = _cycles_total(self.exp)
        print(f"{time.strftime('%H:%M:%S')} {group} {event}", flush=True)

    def tick(self) -> None:
        """Sample the three groups if the exporter has evaluated a new cycle, and the alerts."""
        n = _cycles_total(self.exp)
        if n == self.last_cycle:
            return
        self.last_cycle = n
        for w in self.watched.values():
            _sample(self.exp, w, n)
        for a in self.prom.alerts():
            g = a["labels"].get("group")
            if g in self.alerts_now:
                self.alerts_now[g].add((a["labels"]["alertname"], a["state"]))

    def wait(self, seconds: float, until: Any = None) -> bool:
        """Sample for ``seconds`` or until ``until()`` holds; whether it held."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.tick()
            if until is not None and until():
                return True
            time.sleep(0.5)
        return False


Alerts = dict[str, dict[tuple[str, str], tuple[float, float]]]


def _alert_history(prom: PrometheusProcess, start: float, end: float) -> Alerts:
    """Per group: (alert, state) -> the first and last evaluation it was seen at."""
    out: Alerts = {}
    for s in prom.query_range('ALERTS{group=~"longrun-.*"}', start, end, step=1):
        m, ts = s["metric"], [float(t) for t, _v in s["values"]]
        out.setdefault(m["group"], {})[(m["alertname"], m["alertstate"])] = (ts[0], ts[-1])
    return out


def _hms(t: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t))


def check(run: Run, alerts: Alerts) -> tuple[list[str], list[str]]:
    """The report lines and the failed checks."""
    lines: list[str] = []
    failed: list[str] = []
    for g, w in run.watched.items():
        counts = Counter(s for _n, s in w.statuses)
        statuses = ", ".join(f"{s} {c}" for s, c in sorted(counts.items()))
        first_bad = next((n for n, s in w.statuses if s != "ok"), None)
        hist = alerts.get(g, {})
        seen = [f"{a} ({st}, {_hms(hist[a, st][0])}-{_hms(hist[a, st][1])})" if (a, st) in hist
                else f"{a} ({st})" for a, st in sorted(set(hist) | run.alerts_now[g])]
        lines.append(f"| `{g}` | {len(w.statuses)} | {statuses} "
                     f"| {first_bad if first_bad is not None else '-'} "
                     f"| {', '.join(seen) or 'none'} |")
    for g in (FAST, SLOW):
        w = run.watched[g]
        ready = run.cycle_of.get(f"{g} READY")
        if ready is None:
            failed.append(f"{g}: never committed")
            continue
        bad = [(n, s) for n, s in w.statuses if n >= ready + 2 and s != "ok"]
        if bad:
            failed.append(f"{g}: not ok at cycles {bad[:10]}")
        if alerts.get(g) or run.alerts_now[g]:
            failed.append(f"{g}: alerts {sorted(set(alerts.get(g, {})) | run.alerts_now[g])}")
    failed += _member_checks(run)
    return lines, failed


def _member_checks(run: Run) -> list[str]:
    p, w, failed = run.p, run.watched[MEMBER], []
    commits = w.commit_cycles()
    if len(commits) < 3:
        return [f"{MEMBER}: only {len(commits)} commits seen: {commits}"]
    shown, last = commits[1] + 1, commits[-1]
    early = [n for n, s in w.statuses if shown <= n <= last and s == "stalled"]
    if early:
        failed.append(f"{MEMBER}: stalled at cycles {early[:10]} after its cadence was shown "
                      f"(cycle {shown}), before its last commit (cycle {last})")
    stalled = next((n for n, s in w.statuses if n > last and s == "stalled"), None)
    gaps = [b - a for a, b in zip(commits, commits[1:], strict=False)]
    # the allowance is a learnt gap plus one interval; stalled at the first cycle after it
    bound = max(gaps) + 1 + 2
    run.member_summary = (commits, gaps, stalled, bound)
    if stalled is None:
        failed.append(f"{MEMBER}: never stalled after its last commit (cycle {last})")
    elif stalled - last > bound:
        failed.append(f"{MEMBER}: stalled {stalled - last} cycles after its last commit; bound {bound}")
    elif stalled - last <= math.ceil(p.member_stall_after / p.interval):
        failed.append(f"{MEMBER}: stalled {stalled - last} cycles after its last commit, within "
                      f"stall_after: its cadence was not allowed for")
    return failed


def _start_stack(work: Path, kafka: KafkaCluster, p: argparse.Namespace,
                 stack: contextlib.ExitStack) -> tuple[ExporterProcess, PrometheusProcess, Path]:
    record = work / "record"
    record.mkdir()
    exp = ExporterProcess(None, config=exporter_config(work, kafka.bootstrap_servers, p, record))
    stack.callback(exp.stop)
    exp.wait_ready(60)
    promtool("check", "rules", str(RULES))
    prom = PrometheusProcess(work / "prometheus", targets={"lagwatch": [f"127.0.0.1:{exp.port}"]},
                             rule_files=[RULES], scrape_interval="2s", evaluation_interval="2s")
    stack.callback(prom.stop)
    prom.wait_ready()
    return exp, prom, record


def _start_workload(run: Run, p: argparse.Namespace, stack: contextlib.ExitStack
                    ) -> tuple[dict[str, BehindCheckpointer], SlowCommitter]:
    from confluent_kafka.admin import AdminClient, NewTopic
    bs = run.kafka.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    topics = {g: g.replace("longrun-", "longrun-src-") for g in run.watched}
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics.values()]).values():
        f.result(30)
    for g, t in topics.items():
        prod = SteadyProducer(bs, t)
        stack.callback(prod.stop)
        prod.start()
        run.mark(g, "WATCHED")
    ckpt = {g: BehindCheckpointer(bs, g, topics[g], every, p.behind)
            for g, every in ((FAST, 5.0), (SLOW, 60.0))}
    for c in ckpt.values():
        stack.callback(c.stop)
        c.start()
    member = SlowCommitter(bs, MEMBER, topics[MEMBER], every=p.member_every)
    stack.callback(member.stop)
    member.start()
    return ckpt, member


def _drive(run: Run, ckpt: dict[str, BehindCheckpointer], member: SlowCommitter,
           p: argparse.Namespace) -> None:
    """``--duration`` seconds from the last assign() client's first commit; the member told
    to stop committing one cadence before that, so its last commit falls near the end."""
    ready: set[str] = set()
    steady_from, halted = float("inf"), False
    while time.time() < steady_from + p.duration:
        run.wait(1)
        for g, c in ckpt.items():
            if c.commits and g not in ready:
                ready.add(g)
                run.mark(g, "READY", c.commits[0])
        if len(ready & set(ckpt)) == len(ckpt):
            steady_from = max(c.commits[0] for c in ckpt.values())
        if member.commits and MEMBER not in ready:
            ready.add(MEMBER)
            run.mark(MEMBER, "READY")
        if not halted and time.time() >= steady_from + p.duration - p.member_every:
            halted = True
            run.mark(MEMBER, "STOP-COMMITS")
            member.halt_flag.set()
        if member.halted_at and f"{MEMBER} LAST-COMMIT" not in run.cycle_of:
            run.mark(MEMBER, "LAST-COMMIT", member.halted_at)
    run.wait(2 * p.member_every + 10, lambda: member.halted_at)
    if f"{MEMBER} LAST-COMMIT" not in run.cycle_of and member.halted_at:
        run.mark(MEMBER, "LAST-COMMIT", member.halted_at)
    # until stalled: the bound is 4 x stall_after (the widest allowance) plus a margin
    limit = 4 * p.member_stall_after + 6 * p.interval
    if run.wait(limit, lambda: run.watched[MEMBER].statuses[-1][1] == "stalled"):
        run.mark(MEMBER, "STALLED")
    run.wait(2 * p.interval)  # two more cycles of every group
    for g in run.watched:
        run.mark(g, "END")


def write_fixture(run: Run, recorded: Path, out: str, start: float, end: float) -> str:
    rec = recording.load(recorded / f"{CLUSTER}.jsonl")
    marks = sorted(run.marks, key=lambda m: m.at)
    recording.write_fixture(out, recording.fixture_lines(rec, marks, start, end))
    return f"{len(rec.cycles)} cycles, {len(marks)} marks, {Path(out).stat().st_size / 1e3:.0f} kB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=600.0, help="seconds of steady run (default 600)")
    ap.add_argument("--interval", type=float, default=5.0, help="exporter interval (default 5)")
    ap.add_argument("--stall-after", type=float, default=30.0, help="the cluster's stall_after (default 30)")
    ap.add_argument("--member-every", type=float, default=90.0, help="the member's commit cadence (90)")
    ap.add_argument("--member-stall-after", type=float, default=60.0,
                    help="the member's stall_after override (default 60)")
    ap.add_argument("--behind", type=float, default=10.0,
                    help="how old a record is when the assign() clients take it (default 10 s)")
    ap.add_argument("--record", help="write the replay fixture (.jsonl.xz) here")
    p = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lagwatch-longrun-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        kafka = stack.enter_context(KafkaCluster())
        exp, prom, recorded = _start_stack(work, kafka, p, stack)
        run = Run(kafka, exp, prom, p)
        start = time.time()
        ckpt, member = _start_workload(run, p, stack)
        try:
            _drive(run, ckpt, member, p)
        finally:
            end = time.time()
            alerts = _alert_history(prom, start, end)
            lines, failed = check(run, alerts)
            print(report(run, lines, failed, end - start))
            if p.record:
                print(f"recording {p.record}: {write_fixture(run, recorded, p.record, start - 1, end)}")
    return 1 if failed else 0


def report(run: Run, lines: list[str], failed: list[str], wall: float) -> str:
    p = run.p
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = [f"membership long run: {wall:.0f} s, interval {p.interval:g} s, stall_after {p.stall_after:g} "
           f"(member {p.member_stall_after:g}), commit {commit}, {date}",
           "", "| group | cycles sampled | statuses | first non-ok cycle | alerts (state) |",
           "|---|---|---|---|---|", *lines, ""]
    ms = run.member_summary
    if ms:
        commits, gaps, stalled, bound = ms
        last = commits[-1]
        out.append(f"{MEMBER}: commits seen at cycles {commits} (gaps {gaps} cycles); cadence shown "
                   f"at cycle {commits[1] + 1}; last commit cycle {last}; stalled at cycle {stalled} "
                   f"({None if stalled is None else stalled - last} cycles after; bound {bound})")
    for g in (FAST, SLOW):
        w = run.watched[g]
        out.append(f"{g}: READY at cycle {run.cycle_of.get(f'{g} READY')}; membership {w.membership}; "
                   f"reasons {list(w.reasons)}")
    out += ["", "FAILED:" if failed else "all checks passed", *(f"- {f}" for f in failed)]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

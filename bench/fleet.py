"""Trust on a realistic fleet: ~40 consumer groups with known ground truth, one exporter, a real
Prometheus with the shipped alert rules, and broker faults; prints how often lagwatch was right.

    .venv/bin/python -m bench.fleet                      # 30 min, 3 brokers, faults, full fleet
    .venv/bin/python -m bench.fleet --duration 300 --brokers 1 --profile small --alert-for-divisor 10

One process tree: Kafka (1 or 3 KRaft nodes), the exporter (``python -m exporter``), Debian's
Prometheus scraping it as job ``lagwatch`` with ``alerts/lagwatch.rules.yml``, a producer
process (plain and transactional producers), one process per consumer
(devenv/fleet_consumer.py), the JVM apps of devenv/jvm (Kafka Streams, share consumers) and one
PySpark driver with two queries. The fleet itself (which groups, what they do, when they turn
bad) is devenv/fleet_workloads.py. Every Kafka client the harness needs while brokers fail runs
in a child process: librdkafka can abort its process when a broker dies under a request.

Ground truth: a healthy group must be ``ok`` in every sample from two cycles after its first
member got an assignment; a bad group's truth changes at the moment its behaviour turns bad,
as the consumer itself prints it (``TURNED``/``BLOCKED``) or the harness records it (SIGKILL,
backwards commit, flag file of the hung Spark batch), and from then on it must show its
expected status within its bound (``Params.bound``: docs/statuses.md's threshold + 2 cycles +
margin). A recorder reads ``/api/v1/clusters/fleet/groups`` every second; every reading is a
sample, weighted by the time to the next one.

With ``--brokers 3`` two faults happen mid-run: a broker restart (SIGTERM, controlled
shutdown) at 45 % of the run and, at 70 %, SIGKILL of the broker that coordinates most of
the fleet's groups (restarted once its groups have moved). Neither may turn a healthy group
non-ok.

Alerts: Prometheus evaluates every ``--interval`` seconds; at the end the ``ALERTS`` series
say which alert was pending or firing for which group, and when. The shipped rules have
``for:`` of minutes; ``--alert-for-divisor N`` loads a copy with every ``for:`` divided by N
(the report says so) for short runs.

The output is a Markdown report (per status: true positives, false negatives, false
positives, detection delays; healthy groups' seconds in a wrong status; alerts per group),
printed and, with ``--out``, written to a file; ``--json`` writes the raw result. The report
ends with the run's checks (every kind of group ran and was judged, no harness failure, no
wrong status on a healthy group or on a bad one before its turn, every detection within its
bound, no alert for a healthy group, every due alert fired); the exit status is 1 if one failed.

Recording (``--record FILE``): the exporter runs with ``--record`` (exporter/recording.py) and
the run writes FILE, an xz fixture of every cycle up to the run's end narrowed to the fleet's
groups, followed by the ground truth as marks. A mark's role is the group id without the
run's random prefix (``steady``, ``steady-848``, ``nocommit``, ``maxpoll-848``,
``spark-hung``: stable across re-recordings of a profile); every group has:

- ``HEALTHY`` or ``BAD`` at the run's start (t0);
- ``READY`` at the moment the workload was ready (its first member got an assignment and read
  a record under 2 s old or reached a partition's end; a Spark query: its first caught-up
  batch after the warm-up). The
  fleet judges from ``Params.warmup_cycles`` (2) cycles later on; absent if it never was;

and a bad group that turned:

- ``TURNED:<status>`` at its turn (the consumer's ``TURNED``/``BLOCKED``, the SIGKILL, the
  backwards commit, the Spark batch's first blocked row): ``<status>`` is expected from then;
- ``BOUND:<seconds>`` at the same time: ``Params.bound`` for that status, the longest
  acceptable detection delay.

When the fleet stops judging a group (a rewound consumer stopped for its offset reset, the
rewind's hold over, a process died on its own, a consumer's partitions lost when its session
timed out) the group has an ``UNJUDGED`` mark, and an ``OK`` mark when it must be ``ok`` again
(the rewound or lost consumer caught up).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devenv import fleet_workloads
from devenv.fleet_consumer import COMMIT_EVIDENCE
from devenv.fleet_workloads import (
    Change,
    Ctx,
    JvmGroup,
    Params,
    ProducerProcess,
    SparkDriver,
    SparkQuery,
    Workload,
    build_fleet,
    create_topics,
    in_child,
    topics_of,
)
from devenv.kafka import KafkaCluster
from exporter import recording

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "alerts" / "lagwatch.rules.yml"
CLUSTER = "fleet"
RECORD_EVERY = 1.0  # seconds between two readings of the exporter's API
MAX_SAMPLE_WEIGHT = 3.0  # a gap in the readings counts at most this long


@dataclass
class Options:
    duration: float = 1800.0
    interval: float = 3.0
    stall_after: float = 30.0
    livelock_after: float = 30.0
    lag_seconds: float = 600.0
    brokers: int = 3
    faults: bool = True
    profile: str = "full"
    spark: bool = True
    jvm: bool = True
    jvm_bad: bool | None = None
    alert_for_divisor: float | None = None
    margin: float = 5.0
    out: str | None = None
    json_out: str | None = None
    keep_workdir: bool = False
    quiet: bool = False
    record: str | None = None  # write an xz fixture of the exporter's inputs here (see above)

    @property
    def params(self) -> Params:
        return Params(interval=self.interval, stall_after=self.stall_after,
                      livelock_after=self.livelock_after, lag_seconds=self.lag_seconds,
                      margin=self.margin)


# -- recording ------------------------------------------------------------------------------

class Recorder(threading.Thread):
    """Reads the exporter's group list every second: per group [(t, status, first reason)]."""

    def __init__(self, exporter: Any, groups: list[str]) -> None:
        super().__init__(daemon=True, name="fleet-recorder")
        self.exporter = exporter
        self.groups = set(groups)
        self.timeline: dict[str, list[tuple[float, str, str]]] = {g: [] for g in groups}
        # per group [(t, lag offsets, max lag seconds, members)], for explaining what happened
        self.lags: dict[str, list[tuple[float, Any, Any, Any]]] = {g: [] for g in groups}
        self.cluster: list[tuple[float, bool, float | None, float | None]] = []
        self.down: list[tuple[float, str]] = []  # (t, last_error) of readings with up false
        self.failures = 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.wait(RECORD_EVERY):
            try:
                code, body, _ = self.exporter.get(f"/api/v1/clusters/{CLUSTER}/groups", timeout=5)
                ccode, cbody, _ = self.exporter.get(f"/api/v1/clusters/{CLUSTER}", timeout=5)
            except OSError:
                self.failures += 1
                continue
            if code != 200:
                self.failures += 1
                continue
            now = time.time()
            seen = set()
            for g in json.loads(body):
                if g["group"] in self.groups:
                    seen.add(g["group"])
                    reason = g["reasons"][0] if g["reasons"] else ""
                    self.timeline[g["group"]].append((now, g["status"], reason))
                    self.lags[g["group"]].append((now, g.get("lag_offsets"), g.get("max_lag_seconds"),
                                                  g.get("members")))
            for g in self.groups - seen:
                self.timeline[g].append((now, "absent", ""))
            if ccode == 200:
                c = json.loads(cbody)
                self.cluster.append((now, c["up"], c.get("data_age_seconds"),
                                     c.get("sample_duration_seconds")))
                if not c["up"]:
                    self.down.append((now, c.get("last_error") or ""))

    def current(self) -> dict[str, str]:
        return {g: tl[-1][1] for g, tl in self.timeline.items() if tl}


# -- faults -------------------------------------------------------------------------------------

@dataclass
class Fault:
    name: str
    node: int
    start: float
    end: float = 0.0
    detail: str = ""


def coordinators(cluster: KafkaCluster, groups: list[str]) -> dict[str, int]:
    """Each group's coordinator, asked from a child process: librdkafka's admin client can
    abort its process when a broker dies under a request (see devenv.fleet_workloads.in_child)."""
    try:
        return in_child(fleet_workloads.coordinators, cluster.bootstrap_servers, groups, timeout=90)
    except Exception:  # noqa: BLE001 - the child died or timed out: nothing known this time
        return {}


def broker_restart(cluster: KafkaCluster, groups: list[str], faults: list[Fault], log: Any) -> None:
    coords = Counter(coordinators(cluster, groups).values())
    # the broker coordinating the fewest of the fleet's groups: a plain broker restart
    node = min((b.node_id for b in cluster.brokers), key=lambda n: coords.get(n, 0))
    b = next(b for b in cluster.brokers if b.node_id == node)
    f = Fault("broker restart (SIGTERM, controlled shutdown)", node, time.time(),
              detail=f"coordinated {coords.get(node, 0)} of the fleet's groups")
    faults.append(f)
    log(f"FAULT: restarting broker {node}")
    cluster.restart_broker(b)
    f.end = time.time()
    log(f"FAULT: broker {node} back after {f.end - f.start:.0f} s")


def coordinator_failover(cluster: KafkaCluster, groups: list[str], faults: list[Fault], log: Any) -> None:
    before = coordinators(cluster, groups)
    if not before:
        log("FAULT: coordinators unknown, failover skipped")
        return
    node = Counter(before.values()).most_common(1)[0][0]
    mine = [g for g, n in before.items() if n == node]
    b = next(b for b in cluster.brokers if b.node_id == node)
    f = Fault("group coordinator failover (SIGKILL)", node, time.time(),
              detail=f"coordinated {len(mine)} of the fleet's groups")
    faults.append(f)
    log(f"FAULT: SIGKILL broker {node}, coordinator of {len(mine)} groups")
    cluster.stop_broker(b, kill=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        time.sleep(2)
        now = coordinators(cluster, mine)
        if len(now) == len(mine) and node not in now.values():
            f.detail += f"; they moved in {time.time() - f.start:.0f} s"
            break
    time.sleep(15)
    cluster.restart_broker(b)
    f.end = time.time()
    log(f"FAULT: broker {node} back after {f.end - f.start:.0f} s ({f.detail})")


# -- alerts ------------------------------------------------------------------------------------

def _duration_s(text: str) -> float:
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", text):
        total += float(num) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    return total


def rules_file(workdir: Path, divisor: float | None) -> tuple[Path, str]:
    """The shipped rules, or a copy with every ``for:`` (and ``keep_firing_for:``) divided by
    ``divisor``: a rule keeps its meaning relative to the others (a 15 min ``for:`` that rides
    out bursts still rides out bursts ten times shorter), unlike a flat cap."""
    if divisor is None or divisor == 1:
        return RULES, "shipped alerts/lagwatch.rules.yml, unchanged"
    doc = yaml.safe_load(RULES.read_text())
    changed = []
    for g in doc["groups"]:
        for r in g["rules"]:
            for key in ("for", "keep_firing_for"):
                if key in r:
                    new = max(1, round(_duration_s(str(r[key])) / divisor))
                    if key == "for":
                        changed.append(f"{r['alert']} {r[key]}->{new}s")
                    r[key] = f"{new}s"
    path = workdir / "lagwatch.rules.short-for.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, (f"a COPY of alerts/lagwatch.rules.yml with every `for:` divided by {divisor:g} for this "
                  f"short run ({', '.join(c.replace('KafkaConsumer', '') for c in changed)}); "
                  "expressions unchanged")


def rule_for_seconds(path: Path) -> dict[str, float]:
    """``for:`` of every alert in a rules file, in seconds (0 without one)."""
    doc = yaml.safe_load(path.read_text())
    return {r["alert"]: _duration_s(str(r.get("for", "0s"))) for g in doc["groups"] for r in g["rules"]
            if "alert" in r}


def alert_timeline(prom: Any, start: float, end: float, step: float) -> list[dict[str, Any]]:
    """Every (alert, labels, state) Prometheus had between start and end, with first/last time."""
    out = []
    for s in prom.query_range("ALERTS", start, end, step=step):
        m = s["metric"]
        ts = [float(t) for t, _v in s["values"]]
        out.append({"alert": m.get("alertname", ""), "state": m.get("alertstate", ""),
                    "group": m.get("group", ""), "labels": m, "first": min(ts), "last": max(ts)})
    return out


# -- evaluation ---------------------------------------------------------------------------------

@dataclass
class Episode:
    group: str
    status: str
    start: float
    end: float
    reason: str
    expected: str

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class GroupResult:
    group: str
    kind: str
    gtype: str
    healthy: bool
    expect: str
    description: str
    changes: list[Change]
    samples: int = 0
    judged_seconds: float = 0.0
    wrong: list[Episode] = field(default_factory=list)
    absent_seconds: float = 0.0
    turn: float | None = None
    detected: float | None = None
    bound: float | None = None
    before_detection: dict[str, float] = field(default_factory=dict)
    after_detection: dict[str, float] = field(default_factory=dict)
    alerts: dict[str, dict[str, float]] = field(default_factory=dict)  # alert -> state -> first
    expected_alerts: list[str] = field(default_factory=list)
    alert_marks: list[tuple[float, str]] = field(default_factory=list)
    alerts_due: list[str] = field(default_factory=list)  # expected alerts that had time to fire
    events: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    spark_view: list[tuple[float, int | None, int | None, int | None]] = field(default_factory=list)
    # the consumers' own COMMIT_BACK and REPLAY lines (devenv.fleet_consumer): (epoch, line)
    commits_back: list[tuple[float, str]] = field(default_factory=list)

    @property
    def delay(self) -> float | None:
        return None if self.detected is None or self.turn is None else self.detected - self.turn

    @property
    def within_bound(self) -> bool:
        return self.delay is not None and self.bound is not None and self.delay <= self.bound


def _episodes(group: str, samples: list[tuple[float, float, str, str, str]]) -> list[Episode]:
    """Consecutive samples with the same wrong status (and the same truth) as one episode."""
    out: list[Episode] = []
    for t, w, st, reason, expected in samples:
        last = out[-1] if out else None
        if last and last.status == st and last.expected == expected and t - last.end < MAX_SAMPLE_WEIGHT:
            last.end = t + w
        else:
            out.append(Episode(group, st, t, t + w, reason, expected))
    return out


def _spark_then(r: GroupResult, t: float) -> str:
    """Spark's own offsets and the listener's near ``t``: did the query or its reports lag?"""
    near = [v for v in r.spark_view if abs(v[0] - t) <= 5]
    if not near:
        return ""
    _t, own_end, own_latest, heard = min(near, key=lambda v: abs(v[0] - t))
    return (f" (Spark's own last progress then: end offsets {own_end}, latest {own_latest}; "
            f"the listener's end offsets {heard})")


# Lag alerts wait for the lag itself, not for the status: (max lag seconds the shipped rule
# asks for, seconds the expression then still needs) before its ``for:`` starts.
# KafkaConsumerGroupLagGrowing: min_over_time(max_lag_seconds[5m]) > 60.
LAG_ALERT_LEAD = {"KafkaConsumerGroupLagHigh": (600.0, 0.0), "KafkaConsumerGroupLagGrowing": (60.0, 300.0)}


def _alert_due(a: str, r: GroupResult, tl: list[tuple[float, str, str]],
               lags: list[tuple[float, Any, Any, Any]], hold: float) -> float | None:
    """When an expected alert must fire: a lag alert ``hold`` (its ``for:`` and two
    evaluations) after the group's max lag seconds passed the rule's threshold; any other
    ``hold`` after the group started showing the expected status, if it showed it that
    long without a break (a wedged share consumer leaves its group after
    max.poll.interval.ms: ``stalled`` ends, ``stopped`` follows). None: never."""
    if r.detected is None:
        return None
    if a in LAG_ALERT_LEAD:
        above, extra = LAG_ALERT_LEAD[a]
        t = next((t for t, _off, secs, _m in lags
                  if t >= r.detected and secs is not None and secs > above), None)
        return None if t is None else t + extra + hold
    start = None
    for t, st, _reason in tl:
        if t < r.detected or st != r.expect:
            start = None
            continue
        start = t if start is None else start
        if t - start >= hold:
            return start + hold
    return None


def evaluate(ws: list[Workload], rec: Recorder, p: Params, t_end: float,
             alerts: list[dict[str, Any]], rule_for: dict[str, float] | None = None) -> list[GroupResult]:
    results = []
    for w in ws:
        changes = w.truth(p)
        r = GroupResult(w.group, w.kind, w.gtype, w.healthy, w.expect, w.description, changes,
                        expected_alerts=list(w.expected_alerts()), alert_marks=list(w.alert_marks),
                        events=dict(w.events), notes=list(w.notes),
                        spark_view=list(getattr(w, "spark_view", [])),
                        commits_back=sorted((t, line) for pr in w.procs for t, line in list(pr.lines)
                                            if line.startswith(COMMIT_EVIDENCE)))
        tl = [s for s in rec.timeline.get(w.group, []) if s[0] <= t_end]
        weighted = [(t, min(MAX_SAMPLE_WEIGHT, (tl[i + 1][0] if i + 1 < len(tl) else t_end) - t), st, rs)
                    for i, (t, st, rs) in enumerate(tl)]
        wrong: list[tuple[float, float, str, str, str]] = []
        for i, ch in enumerate(changes):
            end = changes[i + 1].t if i + 1 < len(changes) else t_end
            seg = [s for s in weighted if ch.t <= s[0] < end]
            if ch.expect is None:
                continue
            r.samples += len(seg)
            r.judged_seconds += sum(s[1] for s in seg)
            r.absent_seconds += sum(s[1] for s in seg if s[2] == "absent")
            if ch.expect == "ok":
                wrong += [(*s, "ok") for s in seg if s[2] not in ("ok", "absent")]
                continue
            r.turn, r.bound = ch.t, ch.bound
            hit = next((s for s in seg if s[2] == ch.expect), None)
            r.detected = hit[0] if hit else None
            for s in seg:
                if s[2] in (ch.expect, "absent"):
                    continue
                if hit is None or s[0] < hit[0]:
                    if s[2] != "ok":  # ok before detection is the detection delay
                        r.before_detection[s[2]] = r.before_detection.get(s[2], 0.0) + s[1]
                        wrong.append((*s, ch.expect))
                else:
                    r.after_detection[s[2]] = r.after_detection.get(s[2], 0.0) + s[1]
                    if s[2] != "ok":
                        wrong.append((*s, ch.expect))
        r.wrong = _episodes(w.group, sorted(wrong))
        for a in alerts:
            if a["group"] == w.group:
                d = r.alerts.setdefault(a["alert"], {})
                d[a["state"]] = min(d.get(a["state"], math.inf), a["first"])
        # An expected alert is due once its condition held for its `for:` plus two evaluations
        # (_alert_due); an alert whose due time is past the run's end is not judged.
        rule_for = rule_for or {}
        for a in r.expected_alerts:
            due = _alert_due(a, r, tl, rec.lags.get(w.group, []), rule_for.get(a, 0) + 2 * p.interval)
            if due is not None and due <= t_end:
                r.alerts_due.append(a)
        for t, a in r.alert_marks:
            if t + rule_for.get(a, 0) + 2 * p.interval <= t_end:
                r.alerts_due.append(a)
        results.append(r)
    return results


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]


def _fmt(v: float | None, nd: int = 1) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


STATUS_ORDER = ("lagging", "stalled", "livelocked", "stopped", "rewind", "error")


def summarize(results: list[GroupResult]) -> dict[str, Any]:
    per: dict[str, dict[str, Any]] = {}
    for st in STATUS_ORDER:
        bad = [r for r in results if not r.healthy and r.expect == st and r.turn is not None]
        delays = [r.delay for r in bad if r.delay is not None]
        fp = {r.group: sum(e.seconds for e in r.wrong if e.status == st) for r in results}
        fp_h = [(r.group, fp[r.group]) for r in results if r.healthy]
        fp_b = [(r.group, fp[r.group]) for r in results if not r.healthy]
        per[st] = {
            "bad_groups": len(bad),
            "tp": sum(1 for r in bad if r.detected is not None),
            "fn": sum(1 for r in bad if r.detected is None),
            "late": [r.group for r in bad if r.detected is not None and not r.within_bound],
            "fp_groups_healthy": sorted(g for g, s in fp_h if s > 0),
            "fp_seconds_healthy": sum(s for _g, s in fp_h),
            "fp_groups_bad": sorted(g for g, s in fp_b if s > 0),
            "fp_seconds_bad": sum(s for _g, s in fp_b),
            "p50": _pct(delays, 0.5), "p95": _pct(delays, 0.95), "max": max(delays) if delays else None,
            "bounds": sorted({round(r.bound or 0, 1) for r in bad}),
        }
    healthy = [r for r in results if r.healthy]
    return {
        "per_status": per,
        "healthy_groups": len(healthy),
        "healthy_judged_seconds": sum(r.judged_seconds for r in healthy),
        "healthy_wrong_seconds": sum(e.seconds for r in healthy for e in r.wrong),
        "healthy_wrong_groups": sorted(r.group for r in healthy if r.wrong),
        "healthy_absent_seconds": sum(r.absent_seconds for r in healthy),
        "bad_groups": len(results) - len(healthy),
    }


# -- report -------------------------------------------------------------------------------------

def _by_error(down: list[tuple[float, str]]) -> dict[str, list[float]]:
    """When lagwatch said the cluster was down, grouped by what it said."""
    out: dict[str, list[float]] = {}
    for t, err in down:
        out.setdefault(err or "no error given", []).append(t)
    return out


@dataclass(frozen=True)
class _Times:
    """How the report writes a run's times (seconds after t0) and groups (without the prefix)."""

    t0: float
    t_end: float
    prefix: str

    def rel(self, t: float | None) -> str:
        return "–" if t is None else f"{t - self.t0:.0f}"

    def short(self, g: str) -> str:
        return g[len(self.prefix) + 1:] if g.startswith(self.prefix + "-") else g


def report(opts: Options, results: list[GroupResult], summary: dict[str, Any], faults: list[Fault],
           rules_note: str, alerts: list[dict[str, Any]], t0: float, t_end: float,
           rec: Recorder, harness_notes: list[str], prefix: str, code: str = "") -> str:
    tm = _Times(t0, t_end, prefix)
    lines = _report_head(opts, results, summary, faults, rules_note, tm, rec, code or code_state())
    lines += _report_statuses(summary)
    lines += _report_groups(results, tm)
    lines += _report_alerts(results, alerts, tm)
    lines += _report_episodes(results, faults, tm)
    lines += _report_consumers(results, tm)
    lines += [f"Harness: {n}" for n in harness_notes]
    return "\n".join(lines) + "\n"


def _report_head(opts: Options, results: list[GroupResult], summary: dict[str, Any], faults: list[Fault],
                 rules_note: str, tm: _Times, rec: Recorder, code: str) -> list[str]:
    """The run: its length and fleet, the code and settings, the sampling cycles, the faults."""
    rel, p = tm.rel, opts.params
    lines: list[str] = []
    types = Counter(r.gtype for r in results)
    lines.append(f"### Fleet run: {(tm.t_end - tm.t0) / 60:.1f} min, {len(results)} groups "
             f"({summary['healthy_groups']} healthy, {summary['bad_groups']} bad; "
             + ", ".join(f"{n} {t}" for t, n in sorted(types.items())) + f"), {opts.brokers} broker(s)")
    lines.append("")
    lines.append(f"Exporter code: {code}.")
    lines.append(f"Exporter: interval {p.interval:g} s, stall-after {p.stall_after:g} s, livelock-after "
             f"{p.livelock_after:g} s, lag-seconds {p.lag_seconds:g} s (window 600 s). Bounds = "
             f"threshold + 2 cycles + {p.margin:g} s margin. Alert rules: {rules_note}.")
    durs = [d for _t, _u, _a, d in rec.cluster if d is not None]
    ages = [a for _t, _u, a, _d in rec.cluster if a is not None]
    if durs:
        lines.append(f"Sampling cycle {_fmt(_pct(durs, 0.5), 2)} s median, {_fmt(max(durs), 2)} s max; "
                 f"data age max {_fmt(max(ages) if ages else None)} s; "
                 f"{sum(1 for _t, up, _a, _d in rec.cluster if not up)} readings with lagwatch_up 0"
                 + "".join(f"; {rel(min(ts))}–{rel(max(ts))} s: {err[:200]}"
                           for err, ts in _by_error(rec.down).items()) + ".")
    if faults:
        lines.append("Faults: " + "; ".join(f"{f.name} of broker {f.node} at {rel(f.start)} s, back at "
                                         f"{rel(f.end)} s ({f.detail})" for f in faults) + ".")
    lines.append("")
    return lines


def _report_statuses(summary: dict[str, Any]) -> list[str]:
    """Per status: detections, misses, false positives, delays; then the healthy groups."""
    lines = ["| status | bad groups | detected (TP) | missed (FN) | late (> bound) | false positives: "
             "healthy groups (s) | wrong status on bad groups (s) | detection delay p50 / p95 / max (s) | "
             "bound (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for st, s in summary["per_status"].items():
        if not s["bad_groups"] and not s["fp_groups_healthy"] and not s["fp_groups_bad"]:
            continue
        lines.append(f"| `{st}` | {s['bad_groups']} | {s['tp']} | {s['fn']} | {len(s['late'])} | "
                 f"{len(s['fp_groups_healthy'])} ({s['fp_seconds_healthy']:.0f}) | "
                 f"{len(s['fp_groups_bad'])} ({s['fp_seconds_bad']:.0f}) | "
                 f"{_fmt(s['p50'])} / {_fmt(s['p95'])} / {_fmt(s['max'])} | "
                 f"{', '.join(f'{b:g}' for b in s['bounds']) or '–'} |")
    lines.append(f"| healthy (`ok`) | {summary['healthy_groups']} groups, "
             f"{summary['healthy_judged_seconds'] / 60:.0f} group-minutes judged | | | | "
             f"{len(summary['healthy_wrong_groups'])} ({summary['healthy_wrong_seconds']:.0f} s in a wrong "
             f"status) | | | |")
    lines.append("")
    return lines


def _report_groups(results: list[GroupResult], tm: _Times) -> list[str]:
    """One row per group: its truth, when it turned, when lagwatch saw it, its alerts."""
    rel = tm.rel
    lines = ["| group | type | truth | behaviour | turned at (s) | detected after (s) | bound (s) | "
             "wrong statuses (s) | alerts (first firing, s after turn) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (not r.healthy, r.kind, r.group)):
        wrong = Counter()
        for e in r.wrong:
            wrong[e.status] += e.seconds
        wrong_txt = ", ".join(f"{s} {v:.0f}" for s, v in wrong.items()) or "–"
        fired = _group_alerts(r, tm.t0)
        delay = "missed" if r.turn is not None and r.detected is None else _fmt(r.delay)
        if r.turn is None and not r.healthy:
            delay = "never turned"
        truth = "ok" if r.healthy else r.expect
        lines.append(f"| {tm.short(r.group)} | {r.gtype} | {truth} | {r.description} | "
                 f"{rel(r.turn) if not r.healthy else '–'} | {delay if not r.healthy else '–'} | "
                 f"{_fmt(r.bound) if not r.healthy else '–'} | {wrong_txt} | {'; '.join(fired) or '–'} |")
    lines.append("")
    return lines


def _group_alerts(r: GroupResult, t0: float) -> list[str]:
    """A group's alerts: first firing after its turn, pending only, and for a bad group the
    alerts due that are missing."""
    fired = []
    for a, states in sorted(r.alerts.items()):
        if "firing" in states:
            ref = r.turn if r.turn is not None else t0
            fired.append(f"{a.replace('KafkaConsumer', '')} {states['firing'] - ref:+.0f}")
        elif "pending" in states:
            fired.append(f"{a.replace('KafkaConsumer', '')} (pending only)")
    if not r.healthy:
        for t, a in r.alert_marks:
            if "firing" in r.alerts.get(a, {}):
                short_a = a.replace("KafkaConsumer", "")
                fired.append(f"({short_a} {r.alerts[a]['firing'] - t:+.0f} after deletion)")
        firing = {a for a, st in r.alerts.items() if "firing" in st}
        due = [a for a in r.alerts_due if a in r.expected_alerts]
        if due and not firing & set(due):
            fired.append("MISSING " + "/".join(m.replace("KafkaConsumer", "") for m in due))
        elif r.expected_alerts and not firing & set(r.expected_alerts):
            fired.append("(run ended before " + "/".join(m.replace("KafkaConsumer", "")
                                                          for m in r.expected_alerts) + " was due)")
        for _t, a in r.alert_marks:
            if a in r.alerts_due and a not in firing:
                fired.append(f"MISSING {a.replace('KafkaConsumer', '')}")
    return fired


def _report_alerts(results: list[GroupResult], alerts: list[dict[str, Any]], tm: _Times) -> list[str]:
    """Per alert: the groups it fired for, bad, healthy, pending only, or without a group."""
    short = tm.short
    healthy = {r.group for r in results if r.healthy}
    bad = {r.group for r in results if not r.healthy}
    by_alert: dict[str, dict[str, set[str]]] = {}
    for a in alerts:
        d = by_alert.setdefault(a["alert"], {"bad": set(), "healthy": set(), "healthy_pending": set(),
                                             "other": set()})
        if a["group"] in bad and a["state"] == "firing":
            d["bad"].add(short(a["group"]))
        elif a["group"] in healthy:
            d["healthy" if a["state"] == "firing" else "healthy_pending"].add(short(a["group"]))
        elif not a["group"] and a["state"] == "firing":
            d["other"].add(a["labels"].get("cluster") or a["labels"].get("instance") or "-")
    lines = ["| alert | fired for bad groups | fired for HEALTHY groups | pending only, healthy groups | "
             "fired without a group label |", "|---|---|---|---|---|"]
    for name in sorted(by_alert):
        d = by_alert[name]
        lines.append(f"| {name} | {', '.join(sorted(d['bad'])) or '–'} | "
                     f"{', '.join(sorted(d['healthy'])) or '–'} | "
                 f"{', '.join(sorted(d['healthy_pending'] - d['healthy'])) or '–'} | "
                 f"{', '.join(sorted(d['other'])) or '–'} |")
    if not by_alert:
        lines.append("| (none) | | | | |")
    lines.append("")
    return lines


def _report_episodes(results: list[GroupResult], faults: list[Fault], tm: _Times) -> list[str]:
    """Every wrong status seen, with the fault it came during or after."""
    eps = sorted((e for r in results for e in r.wrong), key=lambda e: e.start)
    if not eps:
        return []
    lines = ["Wrong statuses seen (time after start, group, status for how long, lagwatch's reason):", ""]
    for e in eps:
        tag = ""
        for f in faults:
            if f.start - 5 <= e.start <= (f.end or tm.t_end) + 60:
                tag = f" [during/after {f.name.split(' (')[0]}]"
        r = next(r for r in results if r.group == e.group)
        what = "healthy" if r.healthy else f"truth {r.expect}"
        lines.append(f"* {tm.rel(e.start)} s {tm.short(e.group)} ({what}): `{e.status}` for {e.seconds:.0f} s"
                 f"{tag}: {e.reason[:300]}{_spark_then(r, e.start)}")
    lines.append("")
    return lines


def _report_consumers(results: list[GroupResult], tm: _Times) -> list[str]:
    """What the consumers said themselves (commits going back, partitions lost), and the
    groups absent from lagwatch's view."""
    rel, short = tm.rel, tm.short
    lines: list[str] = []
    backs = [(t, short(r.group), line) for r in results for t, line in r.commits_back]
    if backs:
        lines.append("The consumers' own view of their committed offsets going backwards (COMMIT_BACK "
                     "partition from to: the broker acknowledged a lower commit after a higher one; "
                     "REPLAY partition offset acknowledged: records below an acknowledged commit "
                     "delivered again):")
        lines.append("")
        for t, g, line in sorted(backs)[:60]:
            word, _epoch, *rest = line.split()
            lines.append(f"* {rel(t)} s {g}: {' '.join([word, *rest])}")
        if len(backs) > 60:
            lines.append(f"* ... {len(backs) - 60} more")
        lines.append("")
    losses = [(c.t, short(r.group), next((d.t for d in r.changes[i + 1:] if d.expect == "ok"), None))
              for r in results for i, c in enumerate(r.changes) if c.note == fleet_workloads.LOST]
    if losses:
        lines.append("Consumers whose partitions librdkafka took away (LOST: the session timed out), "
                     "not judged until they caught up again:")
        lines.append("")
        for t, g, back in sorted(losses):
            until = f"until {rel(back)} s" if back is not None else "until the end"
            lines.append(f"* {rel(t)} s {g}: lost its partitions, not judged {until}")
        lines.append("")
    absent = [(short(r.group), r.absent_seconds) for r in results if r.absent_seconds > 0]
    if absent:
        lines.append("Absent from the exporter's view while judged: "
                 + ", ".join(f"{g} {s:.0f} s" for g, s in absent) + ".")
    return lines


# -- checks -------------------------------------------------------------------------------------

# Every kind of group build_fleet makes in both profiles (Spark and JVM ones when enabled).
HEALTHY_KINDS = {"steady", "bursty", "idle", "autocommit", "scaling", "transactional", "compacted",
                 "rolling deploy"}
BAD_KINDS = {"slow", "nocommit", "wedged", "max.poll loop", "killed", "rewind", "retention"}
MIN_BAD_WITH_ALERT_DUE = 8  # fewer: the run ended before most alerts could fire


def _coverage(opts: Options, results: list[GroupResult]) -> list[str]:
    """Kinds and group types the fleet should have had but did not."""
    healthy, bad = set(HEALTHY_KINDS), set(BAD_KINDS)
    gtypes = {"classic", "consumer"}
    if opts.jvm:
        healthy |= {"streams", "share"}
        gtypes |= {"streams", "share"}
    if opts.spark:
        healthy.add("spark")
        bad.add("spark")
        gtypes.add("spark")
    out = []
    for what, want, got in (
            ("healthy kinds", healthy, {r.kind for r in results if r.healthy}),
            ("bad kinds", bad, {r.kind for r in results if not r.healthy}),
            ("group types", gtypes, {r.gtype for r in results})):
        if want - got:
            out.append(f"{what} missing from the fleet: {', '.join(sorted(want - got))}")
    return out


def _alert_failures(results: list[GroupResult]) -> list[str]:
    """Bad groups whose expected alert was due and did not fire (an alert is due once the status
    or the event was seen, plus its `for:`, plus two evaluations before the run's end)."""
    out = []
    for r in results:
        if r.healthy:
            continue
        fired = {a for a, states in r.alerts.items() if "firing" in states}
        due = [a for a in r.alerts_due if a in r.expected_alerts]
        if due and not fired & set(due):
            out.append(f"{r.group} ({r.expect}): none of {due} fired; saw {sorted(r.alerts)}")
        out += [f"{r.group}: {a} did not fire after the records were deleted" for _t, a in r.alert_marks
                if a in r.alerts_due and a not in fired]
    due_groups = sum(1 for r in results if not r.healthy and r.alerts_due)
    if due_groups < MIN_BAD_WITH_ALERT_DUE:
        out.append(f"alerts were due for only {due_groups} bad groups (< {MIN_BAD_WITH_ALERT_DUE}): "
                   "the run was too short to judge them")
    return out


def checks(opts: Options, results: list[GroupResult], harness_notes: list[str],
           alerts: list[dict[str, Any]]) -> list[str]:
    """What the run got wrong, one line each; empty when lagwatch and the harness were right."""
    out = _coverage(opts, results)
    out += [f"harness: {n[:300]}" for n in harness_notes]
    out += [f"{r.group}: never turned bad" for r in results if not r.healthy and r.turn is None]
    out += [f"{r.group}: never judged (no sample while its truth was known)" for r in results
            if r.samples == 0]
    out += [f"{e.group} (healthy): {e.status} for {e.seconds:.0f} s: {e.reason[:200]}"
            for r in results if r.healthy for e in r.wrong]
    out += [f"{e.group} (bad, before its turn): {e.status} for {e.seconds:.0f} s: {e.reason[:200]}"
            for r in results if not r.healthy for e in r.wrong if r.turn is None or e.start < r.turn]
    out += [f"{r.group} ({r.expect}): {'missed' if r.delay is None else f'{r.delay:.1f} s'} > "
            f"bound {r.bound or 0:.1f} s" for r in results
            if not r.healthy and r.turn is not None and not r.within_bound]
    healthy = {r.group for r in results if r.healthy}
    out += [f"{a['group']} (healthy): {a['alert']} fired" for a in alerts
            if a["group"] in healthy and a["state"] == "firing"]
    return out + _alert_failures(results)


def checks_text(failures: list[str]) -> str:
    if not failures:
        return "\nChecks: all passed.\n"
    return f"\nChecks: {len(failures)} FAILED:\n\n" + "".join(f"* {f}\n" for f in failures)


# -- the recording ---------------------------------------------------------------------------

def _marks_of(w: Workload, p: Params, t0: float, role: str) -> list[recording.Mark]:
    changes = w.truth(p)  # first: a JVM group's or Spark query's turn is read here
    events = [("HEALTHY" if w.healthy else "BAD", t0)]
    if (ready := w.ready_time()) is not None:
        events.append(("READY", ready))
    for i, c in enumerate(changes):
        if c.expect is None:
            events.append(("UNJUDGED", c.t))
        elif c.expect != "ok":
            events += [(f"TURNED:{c.expect}", c.t), (f"BOUND:{c.bound:g}", c.t)]
        elif i > 0:  # the first ok is READY's warm-up over; a later one is ok again
            events.append(("OK", c.t))
    return [recording.Mark(role, w.group, ev, round(at, 3)) for ev, at in events]


def fixture_marks(ws: list[Workload], p: Params, t0: float, prefix: str) -> list[recording.Mark]:
    """The fleet's ground truth as marks (the module docstring lists them)."""
    marks = [m for w in ws for m in _marks_of(w, p, t0, w.group[len(prefix) + 1:])]
    return sorted(marks, key=lambda m: (m.role, m.at))


def write_recording(path: str, recorded: Path, ws: list[Workload], p: Params, t0: float, t_end: float,
                    prefix: str) -> str:
    """The fixture of ``--record``: the exporter's cycles up to ``t_end`` and the marks."""
    rec = recording.load(recorded)
    if not rec.cycles:
        raise recording.RecordingError(f"{recorded}: the exporter recorded no cycle")
    marks = fixture_marks(ws, p, t0, prefix)
    recording.write_fixture(path, recording.fixture_lines(rec, marks, 0.0, t_end))
    kept = sum(1 for c in rec.cycles if c.now <= t_end)
    return f"{kept} cycles and {len(marks)} marks, {Path(path).stat().st_size / 1e6:.2f} MB"


# -- the run ------------------------------------------------------------------------------------

@dataclass
class RunResult:
    options: Options
    results: list[GroupResult]
    summary: dict[str, Any]
    faults: list[Fault]
    alerts: list[dict[str, Any]]
    report: str
    rules_note: str
    t0: float
    t_end: float
    harness_notes: list[str]
    failures: list[str] = field(default_factory=list)  # checks() of the run

    def healthy_alerts(self, state: str = "firing") -> list[dict[str, Any]]:
        healthy = {r.group for r in self.results if r.healthy}
        return [a for a in self.alerts if a["group"] in healthy and a["state"] == state]


def code_state() -> str:
    """The exporter code a run measured: commit, plus a digest of uncommitted changes to it."""
    import hashlib
    import subprocess

    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else ""
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    diff = git("diff", "HEAD", "--", "exporter", "lagwatch_client", "spark_metrics")
    if not diff:
        return f"commit {head}"
    changed = git("diff", "HEAD", "--stat", "--", "exporter", "lagwatch_client", "spark_metrics").splitlines()
    return (f"commit {head} + uncommitted changes (sha256 {hashlib.sha256(diff.encode()).hexdigest()[:10]}: "
            f"{changed[-1].strip() if changed else ''})")


def _exporter_config(workdir: Path, bootstrap: str, opts: Options) -> Path:
    cfg = {"interval": opts.interval, "request_timeout": 10,
           "thresholds": {"stall_after": opts.stall_after, "livelock_after": opts.livelock_after,
                          "lag_seconds": opts.lag_seconds, "window": 600, "report_stale_after": 60,
                          "report_expiry": 900},
           "clusters": [{"name": CLUSTER, "bootstrap_servers": bootstrap}]}
    if opts.record:
        cfg["record_dir"] = str(workdir)  # the exporter writes workdir/<cluster>.jsonl
    path = workdir / "lagwatch.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(opts: Options) -> RunResult:
    r = _Run(opts)
    try:
        r.start()
        r.loop(r.begin())
        return r.finish()
    finally:
        r.close()


Action = tuple[float, str, Any]  # (seconds after t0, label, fn(ctx))


class _Run:
    """One fleet run: its processes, the fleet, the recorder and what the harness noted."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.workdir = Path(tempfile.mkdtemp(prefix="lagwatch-fleet-"))
        (self.workdir / "logs").mkdir()
        self.prefix = f"f{uuid.uuid4().hex[:4]}"
        self.harness_notes: list[str] = []
        self.cluster = KafkaCluster(brokers_count=opts.brokers)
        self.driver = SparkDriver() if opts.spark else None
        self.exp: Any = None
        self.prom: Any = None
        self.ws: list[Workload] = []
        self.producers: list[Any] = []
        self.faults: list[Fault] = []
        self.threads: list[threading.Thread] = []
        self.run_over = threading.Event()
        self.t0 = 0.0

    def log(self, msg: str) -> None:
        if not self.opts.quiet:
            print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def start(self) -> None:
        """Kafka, the Spark driver, the fleet's topics, the exporter, Prometheus, and each
        workload set up (nothing consumes yet)."""
        from tests.support.exporter_proc import ExporterProcess
        from tests.support.prometheus_proc import PrometheusProcess

        opts, cluster, driver = self.opts, self.cluster, self.driver
        self.log(f"starting {opts.brokers} Kafka broker(s); workdir {self.workdir}")
        cluster.start()
        if driver is not None:
            driver.start(cluster)
        self.ws = build_fleet(opts.profile, opts.duration, self.prefix, driver, jvm_bad=opts.jvm_bad)
        if not opts.jvm:
            self.ws = [w for w in self.ws if not isinstance(w, JvmGroup)]
        for w in self.ws:
            w.faults = self.faults  # the same list: the faults as they happen
        create_topics(cluster, topics_of(self.ws))
        self.exp = ExporterProcess(None, config=str(_exporter_config(self.workdir, cluster.bootstrap_servers,
                                                                     opts)))
        self.exp.wait_ready(90)
        self.rules, self.rules_note = rules_file(self.workdir, opts.alert_for_divisor)
        self.prom = PrometheusProcess(self.workdir / "prometheus",
                                      targets={"lagwatch": [f"127.0.0.1:{self.exp.port}"]},
                                      rule_files=[self.rules], scrape_interval=f"{opts.interval:g}s",
                                      evaluation_interval=f"{opts.interval:g}s")
        self.prom.wait_ready(60)
        self.ctx = Ctx(cluster=cluster, t0=0.0, log_dir=self.workdir / "logs", log=self.log)
        for w in self.ws:
            w.setup(self.ctx)
        if driver is not None and any(isinstance(w, SparkQuery) for w in self.ws):
            self.log("waiting for the PySpark driver")
            if driver.get(300) is None:
                self.harness_notes.append(f"Spark driver did not start: {driver.error}; "
                                          "Spark queries left out")
                self.ws = [w for w in self.ws if not isinstance(w, SparkQuery)]
        self.code = code_state()  # what the exporter process just loaded

    def begin(self) -> list[Action]:
        """t0: the recorder, the producers and the workloads that start at once; the other
        starts, the workloads' actions and the broker faults, in time order."""
        opts, ws = self.opts, self.ws
        self.rec = Recorder(self.exp, [w.group for w in ws])
        self.rec.start()
        self.t0 = self.ctx.t0 = time.time()
        self.producers.append(ProducerProcess(self.cluster, topics_of(ws), self.t0))
        self.log(f"fleet of {len(ws)} groups starting (prefix {self.prefix}); run of {opts.duration:.0f} s")
        schedule: list[Action] = []
        for w in ws:
            if w.start_at > 0:
                schedule.append((w.start_at, f"{w.group}: start", lambda c, w=w: w.start(c)))
            else:
                w.start(self.ctx)
                time.sleep(0.75)  # ~40 interpreters and JVMs starting at once overload 2 cores
            schedule += [(t, f"{w.group}: {label}", fn) for t, label, fn in w.actions]
        groups = [w.group for w in ws if w.gtype in ("classic", "consumer") and w.healthy]
        cluster, faults, log = self.cluster, self.faults, self.log
        if opts.brokers >= 3 and opts.faults:
            schedule.append((0.45 * opts.duration, "broker restart",
                             lambda c: broker_restart(cluster, groups, faults, log)))
            schedule.append((0.70 * opts.duration, "coordinator failover",
                             lambda c: coordinator_failover(cluster, groups, faults, log)))
        schedule.sort(key=lambda s: s[0])
        return schedule

    def run_action(self, label: str, fn: Any) -> None:
        try:
            fn(self.ctx)
        except Exception:  # noqa: BLE001 - the run goes on; the report says so
            self.harness_notes.append(f"action {label} failed: {traceback.format_exc(limit=3)}")
            self.log(f"action {label} FAILED")
        # Children die with the *thread* that started them (PR_SET_PDEATHSIG): a thread that
        # spawned consumers or restarted a broker lives until the run is over.
        self.run_over.wait()

    def checkpoint(self) -> None:
        """What was recorded so far, in case the harness dies (--json PATH.partial)."""
        if not self.opts.json_out:
            return
        rec = self.rec
        with contextlib.suppress(Exception):
            Path(self.opts.json_out + ".partial").write_text(json.dumps(
                {"t0": self.t0, "now": time.time(), "faults": [asdict(f) for f in self.faults],
                 "events": {w.group: w.events for w in self.ws}, "timeline": rec.timeline, "down": rec.down,
                 "lags": rec.lags, "notes": self.harness_notes}, default=str))

    def loop(self, schedule: list[Action]) -> None:
        """Run the schedule to the run's end, then until every bad group that turned has been
        seen or its bound has passed (at most 120 s more)."""
        t0 = self.t0
        next_progress, next_checkpoint, deadline = t0 + 30, t0 + 60, t0 + self.opts.duration
        while True:
            now = time.time()
            while schedule and schedule[0][0] <= now - t0:
                _t, label, fn = schedule.pop(0)
                th = threading.Thread(target=self.run_action, args=(label, fn), daemon=True)
                th.start()
                self.threads.append(th)
            for w in self.ws:
                for msg in w.check():
                    self.harness_notes.append(msg)
                    self.log("HARNESS: " + msg)
            if now >= next_checkpoint:
                next_checkpoint += 60
                self.checkpoint()
            if now >= next_progress:
                next_progress += 30
                self.progress(now)
            if now >= deadline and not schedule and (not self.pending() or now > deadline + 120):
                break
            time.sleep(0.5)

    def progress(self, now: float) -> None:
        """A log line: statuses counted, and the healthy groups that are not ok."""
        cur = self.rec.current()
        counts = Counter(cur.values())
        off = [f"{w.group[len(self.prefix) + 1:]}={cur.get(w.group, '?')}" for w in self.ws
               if w.healthy and cur.get(w.group, "ok") != "ok" and w.start_at <= now - self.t0 - 10]
        self.log(f"t={now - self.t0:.0f}s " + " ".join(f"{k}:{v}" for k, v in sorted(counts.items()))
                 + (f" | healthy not ok: {' '.join(off)}" if off else ""))

    def pending(self) -> list[str]:
        """The bad groups that turned and still have time (bounded) to be seen."""
        pending = []
        cur_t = time.time()
        for w in self.ws:
            ch = [c for c in w.truth(self.opts.params) if c.bound is not None]
            for c in ch:
                seen = any(t >= c.t and st == c.expect for t, st, _r in self.rec.timeline[w.group])
                if not seen and cur_t < c.t + c.bound + 2 * self.opts.interval:
                    pending.append(w.group)
        return pending

    def finish(self) -> RunResult:
        """The run judged: alerts read, results, the recording, the report and its checks."""
        opts, rec, t0, notes = self.opts, self.rec, self.t0, self.harness_notes
        t_end = time.time()
        rec.stop_flag.set()
        rec.join(5)
        alerts = []
        try:
            alerts = alert_timeline(self.prom, t0, t_end, opts.interval)
        except Exception as e:  # noqa: BLE001
            notes.append(f"reading ALERTS from Prometheus failed: {e}")
        results = evaluate(self.ws, rec, opts.params, t_end, alerts, rule_for_seconds(self.rules))
        if opts.record:
            try:
                self.log(f"recording {opts.record}: " + write_recording(
                    opts.record, self.workdir / f"{CLUSTER}.jsonl", self.ws, opts.params, t0, t_end,
                    self.prefix))
            except Exception:  # noqa: BLE001 - the run's report stands; its checks say so
                notes.append(f"writing the recording failed: {traceback.format_exc(limit=3)}")
        summary = summarize(results)
        failures = checks(opts, results, notes, alerts)
        text = report(opts, results, summary, self.faults, self.rules_note, alerts, t0, t_end, rec,
                      notes, self.prefix, self.code) + checks_text(failures)
        if opts.out:
            Path(opts.out).write_text(text)
        if opts.json_out:
            Path(opts.json_out).write_text(json.dumps(
                {"summary": summary, "results": [asdict(r) for r in results],
                 "faults": [asdict(f) for f in self.faults], "alerts": alerts, "t0": t0, "t_end": t_end,
                 "notes": notes, "options": asdict(opts), "timeline": rec.timeline, "down": rec.down,
                 "lags": rec.lags}, default=str))
        return RunResult(opts, results, summary, self.faults, alerts, text, self.rules_note, t0, t_end,
                         notes, failures)

    def close(self) -> None:
        """Every process of the run stopped, whatever state it got to."""
        for w in self.ws:
            with contextlib.suppress(Exception):
                w.stop()
        for pr in self.producers:
            pr.stop()
        if self.driver is not None:
            self.driver.close()
        if self.prom is not None:
            self.prom.stop()
        if self.exp is not None:
            self._stop_exporter()
        self.cluster.stop()
        self.run_over.set()
        for th in self.threads:
            th.join(1)
        if not self.opts.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            self.log(f"kept {self.workdir}")

    def _stop_exporter(self) -> None:
        exp, opts = self.exp, self.opts
        exp.stop()
        with contextlib.suppress(OSError):
            if opts.keep_workdir:
                shutil.copy(exp.log.name, self.workdir / "logs" / "exporter.log")
            if opts.json_out:  # the worker's crash stacks (faulthandler) are in it
                shutil.copy(exp.log.name, opts.json_out + ".exporter.log")
            Path(exp.log.name).unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet",
                                 description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--duration", type=float, default=1800, help="seconds (default 30 min)")
    ap.add_argument("--interval", type=float, default=3.0, help="exporter sampling interval, seconds")
    ap.add_argument("--stall-after", type=float, default=30.0)
    ap.add_argument("--livelock-after", type=float, default=30.0)
    ap.add_argument("--lag-seconds", type=float, default=600.0)
    ap.add_argument("--brokers", type=int, default=3, help="3 adds the fault phase")
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--profile", choices=["full", "small"], default=None,
                    help="full (~40 groups; default from 15 min) or small (one group per kind)")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--no-jvm", action="store_true")
    ap.add_argument("--alert-for-divisor", type=float, default=None,
                    help="load a copy of the rules with every for: divided by this (short runs)")
    ap.add_argument("--margin", type=float, default=5.0, help="seconds added to every detection bound")
    ap.add_argument("--out", help="write the Markdown report here")
    ap.add_argument("--json", dest="json_out", help="write the raw result here")
    ap.add_argument("--keep-workdir", action="store_true")
    ap.add_argument("--record", metavar="FILE",
                    help="write the exporter's inputs and the ground truth here, an xz replay fixture "
                         "(exporter/recording.py)")
    args = ap.parse_args(argv)
    opts = Options(duration=args.duration, interval=args.interval, stall_after=args.stall_after,
                   livelock_after=args.livelock_after, lag_seconds=args.lag_seconds, brokers=args.brokers,
                   faults=not args.no_faults,
                   profile=args.profile or ("full" if args.duration >= 900 else "small"),
                   spark=not args.no_spark, jvm=not args.no_jvm, alert_for_divisor=args.alert_for_divisor,
                   margin=args.margin, out=args.out, json_out=args.json_out, keep_workdir=args.keep_workdir,
                   record=args.record)
    res = run(opts)
    print()
    print(res.report)
    return 1 if res.failures else 0


if __name__ == "__main__":
    sys.exit(main())

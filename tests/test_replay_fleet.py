"""The 5-minute fleet of ``python -m bench.fleet`` (profile ``small``: one broker, interval 3 s,
stall-after and livelock-after 30 s), recorded once with ``--record`` and replayed here
through the real Evaluator: the fleet's ground truth judged cycle by cycle, the same on any
machine at any load.

Made with (about 7 minutes, needs `make setup`)::

    .venv/bin/python -m bench.fleet --duration 300 --brokers 1 --no-faults --profile small \\
        --alert-for-divisor 10 --interval 3 --stall-after 30 --livelock-after 30 \\
        --record tests/recordings/fleet-small.jsonl.xz

The marks (bench/fleet.py's docstring) carry the fleet's truth: a healthy group must be ``ok``
from two cycles after READY (``Params.warmup_cycles``) to the end; a bad group must be ``ok``
from then until its turn, and show its status within ``ceil(BOUND / interval)`` cycles of the
first cycle at or after TURNED. Every bound is the fleet's own (``Params.bound``: the README's
threshold + 2 cycles + 5 s), counted here in cycles.

Re-recording (after a change to the fleet's workloads; a change to the evaluator needs none)
keeps the roles: they are the group ids without the run's random prefix.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exporter import recording

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).parent / "recordings" / "fleet-small.jsonl.xz"
WARMUP_CYCLES = 2  # devenv.fleet_workloads.Params.warmup_cycles

HEALTHY = ("steady", "steady-848", "bursty", "bursty-tail", "idle", "autocommit", "coop-scale",
           "coop-scale-tail", "kip848-scale", "txn", "compacted-late", "rolling-static", "rolling-surge",
           "streams", "share", "spark", "spark-60s")
BAD = {"slow": "lagging", "retention": "lagging", "nocommit": "stalled", "wedged": "livelocked",
       "maxpoll": "livelocked", "maxpoll-848": "livelocked", "spark-hung": "livelocked",
       "killed": "stopped", "killed-848": "stopped", "rewind": "rewind"}


@dataclass
class Role:
    """One group's ground truth, from its marks (wall-clock seconds)."""

    name: str
    group: str
    healthy: bool
    ready: float | None = None
    turn: float | None = None
    expect: str | None = None
    bound: float | None = None
    unjudged: list[float] = field(default_factory=list)  # the fleet stops judging
    ok_again: list[float] = field(default_factory=list)  # ... and judges `ok` again


def roles_of(rec: recording.Recording) -> dict[str, Role]:
    out: dict[str, Role] = {}
    for m in rec.marks:
        r = out.setdefault(m.role, Role(m.role, m.group, healthy=False))
        word, _, arg = m.event.partition(":")
        if word == "HEALTHY":
            r.healthy = True
        elif word == "READY":
            r.ready = m.at
        elif word == "TURNED":
            r.turn, r.expect = m.at, arg
        elif word == "BOUND":
            r.bound = float(arg)
        elif word == "UNJUDGED":
            r.unjudged.append(m.at)
        elif word == "OK":
            r.ok_again.append(m.at)
    return out


@dataclass
class Fleet:
    rec: recording.Recording
    roles: dict[str, Role]
    tl: recording.Timeline

    def cycles(self, bound: float) -> int:
        return math.ceil(bound / self.rec.interval)


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    rec = recording.load(FIXTURE)
    return Fleet(rec, roles_of(rec), recording.replay(rec))


def explain(f: Fleet, r: Role, tl: recording.Timeline | None = None) -> str:
    """The group's replayed statuses as changes: cycle, seconds after READY, status, reason."""
    tl = tl or f.tl
    ref = r.ready if r.ready is not None else tl.times[0]
    marks = [f"{w} at cycle {tl.cycle_at(t)} ({t - ref:+.1f} s)" for w, t in
             (("READY", r.ready), (f"TURNED:{r.expect}", r.turn)) if t is not None]
    marks += [f"UNJUDGED at cycle {tl.cycle_at(t)}" for t in r.unjudged]
    marks += [f"OK at cycle {tl.cycle_at(t)}" for t in r.ok_again]
    windows = " ".join(f"[{a}, {b})" for a, b in ok_windows(f, r, tl)) or "none"
    lines = [f"{r.name} ({r.group}): {', '.join(marks)}; {len(tl.times)} cycles of "
             f"{f.rec.interval:g} s; ok expected in cycles {windows}"]
    for i, st in tl.changes(r.group):
        why = tl.reasons[r.group][i]
        lines.append(f"  cycle {i:3d} ({tl.times[i] - ref:+7.1f} s) {st}"
                     + (f": {why[0][:160]}" if st != "ok" and why else ""))
    return "\n".join(lines)


def ok_windows(f: Fleet, r: Role, tl: recording.Timeline | None = None) -> list[tuple[int, int]]:
    """[from, to) cycles in which the fleet's truth is `ok`: from READY + the warm-up, and from
    each OK mark, to the next turn or UNJUDGED mark (or the end)."""
    tl = tl or f.tl
    stops = sorted(tl.cycle_at(t) for t in [*r.unjudged, *([r.turn] if r.turn is not None else [])])
    starts = [tl.cycle_at(t) for t in r.ok_again]
    if r.ready is not None:
        starts.append(tl.cycle_at(r.ready) + WARMUP_CYCLES)
    out = []
    for a in sorted(starts):
        b = next((s for s in stops if s >= a), len(tl.times))
        if a < b:
            out.append((a, b))
    return out


def wrong_in(f: Fleet, r: Role, windows: list[tuple[int, int]]) -> list[tuple[int, str]]:
    line = f.tl.statuses.get(r.group, [])
    return [(i, line[i]) for a, b in windows for i in range(a, b) if line[i] not in (None, "ok")]


def delay(f: Fleet, r: Role, tl: recording.Timeline | None = None) -> int | None:
    """Cycles from the first cycle at or after the turn to the first showing the status."""
    tl = tl or f.tl
    assert r.turn is not None and r.expect is not None
    start = tl.cycle_at(r.turn)
    hit = tl.first(r.group, r.expect, start)
    return None if hit is None else hit - start


def test_the_fixture_is_the_small_fleet(fleet: Fleet) -> None:
    head = fleet.rec.header
    assert (head["interval"], head["thresholds"]["stall_after"], head["thresholds"]["livelock_after"]) \
        == (3, 30, 30), head
    assert {n for n, r in fleet.roles.items() if r.healthy} == set(HEALTHY)
    assert {n: r.expect for n, r in fleet.roles.items() if not r.healthy} == BAD
    assert all(r.bound is not None for r in fleet.roles.values() if not r.healthy)
    never = [n for n, r in fleet.roles.items() if r.ready is None and r.turn is None]
    assert never == [], f"never ready, never judged: {never}"
    assert len(fleet.rec.cycles) >= 300 / 3, len(fleet.rec.cycles)


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_group_is_ok_from_ready_to_the_end(fleet: Fleet, name: str) -> None:
    r = fleet.roles[name]
    windows = ok_windows(fleet, r)
    assert windows and windows[-1][1] == len(fleet.tl.times), explain(fleet, r)
    wrong = wrong_in(fleet, r, windows)
    assert wrong == [], f"not ok at cycles {wrong[:10]}\n{explain(fleet, r)}"


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_group_is_ok_while_its_truth_is(fleet: Fleet, name: str) -> None:
    """Before its turn, and once a rewound consumer caught up again (its OK mark)."""
    r = fleet.roles[name]
    wrong = wrong_in(fleet, r, ok_windows(fleet, r))
    assert wrong == [], f"not ok at cycles {wrong[:10]}\n{explain(fleet, r)}"


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_group_detected_within_its_bound(fleet: Fleet, name: str) -> None:
    r = fleet.roles[name]
    assert r.turn is not None and r.bound is not None, f"{name} never turned\n{explain(fleet, r)}"
    limit = fleet.cycles(r.bound)
    got = delay(fleet, r)
    assert got is not None and got <= limit, (
        f"{r.expect} {'never shown' if got is None else f'after {got} cycles'}, bound {limit} cycles "
        f"({r.bound:g} s)\n{explain(fleet, r)}")


def test_a_slower_stall_rule_is_caught_late(fleet: Fleet) -> None:
    """The replay judges the rules, not the run: with stall_after doubled, a stalled group the
    recorded thresholds detect in time is detected late (or not at all)."""
    stalled = [r for r in fleet.roles.values() if r.expect == "stalled"]
    assert stalled
    slower = dataclasses.replace(fleet.rec.thresholds, stall_after=2 * fleet.rec.thresholds.stall_after)
    tl = recording.replay(fleet.rec, thresholds=slower, groups=[r.group for r in stalled])
    late = []
    for r in stalled:
        assert r.bound is not None
        limit, before, after = fleet.cycles(r.bound), delay(fleet, r), delay(fleet, r, tl)
        assert before is not None and before <= limit, explain(fleet, r)
        if after is None or after > limit:
            late.append(r.name)
    assert late, "\n".join(explain(fleet, r, tl) for r in stalled)

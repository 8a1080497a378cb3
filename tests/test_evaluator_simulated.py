"""Seeded random workloads through the real Evaluator, at the fleet's 3 s interval and 30 s
thresholds: healthy batch committers on clumpy, bursty producers (with a partition
changing owner) must stay ``ok`` at every sample; a stuck one must be ``stalled`` in time;
a slow one must stay ``lagging`` through a producer's pauses. The hand-written cases in
test_evaluator_unit.py were found this way; this keeps the search running.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

import pytest

from exporter.config import Thresholds
from exporter.contracts.snapshot import GroupSample, Member, Snapshot
from exporter.evaluate.evaluator import Evaluator
from tests.test_evaluator_unit import MEMBER as A
from tests.test_evaluator_unit import OTHER as B
from tests.test_evaluator_unit import T0, _offsets

pytestmark = pytest.mark.unit

INTERVAL = 3.0
TH = Thresholds(stall_after=30, livelock_after=30, lag_seconds=600, window=600, report_stale_after=30)


def _clumps(r: random.Random, start: float, end: float) -> list[float]:
    """Produce times: clumps of 1-25 records, 0.2-4 s apart (a producer batching unevenly)."""
    out, t = [], start
    while t < end:
        out += [t] * r.randint(1, 25)
        t += r.uniform(0.2, 4)
    return out


def _batch_commits(produced: list[float], until: float = float("inf")) -> list[tuple[float, int]]:
    """A consumer reading at once and committing when a record arrives, 5 s or more after its
    last commit: the tail of each burst waits for the next records."""
    commits, last = [], -1e9
    for i, p in enumerate(produced):
        if p > until:
            break
        if p - last >= 5:
            commits.append((p + 0.05, i + 1))
            last = p
    return commits


@dataclass
class Case:
    """One seed's consumer: when records are produced, its commits (time, offset, owner),
    when watching ends, and its first sample's offset within the interval."""

    produced: list[float]
    commits: list[tuple[float, int, Member]]
    end: float
    phase: float


def _statuses(cases: list[Case]) -> list[list[tuple[float, str]]]:
    """Each case's (time, status) at every sample until its end. The cases run as groups of
    one evaluator, each on a partition of its own, each sampled at its own phase (its times
    shifted by it: the evaluator reads differences of times only), so one evaluate judges
    them all; a case past its end stays in the snapshot and is not read."""
    ev = Evaluator("c", TH, interval=INTERVAL)
    at = [{"ci": 0, "committed": 0, "owner": A, "hw": 0} for _ in cases]
    out: list[list[tuple[float, str]]] = [[] for _ in cases]
    for k in range(math.ceil(max(c.end for c in cases) / INTERVAL)):
        for c, a in zip(cases, at, strict=True):
            t = c.phase + k * INTERVAL
            while a["ci"] < len(c.commits) and c.commits[a["ci"]][0] <= t:
                a["committed"] = max(a["committed"], c.commits[a["ci"]][1])
                a["owner"] = c.commits[a["ci"]][2]
                a["ci"] += 1
            while a["hw"] < len(c.produced) and c.produced[a["hw"]] <= t:
                a["hw"] += 1
        groups = ev.evaluate(_snapshot(T0 + k * INTERVAL, at)).groups
        for i, c in enumerate(cases):
            if (t := c.phase + k * INTERVAL) < c.end:
                out[i].append((t, groups[f"g{i}"].status))
    return out


def _snapshot(taken_at: float, at: list[dict]) -> Snapshot:
    tps = [(f"t{i}", 0) for i in range(len(at))]
    return Snapshot(
        cluster="c", taken_at=taken_at, duration=0.01,
        partitions={tp: _offsets(3, a["hw"]) for tp, a in zip(tps, at, strict=True)},
        groups={f"g{i}": GroupSample(
            group_id=f"g{i}", type="classic", state="stable", coordinator=1,
            members=(dataclasses.replace(a["owner"], assignment=(tp,)),),
            committed={tp: a["committed"]}) for i, (tp, a) in enumerate(zip(tps, at, strict=True))})


def _healthy_scale_in(seed: int) -> Case:
    """One burst read by A; then the partition moves to B, which re-reads A's uncommitted
    tail and commits part of it when its batch fills with other partitions' records."""
    r = random.Random(seed)
    produced = _clumps(r, r.uniform(0, 3), r.uniform(13, 43))
    commits = [(t, c, A) for t, c in _batch_commits(produced)]
    moved_at = produced[-1] + r.uniform(20, 90)
    done = commits[-1][1] if commits else 0
    if done < len(produced) - 1:
        commits.append((moved_at, r.randint(done + 1, len(produced) - 1), B))
    return Case(produced, commits, moved_at + 20, r.uniform(0, INTERVAL))


def _healthy_bursts(seed: int) -> Case:
    """Bursts of 20-40 s every 40-100 s for 400 s, read by one batch committer."""
    r = random.Random(seed)
    produced: list[float] = []
    t = r.uniform(0, 20)
    while t < 400:
        length = r.uniform(20, 40)
        produced += _clumps(r, t, t + length)
        t += length + r.uniform(20, 60)
    return Case(produced, [(t, c, A) for t, c in _batch_commits(produced)], 400, r.uniform(0, INTERVAL))


@pytest.mark.parametrize("scenario", [_healthy_scale_in, _healthy_bursts])
def test_healthy_batch_committers_stay_ok(scenario) -> None:  # noqa: ANN001
    wrong = {}
    for seed, got in enumerate(_statuses([scenario(seed) for seed in range(150)])):
        bad = [(round(t, 1), s) for t, s in got if s != "ok"]
        if bad:
            wrong[seed] = bad[:3]
    assert not wrong, f"{len(wrong)} of 150 healthy scenarios read wrong: {dict(list(wrong.items())[:5])}"


def test_a_stuck_batch_committer_is_stalled_in_time() -> None:
    """Stuck (no more commits) in the middle of steady clumps: stalled stall_after after the
    first records that arrived after its last commit, plus at most the widest gap between
    clumps (4 s) and one interval."""
    cases, lasts = [], []
    for seed in range(100):
        r = random.Random(seed)
        produced = _clumps(r, r.uniform(0, 3), 200)
        commits = [(t, c, A) for t, c in _batch_commits(produced, until=r.uniform(30, 80))]
        lasts.append(commits[-1][0])
        cases.append(Case(produced, commits, 200, r.uniform(0, INTERVAL)))
    delays = []
    for seed, (got, last) in enumerate(zip(_statuses(cases), lasts, strict=True)):
        first_stalled = next((t for t, s in got if s == "stalled"), None)
        assert first_stalled is not None, seed
        assert {s for _t, s in got} <= {"ok", "stalled"}, (seed, got)
        delays.append(first_stalled - last)
    assert max(delays) <= TH.stall_after + 4 + INTERVAL, max(delays)
    assert min(delays) >= TH.stall_after - INTERVAL, min(delays)


def test_a_slow_consumer_stays_lagging_through_short_producer_pauses() -> None:
    """Reading a fifth of what arrives, committing every record; the producer pauses for
    1-3 cycles (under half of stall_after) a few times in its first minute, which the
    consumer reads past minutes later: lagging from its first minute on. (Not covered: a
    new pause in the very cycle the consumer reads past an old one shrinks both measures
    at one commit and ends lagging for a few cycles.)"""
    cases, paused = [], []
    for seed in range(50):
        r = random.Random(seed)
        pauses = {round(r.uniform(5, 60), 2): INTERVAL * r.randint(1, 3) for _ in range(r.randint(1, 4))}
        produced, t = [], 0.0
        while t < 300:
            produced.append(t)
            t += 0.05 + next((d for at, d in pauses.items() if t <= at < t + 0.05), 0.0)
        commits = [(max(i / 4, p + 0.05), i + 1, A) for i, p in enumerate(produced) if i / 4 < 300]
        cases.append(Case(produced, commits, 300, r.uniform(0, INTERVAL)))
        paused.append(pauses)
    for seed, (got, pauses) in enumerate(zip(_statuses(cases), paused, strict=True)):
        assert all(s == "lagging" for t, s in got if t >= 60), \
            (seed, pauses, [(round(t), s) for t, s in got if s != "lagging"])

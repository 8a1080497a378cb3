"""Seeded random workloads through the real Evaluator, at the fleet's 3 s interval and 30 s
thresholds: healthy batch committers on clumpy, bursty producers (with a partition
changing owner) must stay ``ok`` at every sample; a stuck one must be ``stalled`` in time;
a slow one must stay ``lagging`` through a producer's pauses. The hand-written cases in
test_evaluator_unit.py were found this way; this keeps the search running.
"""

from __future__ import annotations

import random

import pytest

from exporter.config import Thresholds
from exporter.contracts.snapshot import Member
from exporter.evaluate.evaluator import Evaluator
from tests.test_evaluator_unit import MEMBER as A
from tests.test_evaluator_unit import OTHER as B
from tests.test_evaluator_unit import T0, _snap

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


def _statuses(produced: list[float], commits: list[tuple[float, int, Member]], end: float,
              r: random.Random) -> list[tuple[float, str]]:
    ev = Evaluator("c", TH, interval=INTERVAL)
    out, t, ci, committed, owner, hw = [], r.uniform(0, INTERVAL), 0, 0, A, 0
    while t < end:
        while ci < len(commits) and commits[ci][0] <= t:
            committed, owner = max(committed, commits[ci][1]), commits[ci][2]
            ci += 1
        while hw < len(produced) and produced[hw] <= t:
            hw += 1
        out.append((t, ev.evaluate(_snap(T0 + t, committed, hw, (owner,))).groups["g"].status))
        t += INTERVAL
    return out


def _healthy_scale_in(seed: int) -> list[tuple[float, str]]:
    """One burst read by A; then the partition moves to B, which re-reads A's uncommitted
    tail and commits part of it when its batch fills with other partitions' records."""
    r = random.Random(seed)
    produced = _clumps(r, r.uniform(0, 3), r.uniform(13, 43))
    commits = [(t, c, A) for t, c in _batch_commits(produced)]
    moved_at = produced[-1] + r.uniform(20, 90)
    done = commits[-1][1] if commits else 0
    if done < len(produced) - 1:
        commits.append((moved_at, r.randint(done + 1, len(produced) - 1), B))
    return _statuses(produced, commits, moved_at + 20, r)


def _healthy_bursts(seed: int) -> list[tuple[float, str]]:
    """Bursts of 20-40 s every 40-100 s for 400 s, read by one batch committer."""
    r = random.Random(seed)
    produced: list[float] = []
    t = r.uniform(0, 20)
    while t < 400:
        length = r.uniform(20, 40)
        produced += _clumps(r, t, t + length)
        t += length + r.uniform(20, 60)
    return _statuses(produced, [(t, c, A) for t, c in _batch_commits(produced)], 400, r)


@pytest.mark.parametrize("scenario", [_healthy_scale_in, _healthy_bursts])
def test_healthy_batch_committers_stay_ok(scenario) -> None:  # noqa: ANN001
    wrong = {}
    for seed in range(150):
        bad = [(round(t, 1), s) for t, s in scenario(seed) if s != "ok"]
        if bad:
            wrong[seed] = bad[:3]
    assert not wrong, f"{len(wrong)} of 150 healthy scenarios read wrong: {dict(list(wrong.items())[:5])}"


def test_a_stuck_batch_committer_is_stalled_in_time() -> None:
    """Stuck (no more commits) in the middle of steady clumps: stalled stall_after after the
    first records that arrived after its last commit, plus at most the widest gap between
    clumps (4 s) and one interval."""
    delays = []
    for seed in range(100):
        r = random.Random(seed)
        produced = _clumps(r, r.uniform(0, 3), 200)
        commits = [(t, c, A) for t, c in _batch_commits(produced, until=r.uniform(30, 80))]
        last = commits[-1][0]
        got = _statuses(produced, commits, 200, r)
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
    for seed in range(50):
        r = random.Random(seed)
        pauses = {round(r.uniform(5, 60), 2): INTERVAL * r.randint(1, 3) for _ in range(r.randint(1, 4))}
        produced, t = [], 0.0
        while t < 300:
            produced.append(t)
            t += 0.05 + next((d for at, d in pauses.items() if t <= at < t + 0.05), 0.0)
        commits = [(max(i / 4, p + 0.05), i + 1, A) for i, p in enumerate(produced) if i / 4 < 300]
        got = _statuses(produced, commits, 300, r)
        assert all(s == "lagging" for t, s in got if t >= 60), \
            (seed, pauses, [(round(t), s) for t, s in got if s != "lagging"])

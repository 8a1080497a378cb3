"""The evaluator's memory step, one table per concern: memory before, sample -> evidence after.

Each table drives one pure step of :func:`exporter.evaluate.memory.observe` (see the
table in that module's docstring); ``tests/test_rules_table.py`` has the lag trend's
own table (``lag_trend``) and the rules that read this evidence. Times are seconds from
the moment the committed offset froze; ``stall_after`` is 30 s and the interval 1 s
unless a row says otherwise.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from exporter.contracts.status import Status
from exporter.evaluate.constants import REWIND_HOLD_CYCLES
from exporter.evaluate.memory import (
    Floor,
    NewData,
    Observation,
    Ownership,
    PartitionMemory,
    Rewind,
    Run,
    StepInput,
    Trend,
    Tuning,
    at_rest,
    commit_trend,
    late_commit,
    late_commit_floor,
    new_data,
    observe,
    ownership,
    remember,
    rest_step,
    rewind_evidence,
    stall_clock,
)

pytestmark = pytest.mark.unit

STALL_AFTER = 30.0
TUNING = Tuning(interval=1.0, lag_threshold=3600.0, stall_after=STALL_AFTER)


def _ids(rows: list[tuple]) -> list[str]:
    return [r[0] for r in rows]


# -- new-data evidence -------------------------------------------------------------------
# NewData(freeze_hw, quiet_at, flow_at, tail_from, new_data_at, arrived_at); the committed
# offset froze at 0 with HW 100 unless the row says otherwise.
FROZEN = NewData(freeze_hw=100, quiet_at=0.0, flow_at=0.0, tail_from=None, new_data_at=None, arrived_at=0.0)

# (what, before, committed moved, hw, now, after)
NEW_DATA_ROWS: list[tuple[str, NewData, bool, int | None, float, NewData]] = [
    ("first sample with a HW: the freeze starts here",
     FROZEN._replace(freeze_hw=None), False, 100, 10.0, NewData(100, 10.0, 10.0, None, None, 0.0)),
    ("a commit restarts the evidence",
     FROZEN, True, 100, 10.0, NewData(100, 10.0, 10.0, None, None, 0.0)),
    ("a commit while records arrive: what follows may be the same burst's tail",
     FROZEN, True, 120, 10.0, NewData(120, 10.0, 10.0, 10.0, None, 10.0)),
    ("a commit with an unknown HW forgets the HW",
     FROZEN, True, None, 10.0, NewData(None, 10.0, 10.0, None, None, 0.0)),
    ("frozen, no record arrives: quiet",
     FROZEN, False, 100, 10.0, NewData(100, 10.0, 0.0, None, None, 0.0)),
    ("records right after the freeze: a tail, not yet evidence",
     FROZEN, False, 110, 10.0, NewData(110, 0.0, 10.0, 0.0, None, 10.0)),
    ("records keep arriving for stall_after: evidence, dated from the first of them",
     NewData(110, 0.0, 10.0, 0.0, None, 10.0), False, 130, 30.0, NewData(130, 0.0, 30.0, 0.0, 0.0, 30.0)),
    ("records after a pause: a burst ended and the next began, evidence from the pause",
     FROZEN._replace(quiet_at=20.0), False, 110, 25.0, NewData(110, 20.0, 25.0, None, 20.0, 25.0)),
    ("a pause shorter than half of stall_after within a tail: a producer's hiccup",
     NewData(110, 12.0, 10.0, 0.0, None, 10.0), False, 120, 14.0, NewData(120, 12.0, 14.0, 0.0, None, 14.0)),
    ("a pause of half of stall_after within a tail: fresh records",
     NewData(110, 26.0, 10.0, 0.0, None, 10.0), False, 120, 28.0, NewData(120, 26.0, 28.0, 0.0, 26.0, 28.0)),
    ("evidence stays until the next commit",
     NewData(120, 5.0, 20.0, None, 5.0, 20.0), False, 130, 40.0, NewData(130, 5.0, 20.0, None, 5.0, 40.0)),
    ("an unknown HW keeps what was known",
     FROZEN, False, None, 10.0, FROZEN),
]


@pytest.mark.parametrize(("what", "before", "moved", "hw", "now", "after"), NEW_DATA_ROWS,
                         ids=_ids(NEW_DATA_ROWS))
def test_new_data(what: str, before: NewData, moved: bool, hw: int | None, now: float,
                  after: NewData) -> None:
    assert new_data(before, moved, 0.0, hw, now, STALL_AFTER) == after


# -- late-commit floor -------------------------------------------------------------------

# (what, before, committed before this sample, now, after); LATE_COMMIT_WINDOW is 60 s
FLOOR_ROWS: list[tuple[str, Floor, int, float, Floor]] = [
    ("first window: anything can land (-1)", Floor(-1, 100, 0.0), 150, 30.0, Floor(-1, 100, 0.0)),
    ("a window on: the offset a window ago becomes the floor",
     Floor(-1, 100, 0.0), 150, 60.0, Floor(100, 150, 60.0)),
    ("and again a window later", Floor(100, 150, 60.0), 200, 125.0, Floor(150, 200, 125.0)),
]


@pytest.mark.parametrize(("what", "before", "was", "now", "after"), FLOOR_ROWS, ids=_ids(FLOOR_ROWS))
def test_late_commit_floor(what: str, before: Floor, was: int, now: float, after: Floor) -> None:
    assert late_commit_floor(before, was, now) == after


# (what, floor, committed before, committed now, owned, a late commit)
LATE_ROWS: list[tuple[str, Floor, int, int, bool, bool]] = [
    ("a member's retried commit lands after a newer one, above the floor",
     Floor(150, 200, 60.0), 227, 177, True, True),
    ("in the first window any backward move of a member may be one", Floor(-1, 100, 0.0), 227, 5, True, True),
    ("below the floor: a seek back, not a late commit", Floor(200, 227, 60.0), 227, 177, True, False),
    ("nobody owns the partition: an offset reset", Floor(150, 200, 60.0), 227, 177, False, False),
    ("forward is no late commit", Floor(150, 200, 60.0), 227, 300, True, False),
]


@pytest.mark.parametrize(("what", "floor", "was", "committed", "owned", "late"), LATE_ROWS,
                         ids=_ids(LATE_ROWS))
def test_late_commit(what: str, floor: Floor, was: int, committed: int, owned: bool, late: bool) -> None:
    assert late_commit(floor, was, committed, owned) is late


# (what, before, committed before, committed now, a late commit, now, after); interval 10 s
HOLD = REWIND_HOLD_CYCLES * 10.0
REWIND_ROWS: list[tuple[str, Rewind, int, int, bool, float, Rewind]] = [
    ("a backward move waits for the next sample", Rewind(0.0, None), 227, 100, False, 10.0, Rewind(0.0, 227)),
    ("still below where it was: confirmed, reported for the hold",
     Rewind(0.0, 227), 100, 100, False, 20.0, Rewind(20.0 + HOLD, None)),
    ("the next commit jumps past it: the old owner's commit landed late, no rewind",
     Rewind(0.0, 227), 100, 300, False, 20.0, Rewind(0.0, None)),
    ("a member's late commit is no rewind", Rewind(0.0, None), 227, 177, True, 10.0, Rewind(0.0, None)),
    ("a second backward move keeps the highest offset it came from",
     Rewind(0.0, 227), 100, 50, False, 20.0, Rewind(0.0, 227)),
    ("a confirmed rewind stays reported while it is held",
     Rewind(20.0 + HOLD, None), 100, 110, False, 30.0, Rewind(20.0 + HOLD, None)),
]


@pytest.mark.parametrize(("what", "before", "was", "committed", "late", "now", "after"), REWIND_ROWS,
                         ids=_ids(REWIND_ROWS))
def test_rewind_evidence(what: str, before: Rewind, was: int, committed: int, late: bool, now: float,
                         after: Rewind) -> None:
    assert rewind_evidence(before, was, committed, late, now, 10.0) == after


# -- stall clock -------------------------------------------------------------------------

# (what, lag since before, lag offsets, lag seconds, committed changed at, group's last
#  progress (share), now, (lag since after, stalled seconds))
STALL_ROWS: list[tuple[str, float | None, int | None, float | None, float, float | None, float,
                       tuple[float | None, float]]] = [
    ("no lag: no clock", 20.0, 0, 0.0, 0.0, None, 100.0, (None, 0.0)),
    ("unknown HW: no clock", 20.0, None, None, 0.0, None, 100.0, (None, 0.0)),
    ("lag appears: it dates from the oldest unconsumed record's arrival",
     None, 50, 12.0, 0.0, None, 100.0, (88.0, 12.0)),
    ("lag from before the freeze: stalled from the freeze", 20.0, 50, 80.0, 60.0, None, 100.0, (20.0, 40.0)),
    ("share group: the group's progress elsewhere restarts it",
     20.0, 50, 80.0, 0.0, 90.0, 100.0, (20.0, 10.0)),
    ("negative lag seconds (clocks apart) count as none", None, 5, -3.0, 0.0, None, 100.0, (100.0, 0.0)),
]


@pytest.mark.parametrize(("what", "since", "lag_off", "lag_s", "changed_at", "progress_at", "now", "after"),
                         STALL_ROWS, ids=_ids(STALL_ROWS))
def test_stall_clock(what: str, since: float | None, lag_off: int | None, lag_s: float | None,
                     changed_at: float, progress_at: float | None, now: float,
                     after: tuple[float | None, float]) -> None:
    assert stall_clock(since, lag_off, lag_s, changed_at, progress_at, now) == after


# -- commit-run trend --------------------------------------------------------------------

R1 = Run(t0=0.0, l0=1.0, n=1, gap=0.0, t_last=0.0, committed=10, lag_s=1.0, hw=20)
R3 = Run(t0=0.0, l0=1.0, n=3, gap=1.0, t_last=2.0, committed=30, lag_s=3.0, hw=60)


def _sample(committed: int, hw: int | None, lag_s: float | None, now: float) -> StepInput:
    lag_off = None if hw is None else max(0, hw - committed)
    return StepInput(followed=committed, hw=hw, lag_off=lag_off, lag_s=lag_s, owned=True, now=now)


# (what, before, committed before, sample, owner changed, quiet, (lagging now, after))
TREND_STEP_ROWS: list[tuple[str, Trend, int, StepInput, bool, bool, tuple[bool, Trend]]] = [
    ("a commit extends the run: growing at three commits, lagging",
     Trend(R3, False), 30, _sample(40, 80, 4.0, 3.0), False, False,
     (True, Trend(Run(0.0, 1.0, 4, 1.0, 3.0, 40, 4.0, 80), True))),
    ("the same commit by a new owner starts a new run: catching up, not falling behind",
     Trend(R3, False), 30, _sample(40, 80, 4.0, 3.0), True, False,
     (False, Trend(Run(3.0, 4.0, 1, 0.0, 3.0, 40, 4.0, 80), False))),
    ("no commit this cycle: the trend stands", Trend(R1, True), 10, _sample(10, 30, 3.0, 1.0), False, False,
     (True, Trend(R1, True))),
    ("no commit and no record for half of stall_after: the lag only ages",
     Trend(R1, True), 10, _sample(10, 30, 3.0, 1.0), False, True, (False, Trend(R1, False))),
    ("above lag_seconds without a commit", Trend(R1, False), 10, _sample(10, 30, 4000.0, 1.0), False, False,
     (True, Trend(R1, True))),
    ("unknown HW: nothing to judge, the trend is kept", Trend(R1, True), 10, _sample(10, None, None, 1.0),
     False, False, (False, Trend(R1, True))),
    ("lag 0 ends the trend", Trend(R1, True), 10, _sample(12, 12, 0.0, 1.0), False, False,
     (False, Trend(Run(1.0, 0.0, 1, 0.0, 1.0, 12, 0.0, 12), False))),
    ("a rewind ends the trend", Trend(R1, True), 10, _sample(5, 20, 5.0, 1.0), False, False,
     (False, Trend(Run(1.0, 5.0, 1, 0.0, 1.0, 5, 5.0, 20), False))),
]


@pytest.mark.parametrize(("what", "before", "was", "sample", "new_owner", "quiet", "after"),
                         TREND_STEP_ROWS, ids=_ids(TREND_STEP_ROWS))
def test_commit_trend(what: str, before: Trend, was: int, sample: StepInput, new_owner: bool, quiet: bool,
                      after: tuple[bool, Trend]) -> None:
    assert commit_trend(before, was, sample, new_owner, quiet, TUNING) == after


# -- ownership ---------------------------------------------------------------------------

# (what, before, owned, owner's member id, (after, owner changed, unowned confirmed))
OWNERSHIP_ROWS: list[tuple[str, Ownership, bool, str | None, tuple[Ownership, bool, bool]]] = [
    ("owned by the same member", Ownership("m1", 0), True, "m1", (Ownership("m1", 0), False, False)),
    ("moved to another member", Ownership("m1", 0), True, "m2", (Ownership("m2", 0), True, False)),
    ("the first owner known is no change",
     Ownership(None, 0), True, "m1", (Ownership("m1", 0), False, False)),
    ("owned, owner unknown (target assignment, Spark driver): the last one is kept",
     Ownership("m1", 3), True, None, (Ownership("m1", 0), False, False)),
    ("nobody owns it for one cycle: a rebalance or a coordinator failover",
     Ownership("m1", 0), False, None, (Ownership("m1", 1), False, False)),
    ("nobody owns it two cycles in a row: confirmed",
     Ownership("m1", 1), False, None, (Ownership("m1", 2), False, True)),
]


@pytest.mark.parametrize(("what", "before", "owned", "owner", "after"), OWNERSHIP_ROWS,
                         ids=_ids(OWNERSHIP_ROWS))
def test_ownership(what: str, before: Ownership, owned: bool, owner: str | None,
                   after: tuple[Ownership, bool, bool]) -> None:
    assert ownership(before, owned, owner) == after


# -- the composition and remember ------------------------------------------------------

def _observed(status_after: float = 40.0) -> Observation:
    """A member's partition frozen at committed 10 under steady traffic for 40 s."""
    mem = PartitionMemory.first(10, 0.0)
    obs = None
    for t in range(0, int(status_after) + 1, 10):
        obs = observe(mem, StepInput(10, 20 + t, 10 + t, float(t), True, float(t), "m1"), TUNING)
        mem = remember(obs, Status.OK)
    assert obs is not None
    return obs


def test_observe_composes_the_steps() -> None:
    obs = _observed()
    assert (obs.stalled_seconds, obs.frozen_seconds, obs.new_data_seconds) == (40.0, 40.0, 40.0)
    assert not obs.rewinding and not obs.unowned_confirmed
    assert obs.after.ownership == Ownership("m1", 0) and obs.after.data.freeze_hw == 60


def test_remember_replaces_the_memory_whole_and_a_severe_status_ends_the_trend() -> None:
    obs = _observed()
    obs = dataclasses.replace(obs, after=dataclasses.replace(obs.after, trend=Trend(R1, True)))
    assert remember(obs, Status.LAGGING).trend == Trend(R1, True)
    assert remember(obs, Status.STALLED).trend == Trend(R1, False)
    assert remember(obs, Status.OK) is not obs.after  # a new value; the old one is untouched
    assert obs.after.trend == Trend(R1, True)


def test_remember_dates_a_share_groups_progress_when_it_happened() -> None:
    obs = _observed()
    mem = remember(obs, Status.OK, share=(12.0, 35.0))
    assert (mem.changed_at, mem.above_from) == (12.0, 35.0)
    mem = remember(obs, Status.OK, share=(None, None))
    assert (mem.changed_at, mem.above_from) == (obs.after.changed_at, None)


# -- a partition at rest -----------------------------------------------------------------

def test_the_rest_step_is_the_full_step_for_a_partition_at_rest() -> None:
    """Random walks of one partition (commits, bursts, idle stretches, owners coming and
    going, gaps past the late-commit window, a backward move now and then): wherever
    ``at_rest`` holds, ``rest_step`` gives exactly the memory the full step gives."""
    rnd = random.Random(26)
    checked = 0
    for _walk in range(200):
        mem = PartitionMemory.first(100, 0.0)
        committed, hw, now, owner = 100, 100, 0.0, "m1"
        for _step in range(60):
            now += rnd.choice((1.0, 3.0, 15.0, 45.0))
            if rnd.random() < 0.3:
                hw += rnd.randrange(1, 20)
            if rnd.random() < 0.4:
                committed = hw if rnd.random() < 0.7 else min(hw, committed + rnd.randrange(0, 10))
            elif rnd.random() < 0.03:
                committed = max(0, committed - rnd.randrange(1, 50))
            if rnd.random() < 0.1:
                owner = rnd.choice(("m1", "m2", None))
            owned = owner is not None and rnd.random() < 0.9
            lag_off = max(0, hw - committed)
            s = StepInput(committed, hw, lag_off, 0.0 if not lag_off else float(rnd.randrange(1, 90)),
                       owned, now, owner)
            full = remember(observe(mem, s, TUNING), rnd.choice((Status.OK, Status.STALLED))
                            if lag_off else Status.OK)
            if at_rest(mem, committed, hw, owner):
                assert rest_step(mem, owned, owner, now) == full
                checked += 1
            mem = full
    assert checked > 2000  # the walks do come to rest, often

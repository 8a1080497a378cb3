"""Issue 23's long-run acceptance, proven on a recording of ``python -m bench.membership_longrun``
(tests/recordings/membership-10min.jsonl.xz: ten minutes and more, one local broker).

- Two clients committing outside group membership (``assign()``), every 5 s and every 60 s,
  each reading steadily behind: ``ok`` at every cycle from two cycles after their first
  commit (READY) to the end, with the cadence they showed in their reasons.
- A group member committing every 90 s, ``stall_after`` 60 by a per-group override (the
  cluster's is 30): never ``stalled`` once its cadence is shown (the cycle after the second
  commit lagwatch sees), and ``stalled`` once its commits stop while records arrive: past
  its allowance (the learnt gap plus one interval, docs/statuses.md ``stalled``), at the
  first cycle after it, never beyond 4 x ``stall_after``.

Commits are read from the recording itself: the cycles at which the group's committed
offset moved forward.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pytest

from exporter import recording
from exporter.evaluate import evaluator
from exporter.recording import Recording, Timeline

pytestmark = pytest.mark.unit

FIXTURE = Path(__file__).resolve().parent / "recordings" / "membership-10min.jsonl.xz"
FAST, SLOW, MEMBER = "longrun-ckpt-5s", "longrun-ckpt-60s", "longrun-member-90s"


@cache
def _rec() -> Recording:
    return recording.load(FIXTURE)


@cache
def _tl() -> Timeline:
    return recording.replay(_rec())


def _mark(group: str, event: str) -> float:
    (at,) = [m.at for m in _rec().marks if m.group == group and m.event == event]
    return at


def _commit_cycles(rec: Recording, group: str) -> list[int]:
    """The cycles at which the group's committed offset was seen to move forward."""
    out, prev = [], None
    for i, c in enumerate(rec.cycles):
        g = c.snap.groups.get(group)
        off = next(iter(g.committed.values()), None) if g is not None else None
        if off is not None and (prev is None or off > prev):
            out.append(i)
        prev = off if off is not None else prev
    return out


def test_the_recording_is_the_long_run() -> None:
    rec, tl = _rec(), _tl()
    assert rec.interval == 5.0 and rec.thresholds.stall_after == 30.0
    assert [o["thresholds"] for o in rec.header["group_thresholds"]] == [{"stall_after": 60.0}]
    for g in (FAST, SLOW):  # ten minutes of each assign() client after its first commit
        assert tl.times[-1] - _mark(g, "READY") >= 600, g
    assert FIXTURE.stat().st_size < 100_000


@pytest.mark.parametrize(("group", "cadence"), [(FAST, "5 s"), (SLOW, "60 s")])
def test_assign_mode_committers_ok_at_every_cycle(group: str, cadence: str) -> None:
    tl = _tl()
    start = tl.cycle_at(_mark(group, "READY")) + 2
    end = tl.cycle_at(_mark(group, "END"))
    line = tl.statuses[group][start:end]
    assert len(line) >= 600 / _rec().interval
    assert set(line) == {"ok"}, tl.changes(group, start)
    assert f"every ~{cadence}" in tl.reasons[group][end - 1][-1], tl.reasons[group][end - 1]


def _member() -> tuple[list[int], int, int | None]:
    """The member's commit cycles, the cycle its cadence was shown, and its first ``stalled``
    after its last commit."""
    commits, tl = _commit_cycles(_rec(), MEMBER), _tl()
    assert len(commits) >= 4, commits
    return commits, commits[1] + 1, tl.first(MEMBER, "stalled", commits[-1] + 1)


def test_member_committing_every_90s_never_stalled_once_its_cadence_is_shown() -> None:
    tl = _tl()
    commits, shown, _stalled = _member()
    last = commits[-1]
    assert tl.cycle_at(_mark(MEMBER, "LAST-COMMIT")) in (last - 1, last, last + 1)
    gaps = [tl.times[b] - tl.times[a] for a, b in zip(commits, commits[1:], strict=False)]
    assert all(85 <= g <= 100 for g in gaps), gaps  # its cadence, longer than stall_after
    assert tl.seen(MEMBER, shown, last + 1) == {"ok"}, tl.changes(MEMBER)


def test_member_stalled_within_the_documented_bound_once_its_commits_stop() -> None:
    rec, tl = _rec(), _tl()
    commits, _shown, stalled = _member()
    last = commits[-1]
    assert stalled is not None, tl.changes(MEMBER, last)
    gaps = [tl.times[b] - tl.times[a] for a, b in zip(commits, commits[1:], strict=False)]
    allowance = max(gaps) + rec.interval  # the allowance is one learnt gap plus one interval
    # records waited since the last commit: stalled at the first cycle past the allowance,
    # one more for the commit itself, seen at the cycle after it was made
    assert stalled - last <= math.ceil(allowance / rec.interval) + 2, (stalled - last, allowance)
    waited = tl.times[stalled] - tl.times[last]
    assert waited > min(gaps), waited  # its cadence was allowed for, not stall_after alone
    assert waited <= 4 * 60 + 2 * rec.interval  # within 4 x stall_after, the documented bound
    assert tl.seen(MEMBER, stalled) == {"stalled"}, tl.changes(MEMBER, last)


def test_without_the_learnt_cadence_the_member_would_read_stalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluator that learns no commit gap judges the member by stall_after (60 s)
    alone: stalled between its 90 s commits, which the test above would catch."""
    monkeypatch.setattr(evaluator, "learn_commit_gaps", lambda *a, **k: None)
    tl = recording.replay(_rec(), groups=[MEMBER])
    commits, shown, _stalled = _member()
    assert "stalled" in tl.seen(MEMBER, shown, commits[-1] + 1)


def test_without_its_learnt_cadence_the_60s_client_would_read_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An outside client allowed stall_after (30 s) alone, not its learnt cadence, reads
    stopped between its 60 s checkpoints, which the test above would catch."""
    monkeypatch.setattr(evaluator, "outside_allowance", lambda _mem, stall_after, _interval: stall_after)
    tl = recording.replay(_rec(), groups=[SLOW])
    start = tl.cycle_at(_mark(SLOW, "READY")) + 2
    assert "stopped" in tl.seen(SLOW, start, tl.cycle_at(_mark(SLOW, "END")))

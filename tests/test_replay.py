"""Judgement over time, proven on recordings of real runs (tests/recordings/).

Each recording holds what the evaluator was given, cycle by cycle, while the live scenario
tests ran real consumers, Kafka Streams and share applications, JVM consumers with the
interceptor and PySpark queries against a real broker (tests/support/recorded.py, `make record`).
Replaying one through the real :class:`~exporter.evaluate.evaluator.Evaluator` gives the same
statuses on any machine at any load, so the detection delays are asserted here exactly, in
cycles, and docs/detection.md is generated from the same table
(``python -m tests.test_replay`` rewrites it).

- ``STORIES``: the order of statuses a workload goes through (a healthy one: ``ok`` only).
- ``DETECTIONS``: a workload reaches a status within ``threshold / interval + extra``
  cycles of an event (what its process printed, or what the test did to it).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from exporter import recording
from exporter.recording import Recording, Timeline

pytestmark = pytest.mark.unit

RECORDINGS = Path(__file__).resolve().parent / "recordings"
DOC = Path(__file__).resolve().parent.parent / "docs" / "detection.md"


@dataclass(frozen=True)
class Story:
    fixture: str
    role: str
    statuses: tuple[str, ...]  # the status changes, in order, from the event on
    event: str = "WATCHED"
    until: str = "END"  # the test was done with the workload (to the end without the mark)


@dataclass(frozen=True)
class Detection:
    fixture: str
    role: str
    what: str  # the workload, for the documentation
    event: str  # the mark the delay counts from
    status: str
    threshold: str | float  # a Thresholds field, or seconds set outside lagwatch
    extra: int  # cycles beyond threshold / interval
    why: str  # what the extra cycles are for
    # seconds the judgement's clock can have started before the event: a client that
    # commits every few seconds made its last commit up to that long before it was killed
    lead: float = 0.0

    def bound(self, rec: Recording) -> int:
        return math.ceil(self.seconds(rec) / rec.interval) + self.extra

    def seconds(self, rec: Recording) -> float:
        if isinstance(self.threshold, str):
            return float(getattr(rec.thresholds, self.threshold))
        return float(self.threshold)

    def threshold_text(self) -> str:
        return self.threshold if isinstance(self.threshold, str) else f"{self.threshold:g} s"


SESSION = 6.0  # the test brokers' session timeouts (classic, KIP-848, streams, share)
TWO = "the cycle that sees it, and the next (two-cycle rules)"

SPARK = ("4.0.0", "3.5.3")

STORIES = [
    Story("scenarios", "healthy", ("ok",), "READY"),
    Story("scenarios", "slow", ("ok", "lagging")),
    Story("scenarios", "nocommit", ("ok", "stalled")),
    Story("scenarios", "blocked", ("ok", "livelocked")),
    Story("scenarios", "maxpoll", ("ok", "livelocked")),
    Story("scenarios", "killed", ("ok", "stopped")),
    Story("scenarios", "rewind", ("ok", "rewind")),
    Story("group-types", "kip848-maxpoll", ("ok", "livelocked"), "READY"),
    Story("group-types", "kip848-scaling", ("ok",), "READY"),
    Story("group-types", "streams-wedged", ("ok", "stalled", "stopped"), "READY"),
    Story("group-types", "share-wedged", ("ok", "stalled", "stopped"), "READY"),
    Story("group-types", "streams-ok", ("ok",), "READY"),
    Story("group-types", "share-ok", ("ok",), "READY"),
    Story("group-types", "streams-slow", ("ok", "lagging"), "READY"),
    Story("group-types", "share-slow", ("ok", "lagging"), "READY"),
    *(Story("jvm-interceptor", role, ("ok", "livelocked"))
      for role in ("clients-4.2.1", "clients-4.2.1-kip848", "clients-3.9.2", "streams")),
    Story("jvm-interceptor", "healthy", ("ok",), "READY"),
    Story("jvm-first-batch", "first-batch", ("ok", "livelocked")),
    # tests/test_membership.py: each group judged by its evidence, whatever its model
    Story("membership", "moved-classic", ("ok",)),
    Story("membership", "moved-consumer", ("ok",)),
    Story("membership", "outside", ("ok",), until="KILLED"),
    Story("membership", "outside", ("ok", "stopped")),
    Story("membership", "outside-slow", ("ok",)),
    Story("membership", "outside-lagging", ("ok", "lagging")),
    Story("membership", "never-committed", ("ok", "stalled")),
    Story("membership", "slow-commits", ("ok", "stalled"), "LEARNT"),
    Story("membership", "never-committed-instrumented", ("ok", "livelocked")),
    # tests/test_evidence.py: uninstrumented client shapes (issue 40)
    Story("evidence", "hung", ("ok", "stalled")),
    Story("evidence", "left", ("ok", "stopped")),
    *(s for v in SPARK for s in (
        Story("spark", f"healthy-pyspark-{v}", ("ok",)),
        Story("spark", f"idle-pyspark-{v}", ("ok",)),
        Story("spark", f"hung-pyspark-{v}", ("ok", "livelocked")),
        Story("spark", f"stopped-pyspark-{v}", ("ok", "stopped")))),
]

DETECTIONS = [
    Detection("scenarios", "slow", "Python consumer slower than its producer", "READY", "lagging",
              0.0, 5, "the lag growing over more than one commit gap + one interval"),
    Detection("scenarios", "nocommit", "Python consumer polling, never committing", "READY",
              "stalled", "stall_after", 2, "its first fetch, then the first cycle past the threshold"),
    Detection("scenarios", "blocked", "instrumented Python consumer wedged (heartbeating)",
              "BLOCKED", "livelocked", "livelock_after", 2, "the first cycle past the threshold"),
    Detection("scenarios", "maxpoll", "classic consumer in a max.poll.interval.ms loop", "READY",
              "livelocked", "stall_after", 3, "two rejoins with no progress"),
    Detection("scenarios", "killed", "consumer killed (SIGKILL)", "KILLED", "stopped", SESSION, 2, TWO),
    Detection("scenarios", "rewind", "offsets reset backwards", "REWOUND", "rewind", 0.0, 2,
              "the next cycle's sample"),
    Detection("group-types", "kip848-maxpoll", "KIP-848 consumer in a max.poll.interval.ms loop",
              "READY", "livelocked", "stall_after", 4, "two rejoins (group epoch +2 each) with no progress"),
    Detection("group-types", "streams-wedged", "Kafka Streams processor wedged", "BLOCKED", "stalled",
              "stall_after", 3, "the commit the app had in flight, then the first cycle past the threshold"),
    Detection("group-types", "streams-wedged", "Kafka Streams application killed", "KILLED", "stopped",
              SESSION, 2, TWO),
    Detection("group-types", "share-wedged", "share consumer wedged (acknowledges nothing)", "BLOCKED",
              "stalled", "stall_after", 2, "the first cycle past the threshold"),
    Detection("group-types", "share-wedged", "share consumer killed", "KILLED", "stopped", SESSION, 2, TWO),
    Detection("group-types", "streams-slow", "slow Kafka Streams processor", "FIRST", "lagging", 0.0, 6,
              "the lag growing over its commit interval"),
    Detection("group-types", "share-slow", "slow share consumer", "READY", "lagging", 0.0, 8,
              "the first acknowledgements the coordinator persists, then the lag growing"),
    *(Detection("jvm-interceptor", role, f"JVM consumer ({role}) wedged, interceptor loaded",
                "BLOCKED", "livelocked", "livelock_after", 2, "the first cycle past the threshold")
      for role in ("clients-4.2.1", "clients-4.2.1-kip848", "clients-3.9.2")),
    Detection("jvm-interceptor", "streams", "Kafka Streams thread wedged, interceptor loaded", "BLOCKED",
              "livelocked", "livelock_after", 2, "the first cycle past the threshold"),
    Detection("jvm-first-batch", "first-batch", "JVM consumer wedged on its first record, never "
              "committed, interceptor loaded", "BLOCKED", "livelocked", "livelock_after", 2,
              "the first cycle past the threshold"),
    Detection("membership", "never-committed", "consumer wedged before its first commit (owned, "
              "never committed)", "RECORDS", "stalled", "stall_after", 2,
              "the first records' sample, then the first cycle past the threshold"),
    Detection("membership", "never-committed-instrumented", "instrumented Python consumer wedged on "
              "its first record, never committed", "BLOCKED", "livelocked", "livelock_after", 3,
              "its report interval (1 s), then the first cycle past the threshold"),
    Detection("membership", "slow-commits", "group member committing every 12 s (stall_after 8 s), "
              "commits stopped", "HALTED", "stalled", 14.0, 2,
              "past its learnt cadence (12 s and the spacing of the cycles that saw a commit) + "
              "one interval (14 s), the first cycle past it"),
    Detection("membership", "outside", "assign()-mode client committing every 3 s, killed",
              "KILLED", "stopped", "stall_after", 2,
              "the first cycle past its allowance (stall_after: its cadence is shorter)", lead=3.0),
    *(d for v in SPARK for d in (
        Detection("spark", f"hung-pyspark-{v}", f"Spark {v} query, batch hung", "HUNG", "livelocked",
                  "livelock_after", 3, "the trigger that starts the batch, then the first cycle past "
                  "the threshold"),
        Detection("spark", f"stopped-pyspark-{v}", f"Spark {v} query stopped with lag", "STOPPED",
                  "stopped", 0.0, 2, "the listener's terminated event"))),
]


@cache
def _load(name: str) -> Recording:
    return recording.load(RECORDINGS / f"{name}.jsonl.xz")


@cache
def _timeline(name: str) -> Timeline:
    return recording.replay(_load(name))


def _group(rec: Recording, role: str) -> str:
    groups = {m.group for m in rec.marks if m.role == role}
    assert len(groups) == 1, f"role {role!r}: groups {groups} in the recording"
    return groups.pop()


def _event_cycle(rec: Recording, tl: Timeline, role: str, event: str, required: bool = True) -> int:
    """The first cycle at or after the role's first ``event`` (past the end when there is
    none and it is not ``required``)."""
    ats = [m.at for m in rec.marks if m.role == role and m.event == event]
    has = sorted({m.event for m in rec.marks if m.role == role})
    assert ats or not required, f"role {role!r} has no {event} mark; it has {has}"
    return tl.cycle_at(min(ats)) if ats else len(tl.times)


def _story(rec: Recording, tl: Timeline, role: str) -> str:
    """The timeline of a role for a failure message: status changes and marks, by cycle."""
    group = _group(rec, role)
    marks = [(tl.cycle_at(m.at), m.event) for m in rec.marks if m.role == role]
    return f"\n  changes (cycle, status): {tl.changes(group)}\n  marks (cycle, event): {marks}"


def detected_after(d: Detection, tl: Timeline | None = None) -> int | None:
    """Cycles from the event to the status in the replay; None when never reached."""
    rec = _load(d.fixture)
    tl = tl or _timeline(d.fixture)
    start = _event_cycle(rec, tl, d.role, d.event)
    hit = tl.first(_group(rec, d.role), d.status, start)
    return None if hit is None else hit - start


@pytest.mark.parametrize("story", STORIES, ids=lambda s: f"{s.fixture}-{s.role}")
def test_statuses_come_in_order(story: Story) -> None:
    rec, tl = _load(story.fixture), _timeline(story.fixture)
    start = _event_cycle(rec, tl, story.role, story.event)
    end = _event_cycle(rec, tl, story.role, story.until, required=False)
    got = tuple(s for c, s in tl.changes(_group(rec, story.role), start) if c < end)
    assert got == story.statuses, \
        f"expected {' -> '.join(story.statuses)}, replayed {' -> '.join(got)}" + _story(rec, tl, story.role)


@pytest.mark.parametrize("d", DETECTIONS, ids=lambda d: f"{d.fixture}-{d.role}-{d.status}")
def test_detected_within_bound(d: Detection) -> None:
    rec, tl = _load(d.fixture), _timeline(d.fixture)
    n = detected_after(d)
    bound = d.bound(rec)
    assert n is not None and n <= bound, f"{d.status} {n} cycles after {d.event}, bound {bound}" + \
        _story(rec, tl, d.role)
    # ...and never before its threshold has passed (two cycles' leeway: the event is dated by
    # the workload's clock, the cycles by the snapshot's; and the detection's lead)
    start = _event_cycle(rec, tl, d.role, d.event)
    waited = tl.times[start + n] - min(m.at for m in rec.marks if m.role == d.role and m.event == d.event)
    assert waited >= d.seconds(rec) - d.lead - 2 * rec.interval, \
        f"{d.status} {waited:.1f}s after {d.event}, before its threshold" + _story(rec, tl, d.role)


# (fixture, role, status, fragments its reason holds once the status is reached): what an
# on-call engineer reads, replayed from real runs of uninstrumented clients.
REASONS = [
    ("evidence", "hung", "stalled", (
        "committed offset frozen for ", "; owner hung-handler@/127.0.0.1 (hung-handler-",
        "; evidence: broker-side evidence only (membership, commits, HW): a handler hung in a "
        "client that keeps heartbeating without a poll timeout (sarama, franz-go) and a consumer "
        "that polls without committing look the same; its own reports would tell them apart")),
    ("evidence", "left", "stopped", (
        "no member owns the partition (group empty; last owner "
        "poll-timeout-consumer@/127.0.0.1 (poll-timeout-consumer-",
        "s ago); committed unchanged for ",
        "; evidence: broker-side evidence only: a consumer that crashed or closed and one that "
        "left the group on its poll timeout (max.poll.interval.ms) while its process lives look "
        "the same; its own reports would tell them apart")),
]


@pytest.mark.parametrize(("fixture", "role", "status", "fragments"), REASONS,
                         ids=[f"{r[0]}-{r[1]}" for r in REASONS])
def test_reasons_say_what_the_evidence_shows(fixture: str, role: str, status: str,
                                             fragments: tuple[str, ...]) -> None:
    """Every cycle in the status, the group's first reason holds the fragments."""
    rec, tl = _load(fixture), _timeline(fixture)
    group = _group(rec, role)
    cycles = [i for i, s in enumerate(tl.statuses[group]) if s == status]
    assert cycles, _story(rec, tl, role)
    for i in cycles:
        reason = tl.reasons[group][i][0]
        assert all(f in reason for f in fragments), (i, reason)


def test_the_departure_is_dated_by_the_replayed_clock() -> None:
    """The last owner's "left N s ago" grows with the cycles."""
    rec, tl = _load("evidence"), _timeline("evidence")
    group = _group(rec, "left")
    ago = [float(r[0].split(" left ")[1].split("s ago")[0]) for r, s in
           zip(tl.reasons[group], tl.statuses[group], strict=True) if s == "stopped"]
    assert ago and all(b > a for a, b in zip(ago, ago[1:], strict=False)), ago


def test_a_broken_rule_fails_the_replay() -> None:
    """`stalled` requiring twice stall_after: the detections that count from stall_after go
    past their bound, so the tests above would fail."""
    late = []
    for d in DETECTIONS:
        if d.threshold != "stall_after" or d.status != "stalled":
            continue
        rec = _load(d.fixture)
        broken = dataclasses.replace(rec.thresholds, stall_after=2 * rec.thresholds.stall_after)
        n = detected_after(d, recording.replay(rec, broken))
        late.append(n is None or n > d.bound(rec))
    assert late and all(late), late


def test_every_fixture_is_small_and_every_role_named_once() -> None:
    names = {p.name.removesuffix(".jsonl.xz") for p in RECORDINGS.glob("*.jsonl.xz")}
    assert {s.fixture for s in STORIES} | {d.fixture for d in DETECTIONS} <= names
    assert sum(p.stat().st_size for p in RECORDINGS.glob("*.xz")) < 4_000_000
    for s in STORIES:
        _group(_load(s.fixture), s.role)


def detection_doc() -> str:
    rows = []
    for d in DETECTIONS:
        rec = _load(d.fixture)
        rows.append(f"| {d.what} | `{d.status}` | {d.event} | {d.threshold_text()} + {d.extra} "
                    f"({d.why}) | {d.bound(rec)} | {detected_after(d)} | `{d.fixture}` |")
    return "\n".join([
        "# Detection delays",
        "",
        "Generated by `python -m tests.test_replay` from the table in `tests/test_replay.py`;",
        "`tests/test_replay.py` asserts every row on the recordings in `tests/recordings/` and",
        "that this file is equal to what it generates. Delays count exporter cycles from the event",
        "(what the workload printed, or what the test did to it) to the first cycle with the status.",
        "A bound is the threshold divided by the interval, rounded up, plus the extra cycles named.",
        "The recordings ran with the test thresholds (interval 1 s, `stall_after` and",
        "`livelock_after` 8 s; Spark: `stall_after` 4 s, `livelock_after` 6 s); with production",
        "thresholds the same rules give the same number of cycles past the threshold.",
        "",
        "| workload | status | counted from | bound: threshold + extra cycles | bound (cycles) "
        "| replayed (cycles) | recording |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])


def test_detection_doc_is_generated_from_the_replays() -> None:
    assert DOC.read_text() == detection_doc(), "docs/detection.md is stale: run python -m tests.test_replay"


if __name__ == "__main__":
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(detection_doc())
    sys.exit(0)

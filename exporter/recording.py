"""Record the evaluator's inputs from a real run, and replay them through the real evaluator.

The evaluator is a pure function of its inputs over time: each cycle's snapshot, the
consumer and Spark reports read, the record timestamps looked up and the clock. A
recording holds exactly those, so a replay gives the same statuses, cycle for cycle, on
any machine at any load: judgement over time is tested on recordings of real runs
(``tests/test_replay.py``) instead of wall-clock bounds on a live one.

Format (version 1), documented in ``docs/recordings.md``: JSON Lines, one object a line.

- line 1, the header: ``{"format": "lagwatch-recording", "version": 1, "cluster": str,
  "interval": s, "thresholds": {...}, "history_points": int, "max_group_partitions": int}``,
  and ``"group_thresholds": [{"match": regex, "thresholds": {...}}, ...]`` when the cluster
  has group overrides
- ``{"k": "cycle", "now": s, "snap": {...}, "consumer": {...}, "spark": {...}, "ts": [...]}``
  per evaluated cycle, in order
- ``{"k": "mark", "role": str, "group": str, "event": str, "at": s}``: what the harness did
  or saw (a consumer printed BLOCKED, the test killed it), added when a fixture is made

The exporter writes plain lines (``--record DIR``: ``DIR/<cluster>.jsonl``), flushed every
cycle, so a recording is readable however the process ended; fixtures are the same lines
compressed with xz.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import lzma
import re
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from exporter.config import GroupThresholds, Thresholds
from exporter.contracts.errors import ErrorRecord
from exporter.contracts.reports import ConsumerReport, SparkReport
from exporter.contracts.snapshot import Snapshot
from exporter.evaluate.evaluator import Evaluator

FORMAT = "lagwatch-recording"
VERSION = 1

ExactTs = dict[tuple[str, int, int], float]


# -- typed JSON for the snapshot and report dataclasses ------------------------------------

def _enc(v: Any) -> Any:
    """Dataclasses to dicts without their default fields; dicts keyed by (topic, partition)
    to [[topic, partition, value], ...]; tuples to lists."""
    if dataclasses.is_dataclass(v):
        out = {}
        for f in dataclasses.fields(v):
            x = getattr(v, f.name)
            if f.default is not dataclasses.MISSING and x == f.default:
                continue
            if f.default_factory is not dataclasses.MISSING and x == f.default_factory():
                continue
            out[f.name] = _enc(x)
        return out
    if isinstance(v, dict):
        if v and isinstance(next(iter(v)), tuple):
            return [[*k, _enc(x)] for k, x in v.items()]
        return {k: _enc(x) for k, x in v.items()}
    if isinstance(v, tuple | list):
        return [_enc(x) for x in v]
    if isinstance(v, float):
        return round(v, 6)
    return v


@functools.cache
def _hints(tp: type) -> dict[str, Any]:
    """A dataclass's field types, resolved once (``typing.get_type_hints`` evaluates every
    annotation again at each call: most of a recording's load time, uncached)."""
    return typing.get_type_hints(tp)


def _dec(tp: Any, v: Any) -> Any:
    """The inverse of :func:`_enc`, driven by the type annotation ``tp``."""
    if v is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _dec(inner[0], v)
    if tp is ErrorRecord and isinstance(v, list):  # written as a [stage, message] pair before
        return ErrorRecord(stage=v[0], message=v[1])
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        return tp(**{k: _dec(hints[k], x) for k, x in v.items()})
    if origin is dict:
        kt, vt = typing.get_args(tp)
        if typing.get_origin(kt) is tuple:
            n = len(typing.get_args(kt))
            return {tuple(row[:n]): _dec(vt, row[n]) for row in v}
        return {k: _dec(vt, x) for k, x in v.items()}
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_dec(args[0], x) for x in v)
        return tuple(_dec(a, x) for a, x in zip(args, v, strict=True))
    return v


# -- writing ----------------------------------------------------------------------------

def header(cluster: str, thresholds: Thresholds, interval: float, history_points: int,
           max_group_partitions: int, group_thresholds: Sequence[GroupThresholds] = ()) -> dict[str, Any]:
    head = {"format": FORMAT, "version": VERSION, "cluster": cluster, "interval": interval,
            "thresholds": dataclasses.asdict(thresholds), "history_points": history_points,
            "max_group_partitions": max_group_partitions}
    if group_thresholds:  # optional: recordings without it have no group overrides
        head["group_thresholds"] = [{"match": o.match.pattern, "thresholds": dict(o.changes)}
                                    for o in group_thresholds]
    return head


def cycle_line(snap: Snapshot, consumer: dict[str, list[ConsumerReport]],
               spark: dict[str, SparkReport], exact_ts: ExactTs, now: float) -> dict[str, Any]:
    return {"k": "cycle", "now": round(now, 6), "snap": _enc(snap),
            "consumer": {g: _enc(rs) for g, rs in consumer.items()},
            "spark": {g: _enc(r) for g, r in spark.items()},
            "ts": [[t, p, o, round(ts, 6)] for (t, p, o), ts in exact_ts.items()]}


class Writer:
    """Appends one line per cycle to a plain file, flushed at once (``--record DIR``)."""

    def __init__(self, path: str, head: dict[str, Any]) -> None:
        self._f: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._write(head)

    def _write(self, obj: dict[str, Any]) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._f.flush()

    def cycle(self, snap: Snapshot, consumer: dict[str, list[ConsumerReport]],
              spark: dict[str, SparkReport], exact_ts: ExactTs, now: float) -> None:
        self._write(cycle_line(snap, consumer, spark, exact_ts, now))

    def close(self) -> None:
        self._f.close()


# -- reading ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Cycle:
    now: float
    snap: Snapshot
    consumer: dict[str, list[ConsumerReport]]
    spark: dict[str, SparkReport]
    exact_ts: ExactTs


@dataclass(frozen=True, slots=True)
class Mark:
    role: str  # what the harness calls the workload ("nocommit", "spark-hung")
    group: str  # the group id (or Spark query name) lagwatch judges
    event: str  # READY, BLOCKED, KILLED, ...
    at: float  # wall clock, seconds


@dataclass
class Recording:
    header: dict[str, Any]
    cycles: list[Cycle] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    @property
    def interval(self) -> float:
        return float(self.header["interval"])

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(**self.header["thresholds"])

    @property
    def group_thresholds(self) -> tuple[GroupThresholds, ...]:
        return tuple(GroupThresholds(re.compile(o["match"]), tuple(sorted(o["thresholds"].items())))
                     for o in self.header.get("group_thresholds", ()))


class RecordingError(ValueError):
    pass


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".xz":
        return lzma.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")  # noqa: SIM115 - the caller's with-block closes it


def parse_lines(lines: Iterable[str], where: str = "recording", start: float = float("-inf"),
                end: float = float("inf")) -> Recording:
    """A recording from its lines; only the cycles evaluated from ``start`` to ``end``."""
    it = iter(lines)
    try:
        head = json.loads(next(it))
    except (StopIteration, json.JSONDecodeError) as e:
        raise RecordingError(f"{where}: no header line") from e
    if head.get("format") != FORMAT or head.get("version") != VERSION:
        raise RecordingError(f"{where}: not a {FORMAT} v{VERSION} file: "
                             f"{head.get('format')!r} v{head.get('version')!r}")
    rec = Recording(header=head)
    for n, line in enumerate(it, start=2):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            break  # a live run cut mid-line: everything before it stands
        if obj.get("k") == "cycle":
            if start <= obj["now"] <= end:
                rec.cycles.append(_cycle(obj))
        elif obj.get("k") == "mark":
            rec.marks.append(Mark(obj["role"], obj["group"], obj["event"], float(obj["at"])))
        else:
            raise RecordingError(f"{where}:{n}: unknown line kind {obj.get('k')!r}")
    return rec


def _cycle(obj: dict[str, Any]) -> Cycle:
    return Cycle(
        now=float(obj["now"]), snap=_dec(Snapshot, obj["snap"]),
        consumer={g: [_dec(ConsumerReport, r) for r in rs] for g, rs in obj["consumer"].items()},
        spark={g: _dec(SparkReport, r) for g, r in obj["spark"].items()},
        exact_ts={(t, p, o): ts for t, p, o, ts in obj["ts"]})


def load(path: str | Path, start: float = float("-inf"), end: float = float("inf")) -> Recording:
    path = Path(path)
    with _open_text(path) as f:
        return parse_lines(f, str(path), start, end)


# -- replay -----------------------------------------------------------------------------

@dataclass
class Timeline:
    """Each group's status at every cycle of a replay (absent: not seen that cycle)."""

    times: list[float]
    statuses: dict[str, list[str | None]]
    reasons: dict[str, list[tuple[str, ...]]]

    def cycle_at(self, t: float) -> int:
        """The first cycle evaluated at or after wall-clock time ``t``."""
        return next((i for i, now in enumerate(self.times) if now >= t), len(self.times))

    def first(self, group: str, status: str, from_cycle: int = 0) -> int | None:
        line = self.statuses.get(group, [])
        return next((i for i in range(from_cycle, len(line)) if line[i] == status), None)

    def changes(self, group: str, from_cycle: int = 0) -> list[tuple[int, str]]:
        """(cycle, status) at each change of the group's status from ``from_cycle`` on."""
        out: list[tuple[int, str]] = []
        for i, s in enumerate(self.statuses.get(group, [])[from_cycle:], start=from_cycle):
            if s is not None and (not out or out[-1][1] != s):
                out.append((i, s))
        return out

    def seen(self, group: str, from_cycle: int = 0, to_cycle: int | None = None) -> set[str]:
        return {s for s in self.statuses.get(group, [])[from_cycle:to_cycle] if s is not None}


def replay(rec: Recording, thresholds: Thresholds | None = None,
           groups: Iterable[str] | None = None) -> Timeline:
    """Feed every cycle through a fresh real :class:`Evaluator` with the recorded clock.
    ``thresholds`` replaces the recorded ones (what a rule change would do to a run)."""
    head = rec.header
    ev = Evaluator(head["cluster"], thresholds or rec.thresholds, rec.interval,
                   int(head["history_points"]), int(head["max_group_partitions"]),
                   rec.group_thresholds)
    want = None if groups is None else set(groups)
    tl = Timeline(times=[], statuses={}, reasons={})
    for i, c in enumerate(rec.cycles):
        view = ev.evaluate(c.snap, c.consumer, c.spark, c.exact_ts, now=c.now)
        tl.times.append(c.now)
        for gid, gv in view.groups.items():
            if want is not None and gid not in want:
                continue
            tl.statuses.setdefault(gid, [None] * i).append(gv.status.value)
            tl.reasons.setdefault(gid, [()] * i).append(gv.reasons)
        for gid, line in tl.statuses.items():
            if len(line) < i + 1:
                line.append(None)
                tl.reasons[gid].append(())
    return tl


# -- making a fixture -------------------------------------------------------------------

def _topics_of(c: Cycle, groups: set[str]) -> set[str]:
    topics = set()
    for gid in groups:
        g = c.snap.groups.get(gid)
        if g is not None:
            topics |= {t for t, _p in g.committed}
            topics |= {t for m in g.members for t, _p in (*m.assignment, *m.target)}
        for r in c.consumer.get(gid, ()):
            topics |= {t for t, _p in (*r.positions, *r.committed)}
        if (s := c.spark.get(gid)) is not None:
            topics |= {t for t, _p in (*s.end_offsets, *s.latest_offsets)}
    return topics


def narrow(c: Cycle, groups: set[str]) -> Cycle:
    """The cycle as if the exporter had watched only ``groups`` and their topics."""
    topics = _topics_of(c, groups)
    snap = dataclasses.replace(
        c.snap, partitions={tp: po for tp, po in c.snap.partitions.items() if tp[0] in topics},
        groups={g: s for g, s in c.snap.groups.items() if g in groups})
    return Cycle(now=c.now, snap=snap,
                 consumer={g: r for g, r in c.consumer.items() if g in groups},
                 spark={g: r for g, r in c.spark.items() if g in groups},
                 exact_ts={k: v for k, v in c.exact_ts.items() if k[0] in topics})


def fixture_lines(rec: Recording, marks: list[Mark], start: float, end: float) -> Iterator[str]:
    """The lines of a fixture: the cycles from ``start`` to ``end`` narrowed to the marked
    groups, then the marks."""
    groups = {m.group for m in marks}
    yield json.dumps(rec.header, separators=(",", ":"))
    for c in rec.cycles:
        if start <= c.now <= end:
            n = narrow(c, groups)
            yield json.dumps(cycle_line(n.snap, n.consumer, n.spark, n.exact_ts, n.now),
                             separators=(",", ":"))
    for m in marks:
        yield json.dumps({"k": "mark", **dataclasses.asdict(m)}, separators=(",", ":"))


def write_fixture(path: str | Path, lines: Iterable[str]) -> None:
    with lzma.open(path, "wt", encoding="utf-8", preset=9) as f:
        for line in lines:
            f.write(line + "\n")

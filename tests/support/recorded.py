"""Making the replay fixtures of tests/recordings/ from the live tests' own runs.

`make record` runs the live scenario tests with ``LAGWATCH_RECORD`` set to
tests/recordings: their exporters then record their evaluator inputs (``--record``), and
each module's :class:`Fixture` writes, when the module ends, the cycles of its time span
narrowed to its own groups, with marks for what its processes printed (READY, BLOCKED, ...)
and what the test did (KILLED, ...). Without ``LAGWATCH_RECORD`` nothing is written.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Protocol

from exporter import recording

RECORD_TO = os.environ.get("LAGWATCH_RECORD")


def record_dir() -> str | None:
    """A directory for an exporter's ``--record`` when recording, else None."""
    return tempfile.mkdtemp(prefix="lagwatch-rec-") if RECORD_TO else None


class Printer(Protocol):
    """A workload process whose stdout lines were collected as (arrival time, line)."""

    lines: list[tuple[float, str]]


def _line_marks(role: str, group: str, proc: Printer) -> list[recording.Mark]:
    """The first line starting with each upper-case word is an event; its time is the number
    after the word when that is a wall-clock time (the process's own clock), else when the
    line arrived."""
    out: dict[str, recording.Mark] = {}
    for arrived, line in list(proc.lines):
        words = line.split()
        if not words or not words[0].isupper() or words[0] in out:
            continue
        try:
            at = float(words[1])
        except (IndexError, ValueError):
            at = arrived
        if abs(at - arrived) > 3600:  # a count or an offset, not a time
            at = arrived
        out[words[0]] = recording.Mark(role, group, words[0], at)
    return list(out.values())


class Fixture:
    """One fixture file: the roles a module watches and what happened to them."""

    def __init__(self, name: str, sources: list[str | None]) -> None:
        self.name = name
        self.sources = sources  # the exporters' --record directories (more may be added)
        self.start = time.time()
        self.marks: list[recording.Mark] = []
        self.procs: list[tuple[str, str, Printer]] = []

    def watch(self, role: str, group: str, proc: Printer | None = None) -> None:
        self.marks.append(recording.Mark(role, group, "WATCHED", time.time()))
        if proc is not None:
            self.procs.append((role, group, proc))

    def mark(self, role: str, group: str, event: str, at: float | None = None) -> None:
        self.marks.append(recording.Mark(role, group, event, time.time() if at is None else at))

    def end(self, *roles: str) -> None:
        """The test is done with these roles: what follows (stopping them) is not theirs."""
        for m in [m for m in self.marks if m.role in roles and m.event == "WATCHED"]:
            self.mark(m.role, m.group, "END")

    def close(self) -> None:
        sources = [s for s in self.sources if s]
        if not RECORD_TO or not sources:
            return
        end = time.time()
        marks = [*self.marks, *(m for role, group, p in self.procs for m in _line_marks(role, group, p))]
        marks.sort(key=lambda m: m.at)
        recs = [recording.load(Path(d) / f, self.start - 1, end)
                for d in sources for f in sorted(os.listdir(d))]
        merged = recs[0]
        for r in recs[1:]:  # an exporter restarted in place: one run, continued
            merged.cycles.extend(r.cycles)
        merged.cycles.sort(key=lambda c: c.now)
        out = Path(RECORD_TO) / f"{self.name}.jsonl.xz"
        recording.write_fixture(out, recording.fixture_lines(merged, marks, self.start - 1, end))

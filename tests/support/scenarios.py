"""Real consumer processes and a recorder of the statuses lagwatch gives them, shared by the
scenario tests (test_scenarios.py, test_group_types.py)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO

from confluent_kafka import Producer

from devenv.kafka import KafkaCluster
from tests.conftest import ROOT_DIR, wait_for
from tests.support.exporter_proc import ExporterProcess, Samples, select


@dataclass
class Scenario:
    name: str
    group: str
    topic: str
    rate: float  # records per second the producer writes
    proc: subprocess.Popen | None = None
    lines: list[tuple[float, str]] = field(default_factory=list)
    produced_until: float = float("inf")

    errors: IO[str] | None = None  # the consumer's stderr, read back when an event never comes

    def event(self, word: str, timeout: float = 60) -> float:
        def find() -> float | None:
            for _t, line in self.lines:
                if line.startswith(word):
                    return float(line.split()[1])
            return None
        try:
            return wait_for(find, timeout, f"{self.name} to print {word}")
        except AssertionError as e:
            raise AssertionError(f"{e}; {self.said()}") from None

    def said(self) -> str:
        """What the consumer printed and whether it still runs: why an event did not come."""
        code = None if self.proc is None else self.proc.poll()
        err = ""
        if self.errors is not None:
            self.errors.seek(0)
            err = self.errors.read()[-2000:]
        return f"exit code {code}; printed {[line for _t, line in self.lines][-10:]}; stderr: {err!r}"


class Recorder(threading.Thread):
    """Scrapes the exporter continuously: per group, [(time, status)], the group's lag
    [(time, max lag seconds, lag offsets)] for timing failures to be understood, and its
    stall clocks (:meth:`stall_clock`)."""

    READS = frozenset({"lagwatch_cycles_total", "kafka_consumergroup_status",
                       "kafka_consumergroup_lag_offsets_sum", "kafka_consumergroup_max_lag_seconds",
                       "lagwatch_last_sample_timestamp_seconds", "lagwatch_sample_duration_seconds",
                       "kafka_consumergroup_stalled_seconds"})

    def __init__(self, exp: ExporterProcess) -> None:
        super().__init__(daemon=True)
        self.exp = exp
        self.timeline: dict[str, list[tuple[float, str]]] = {}
        self.lags: dict[str, list[tuple[float, float, float]]] = {}
        self.scrapes: list[tuple[float, int]] = []  # (time, lagwatch_cycles_total)
        # Per group and scrape time: (the cycle's sample time, {partition: stalled seconds > 0}).
        self.stall_clocks: dict[str, dict[float, tuple[float, dict[int, float]]]] = {}
        self.slowest_sample = 0.0  # the longest sampling (seconds) any scrape reported
        self.stop_flag = threading.Event()
        self.missed, self.last_miss = 0, ""  # scrapes that failed, and the last one's error

    def run(self) -> None:
        while not self.stop_flag.wait(0.5):
            try:
                m = self.exp.metrics(self.READS)
            except Exception as e:  # noqa: BLE001 - a missed scrape is just a gap, told in a failure
                self.missed, self.last_miss = self.missed + 1, repr(e)[:300]
                continue
            now = time.time()
            cycles = int(sum(select(m, "lagwatch_cycles_total").values()))
            self.scrapes.append((now, cycles))
            for lab, v in select(m, "kafka_consumergroup_status").items():
                if v == 1:
                    d = dict(lab)
                    self.timeline.setdefault(d["group"], []).append((now, d["status"]))
            offsets = select(m, "kafka_consumergroup_lag_offsets_sum")
            for lab, v in select(m, "kafka_consumergroup_max_lag_seconds").items():
                group = dict(lab)["group"]
                self.lags.setdefault(group, []).append((now, v, offsets.get(lab, -1.0)))
            self._record_stall_clocks(m, now)

    def _record_stall_clocks(self, m: Samples, now: float) -> None:
        sampled = max(select(m, "lagwatch_last_sample_timestamp_seconds").values(), default=0.0)
        took = max(select(m, "lagwatch_sample_duration_seconds").values(), default=0.0)
        self.slowest_sample = max(self.slowest_sample, took)
        for lab, v in select(m, "kafka_consumergroup_stalled_seconds").items():
            if v > 0:
                d = dict(lab)
                clocks = self.stall_clocks.setdefault(d["group"], {})
                clocks.setdefault(now, (sampled, {}))[1][int(d["partition"])] = v

    def stall_clock(self, group: str, at: float) -> tuple[float, dict[int, float]]:
        """The scrape at ``at`` of the group: its cycle's sample time and, per partition whose
        committed offset stood while behind, for how many seconds (as served)."""
        return self.stall_clocks.get(group, {}).get(at, (0.0, {}))

    def cycles_after(self, t: float) -> int:
        """The exporter's cycle count at the first scrape at or after ``t``: at least the
        cycles it had completed at ``t``."""
        return next((c for at, c in list(self.scrapes) if at >= t), self.scrapes[-1][1])

    def cycles_before(self, t: float) -> int:
        """The cycle count at the last scrape before ``t``: at most the cycles completed at ``t``."""
        return next((c for at, c in reversed(list(self.scrapes)) if at < t), 0)

    def cycles_to(self, group: str, status: str, since: float, timeout: float) -> int:
        """Exporter cycles from ``since`` to the first cycle that could have shown ``status``
        (waiting up to ``timeout`` seconds for it). A lower bound: the status is dated to the
        cycle after the last scrape without it, and ``since`` to the first scrape after it,
        so a recorder starved on a busy machine can make it smaller, never larger."""
        t = self.first(group, status, timeout, since)
        return self.cycles_before(t) + 1 - self.cycles_after(since)

    def statuses(self, group: str, since: float = 0.0) -> list[tuple[float, str]]:
        return [(t, s) for t, s in list(self.timeline.get(group, [])) if t >= since]

    def lag_line(self, group: str, since: float) -> list[tuple[float, float, int]]:
        """(seconds since ``since``, max lag seconds, lag offsets) of the group."""
        return [(round(t - since, 1), round(v, 1), int(o))
                for t, v, o in list(self.lags.get(group, [])) if t >= since]

    def changes(self, group: str, since: float = 0.0) -> list[tuple[float, str]]:
        """(time, status) at each change of the group's status since ``since``."""
        out: list[tuple[float, str]] = []
        for t, s in self.statuses(group, since):
            if not out or out[-1][1] != s:
                out.append((t, s))
        return out

    def story(self, group: str, since: float) -> str:
        """A group's status changes and lag line since ``since``, for a failure message."""
        changes = [(round(t - since, 1), s) for t, s in self.changes(group, since)]
        lags = self.lag_line(group, since)[:80]
        missed = f"; {self.missed} scrapes failed, the last: {self.last_miss}" if self.missed else ""
        return f"status changes: {changes[:40]}; lag (s, seconds, offsets): {lags}{missed}"

    def first(self, group: str, status: str, timeout: float, since: float = 0.0) -> float:
        def find() -> float | None:
            return next((t for t, s in self.statuses(group, since) if s == status), None)
        try:
            return wait_for(find, timeout, f"{group} to become {status}")
        except AssertionError as e:  # what the group did meanwhile, read at the timeout
            raise AssertionError(f"{e}; {self.story(group, since)}") from None


class CommitWatch(threading.Thread):
    """Reads a group's committed offsets (a share group's start offsets) from Kafka every
    0.25 s, apart from the exporter: the truth a ``stalled`` verdict is held against."""

    def __init__(self, read: Callable[[], dict[int, int]]) -> None:
        super().__init__(daemon=True)
        self.read = read
        self.reads: list[tuple[float, float, dict[int, int]]] = []  # (asked at, answered at, offsets)
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.wait(0.25):
            asked = time.time()
            try:
                offsets = self.read()
            except Exception:  # noqa: BLE001 - a missed read is just a gap
                continue
            self.reads.append((asked, time.time(), offsets))

    def moved_within(self, partition: int, start: float, end: float) -> list[tuple[float, int]]:
        """The partition's offsets read wholly within [start, end] (asked at, offset), when they
        differ (it moved in that span); empty when they do not, or nothing was read then. A
        starved reader reads less and so finds fewer moves, never more."""
        seen = [(round(a, 2), o[partition]) for a, b, o in list(self.reads)
                if a >= start and b <= end and partition in o]
        return seen if len({o for _a, o in seen}) > 1 else []


def spawn(kafka: KafkaCluster, sc: Scenario, mode: str, *extra: str,
          module: str = "devenv.scenario_consumer") -> None:
    """Start the scenario's consumer (``module``'s, with ``--mode`` unless ``mode`` is "")
    and collect the lines it prints; its stderr goes to a temporary file (:meth:`Scenario.said`)."""
    sc.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 - kept open while the consumer runs
    sc.proc = subprocess.Popen(
        [sys.executable, "-m", module, *(("--mode", mode) if mode else ()), "--bootstrap",
         kafka.bootstrap_servers, "--group", sc.group, "--topic", sc.topic, *extra],
        cwd=ROOT_DIR, stdout=subprocess.PIPE, stderr=sc.errors, text=True)

    def pump() -> None:
        assert sc.proc and sc.proc.stdout
        for line in sc.proc.stdout:
            sc.lines.append((time.time(), line.strip()))

    threading.Thread(target=pump, daemon=True).start()


class Workload(threading.Thread):
    """One producer writing each scenario's topic at its rate until told otherwise."""

    def __init__(self, kafka: KafkaCluster, scenarios: list[Scenario]) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 10})
        self.scenarios = scenarios
        self.stop_flag = threading.Event()

    def run(self) -> None:
        tick = 0.1
        credit = {s.name: 0.0 for s in self.scenarios}
        while not self.stop_flag.wait(tick):
            now = time.time()
            for s in self.scenarios:
                if now >= s.produced_until:
                    continue
                credit[s.name] += s.rate * tick
                while credit[s.name] >= 1:
                    self.producer.produce(s.topic, value=b"x" * 100)
                    credit[s.name] -= 1
            self.producer.poll(0)
        self.producer.flush(10)


def stop_all(scs: Iterable[Scenario]) -> None:
    """Terminate the scenarios' processes still running, then wait for each (killed after 15 s);
    their stderr files are closed."""
    scs = list(scs)
    for s in scs:
        if s.proc and s.proc.poll() is None:
            s.proc.terminate()
    for s in scs:
        if s.proc:
            try:
                s.proc.wait(15)
            except subprocess.TimeoutExpired:
                s.proc.kill()
        if s.errors is not None:
            s.errors.close()
            s.errors = None

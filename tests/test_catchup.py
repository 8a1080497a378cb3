"""Time to catch up, on the real broker: a consumer throttled to a known rate
(tests/support/paced_consumer.py) against a producer at a known rate.

* faster than production, from a backlog: the exporter's estimate
  (kafka_consumergroup_catchup_seconds, as of the sample it was computed from) is within
  25 % of the time the consumer actually takes to reach the high watermark, which the
  consumer itself reports;
* slower than production: never an estimate, the consumed rate below the produced one
  (each within 25 % of the known rates) and a "falling behind" reason.

Time is counted in exporter cycles; wall clock bounds only the waits (hang guards).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from devenv.kafka import KafkaCluster
from tests.conftest import (
    INTERVAL,
    ROOT_DIR,
    WINDOW,
    create_topic,
    cycles,
    cycles_until,
    produce,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, value
from tests.support.scenarios import Scenario, Workload

PRODUCE = 20.0  # records/s, both topics
FAST, SLOW = 60.0, 10.0  # records/s the two consumers are throttled to
BACKLOG = 800  # records per partition (2 partitions) waiting when the fast consumer starts
# The backlog is written in batches this small so that the fast consumer's small fetches
# (tests/support/paced_consumer.py) take it from both partitions in turn.
BACKLOG_BATCH = 20
MIN_SPAN = max(WINDOW / 4, 3 * INTERVAL)  # exporter/evaluate/rates.py: min_span
SEE = 3  # cycles for a change to show: the next sample, and a cycle already under way
TOLERANCE = 0.25


def _spawn(kafka: KafkaCluster, sc: Scenario, rate: float) -> None:
    sc.proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.paced_consumer", kafka.bootstrap_servers, sc.topic, sc.group,
         f"{rate:g}"], cwd=ROOT_DIR, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def pump() -> None:
        assert sc.proc and sc.proc.stdout
        for line in sc.proc.stdout:
            sc.lines.append((time.time(), line.strip()))

    threading.Thread(target=pump, daemon=True).start()


@pytest.fixture(scope="module")
def paced(kafka: KafkaCluster) -> Iterator[dict[str, Scenario]]:
    sc = {n: Scenario(n, unique(f"pace-{n}"), create_topic(kafka, unique(f"pace-{n}"), partitions=2),
                      PRODUCE) for n in ("fast", "slow")}
    produce(kafka, sc["fast"].topic, {0: BACKLOG, 1: BACKLOG}, **{"batch.num.messages": BACKLOG_BATCH})
    work = Workload(kafka, list(sc.values()))
    work.start()
    _spawn(kafka, sc["fast"], FAST)
    _spawn(kafka, sc["slow"], SLOW)
    try:
        yield sc
    finally:
        work.stop_flag.set()
        work.join(20)
        for s in sc.values():
            if s.proc is not None:
                s.proc.terminate()
                s.proc.wait(15)


def _estimate(exp: ExporterProcess, group: str) -> tuple[float, float] | None:
    """(estimate, wall clock of the sample it was computed from), from one scrape."""
    m = exp.metrics()
    eta = value(m, "kafka_consumergroup_catchup_seconds", cluster="test", group=group)
    at = value(m, "lagwatch_last_sample_timestamp_seconds", cluster="test")
    return None if eta is None or at is None else (eta, at)


def test_estimate_within_25_percent_of_the_actual_catch_up(
        exporter: ExporterProcess, paced: dict[str, Scenario]) -> None:
    sc = paced["fast"]
    sc.event("START", 60)
    seen: list[tuple[float, float]] = []  # (sample time, estimate)

    def estimated() -> bool:
        got = _estimate(exporter, sc.group)
        if got is not None and (not seen or seen[-1][0] != got[1]):
            seen.append((got[1], got[0]))
        return got is not None

    # The consumer takes the backlog from both partitions in turn, so both are committed
    # within seconds. Rates need a quarter of the window of both: the estimate comes then,
    # not many cycles later.
    def both_committed() -> bool:
        m = exporter.metrics()
        return all(value(m, "kafka_consumergroup_committed_offset", cluster="test", group=sc.group,
                         partition=str(p)) is not None for p in (0, 1))
    wait_for(both_committed, 30, "committed offsets on both partitions")
    n = cycles_until(exporter, estimated, MIN_SPAN + 10, "a time to catch up for the fast group")
    assert n <= cycles(MIN_SPAN) + 2 * SEE, n
    # catch-up, records lost, records below the log start, exposure (its reports carry
    # none), then rebalances (in the storm window / since watched)
    assert re.search(r"<td class='num'>~\d+ s</td><td class='num'>0</td><td class='num below'>0</td>"
                     r"<td class='num exposure'>[^<]*(<span[^>]*>[^<]*</span>)?</td>"
                     r"<td class='num'>\d+ / \d+</td></tr>",
                     _row(exporter, sc.group))
    # Follow the estimate until the consumer reports it has caught up.
    total = 2 * BACKLOG / (FAST - PRODUCE)

    def done() -> float | None:
        estimated()
        return next((float(line.split()[1]) for _t, line in sc.lines if line.startswith("CAUGHT_UP")),
                    None)
    caught = wait_for(done, total + 10, "the fast consumer to catch up", interval=0.5)
    rows = [(round(caught - at, 1), round(eta, 1)) for at, eta in seen]
    first_at, first_eta = seen[0]
    actual = caught - first_at
    assert actual >= 10, f"caught up too soon after the first estimate to judge it: {rows}"
    assert abs(first_eta - actual) <= TOLERANCE * actual, f"(actual, estimated) seconds: {rows}"
    # and every later estimate made while at least 10 s remained
    bad = [(a, e) for a, e in rows if a >= 10 and abs(e - a) > TOLERANCE * a]
    assert not bad, f"(actual, estimated) seconds: {rows}"
    print(f"\nfirst estimate {first_eta:.1f} s, actual {actual:.1f} s; all (actual, estimated): {rows}")
    # Caught up: the estimate goes away (the group neither catches up nor falls behind).
    cycles_until(exporter, lambda: _estimate(exporter, sc.group) is None, 30, "the estimate to go")
    doc = exporter.api(f"clusters/test/groups/{sc.group}")
    assert doc["catchup_seconds"] is None and doc["falling_behind"] is False


def test_slower_consumer_gets_no_estimate_and_falls_behind(
        exporter: ExporterProcess, paced: dict[str, Scenario]) -> None:
    sc = paced["slow"]
    sc.event("START", 60)

    def rates() -> tuple[float, float] | None:
        m = exporter.metrics()
        c = value(m, "kafka_consumergroup_consumed_records_per_second", cluster="test", group=sc.group)
        p = value(m, "kafka_consumergroup_produced_records_per_second", cluster="test", group=sc.group)
        return None if c is None or p is None else (c, p)

    n = cycles_until(exporter, rates, MIN_SPAN + 10, "rates for the slow group")
    assert n <= cycles(MIN_SPAN) + 2 * SEE, n
    # Watch it for a while: a backlog builds, and there is never an estimate.
    seen = []
    for _ in range(5):
        got = wait_for(rates, 10, "rates")
        seen.append(got)
        assert _estimate(exporter, sc.group) is None, seen
        doc = exporter.api(f"clusters/test/groups/{sc.group}")
        if doc["lag_offsets"] and doc["lag_offsets"] > SLOW * WINDOW / 10:
            assert doc["falling_behind"] is True, doc
            assert any(r.startswith("falling behind by ") for r in doc["reasons"]), doc["reasons"]
        time.sleep(INTERVAL)
    c, p = seen[-1]
    print(f"\nslow group: consumed {c:.2f} records/s (throttled to {SLOW:g}), produced {p:.2f} "
          f"(producer at {PRODUCE:g}); reasons {doc['reasons']}")
    assert abs(c - SLOW) <= TOLERANCE * SLOW, seen
    assert abs(p - PRODUCE) <= TOLERANCE * PRODUCE, seen
    doc = exporter.api(f"clusters/test/groups/{sc.group}")
    assert doc["falling_behind"] is True and doc["catchup_seconds"] is None, doc
    assert "<span class='down'>falling behind</span>" in _row(exporter, sc.group)


def _row(exp: ExporterProcess, group: str) -> str:
    """The group's row of the status page."""
    page = exp.get("/")[1].decode()
    row = page[page.index(f"<td>{group}</td>"):]
    return row[:row.index("</tr>") + 5]

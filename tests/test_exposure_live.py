"""Redelivery exposure and commit mode on the real broker, through the shared exporter.

An instrumented Python consumer (lagwatch_client) and a JVM consumer through the interceptor
(clients/java) fetch P records of a partition and commit offset C (manual commits): the
exporter shows an exposure of exactly P - C for the partition and the group, with the commit
mode ``manual``. The same consumers with automatic commits show ``auto`` with their interval,
and an exposure falling to 0 once their automatic commit has run. The unit half (report
fields, older reports, Spark's running batch) is tests/test_exposure.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import TopicPartition

from devenv.jvm_apps import INTERCEPTOR, JvmApp
from devenv.kafka import KafkaCluster
from lagwatch_client import InstrumentedConsumer
from tests.conftest import create_topic, cycles_until, produce, unique, wait_for
from tests.support.exporter_proc import ExporterProcess

# Cycles for a report to reach the served view: the consumer's next report (0.5-1 s, as
# long as a cycle), the reports tail, the cycle under way, the next one and its publication.
SEE = 8
# An automatic commit runs at the first poll after its interval: that many cycles more.
AUTO_INTERVAL_CYCLES = 3
HANG_GUARD = 120  # seconds: only against a hang, the bound is SEE cycles
JVM_REPORTING = (f"prop.interceptor.classes={INTERCEPTOR}", "prop.lagwatch.report.interval.ms=500")


def _group(exp: ExporterProcess, group: str) -> dict[str, Any] | None:
    code, body, _ = exp.get(f"/api/v1/clusters/test/groups/{group}")
    return json.loads(body) if code == 200 else None


def _exposure(doc: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """(group exposure, {partition: exposure}, commit mode, auto-commit interval) as served."""
    if doc is None:
        return None
    return (doc["redelivery_exposure_records"],
            {p["partition"]: p["redelivery_exposure_records"] for p in doc["partitions"]},
            doc["commit_mode"], doc["auto_commit_interval_seconds"])


def _wait_served(exp: ExporterProcess, group: str, want: tuple[Any, ...], what: str,
                 within: int = SEE) -> dict[str, Any]:
    """The group's document once it shows ``want``, within ``within`` cycles of the change."""
    n = cycles_until(exp, lambda: _exposure(_group(exp, group)) == want, HANG_GUARD, what)
    doc = _group(exp, group)
    assert doc is not None
    assert n <= within, (n, _exposure(doc))
    return doc


def _page_cell(exp: ExporterProcess, group: str) -> str:
    """The redelivery-exposure cell of the group's row on the status page."""
    code, body, _ = exp.get("/")
    assert code == 200
    page = body.decode()
    row = page[page.index(f"<td>{group}</td>"):]
    row = row[:row.index("</tr>")]
    cell = row[row.index("<td class='num exposure'>"):]
    return cell[:cell.index("</td>") + len("</td>")]


@contextmanager
def python_consumer(kafka: KafkaCluster, topic: str, group: str, records: int,
                    commit: dict[int, int] | None, **conf: Any) -> Iterator[InstrumentedConsumer]:
    """An InstrumentedConsumer that fetched ``records`` records, committed ``commit``
    (synchronously) and keeps polling (a live consumer) until the block ends."""
    c = InstrumentedConsumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group,
                              "auto.offset.reset": "earliest", **conf}, report_interval=0.5)
    c.subscribe([topic])
    seen = 0

    def fetch() -> bool:
        nonlocal seen
        msg = c.poll(0.2)
        seen += msg is not None and msg.error() is None
        return seen >= records

    wait_for(fetch, HANG_GUARD, f"{records} records fetched", interval=0)
    if commit:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in commit.items()], asynchronous=False)
    stop = threading.Event()

    def keep_polling() -> None:  # nothing left to fetch: the position stays where it is
        while not stop.is_set():
            c.poll(0.2)

    poller = threading.Thread(target=keep_polling, daemon=True)
    poller.start()
    try:
        yield c
    finally:
        stop.set()
        poller.join(5)
        c.close()
    assert c.instrumentation_errors == 0


def test_python_consumer_manual_commits_exposure_is_position_minus_committed(
        kafka: KafkaCluster, exporter: ExporterProcess) -> None:
    topic = create_topic(kafka, unique("expose-py"), partitions=2)
    produce(kafka, topic, {0: 30, 1: 20})
    group = unique("expose-py-g")
    # fetched everything (positions 30 and 20), committed 12 and 20
    with python_consumer(kafka, topic, group, 50, {0: 12, 1: 20}, **{"enable.auto.commit": False}):
        doc = _wait_served(exporter, group, (18, {0: 18, 1: 0}, "manual", None),
                           "exposure 30-12 and 20-20, manual")
        page = _page_cell(exporter, group)
    assert page == "<td class='num exposure'>18 <span class='reason'>manual</span></td>"
    parts = {p["partition"]: (p["position_offset"], p["committed_offset"]) for p in doc["partitions"]}
    assert parts == {0: (30, 12), 1: (20, 20)}
    assert [m["commit_mode"] for m in doc["members"]] == ["manual"]


def test_python_consumer_auto_commits_show_their_interval_and_drain_exposure(
        kafka: KafkaCluster, exporter: ExporterProcess) -> None:
    topic = create_topic(kafka, unique("expose-py-auto"), partitions=1)
    produce(kafka, topic, {0: 25})
    group = unique("expose-py-auto-g")
    with python_consumer(kafka, topic, group, 25, None,
                         **{"enable.auto.commit": True, "auto.commit.interval.ms": 1500}):
        doc = _wait_served(exporter, group, (0, {0: 0}, "auto", 1.5),
                           "auto commits every 1.5 s, everything committed", SEE + AUTO_INTERVAL_CYCLES)
    assert [(m["commit_mode"], m["auto_commit_interval_seconds"]) for m in doc["members"]] == [("auto", 1.5)]
    assert doc["partitions"][0]["committed_offset"] == 25


def _jvm(kafka: KafkaCluster, topic: str, group: str, records: int, commit_at: int, *props: str) -> JvmApp:
    return JvmApp("LagConsumer", "mode=exposure", f"bootstrap={kafka.bootstrap_servers}",
                  f"group={group}", f"topic={topic}", f"count={records}", f"commitat={commit_at}",
                  *JVM_REPORTING, *props)


def test_jvm_consumer_through_the_interceptor_shows_exposure_and_manual_mode(
        kafka: KafkaCluster, exporter: ExporterProcess) -> None:
    topic = create_topic(kafka, unique("expose-jvm"), partitions=1)
    produce(kafka, topic, {0: 40})
    group = unique("expose-jvm-g")
    app = _jvm(kafka, topic, group, 40, 15)
    try:
        assert app.event("EXPOSED", HANG_GUARD) == ["40", "15"]  # position 40, committed 15
        doc = _wait_served(exporter, group, (25, {0: 25}, "manual", None), "exposure 40-15, manual")
    finally:
        app.stop()
    assert [(p["position_offset"], p["committed_offset"]) for p in doc["partitions"]] == [(40, 15)]


def test_jvm_consumer_with_auto_commit_shows_auto_and_its_interval(
        kafka: KafkaCluster, exporter: ExporterProcess) -> None:
    topic = create_topic(kafka, unique("expose-jvm-auto"), partitions=1)
    produce(kafka, topic, {0: 40})
    group = unique("expose-jvm-auto-g")
    app = _jvm(kafka, topic, group, 40, -1, "prop.enable.auto.commit=true",
               "prop.auto.commit.interval.ms=2000")
    try:
        assert app.event("EXPOSED", HANG_GUARD) == ["40", "-1"]
        doc = _wait_served(exporter, group, (0, {0: 0}, "auto", 2.0),
                           "auto commits every 2 s, everything committed", SEE + AUTO_INTERVAL_CYCLES)
        page = _page_cell(exporter, group)
    finally:
        app.stop()
    assert doc["partitions"][0]["committed_offset"] == 40
    assert page == "<td class='num exposure'>0 <span class='reason'>auto every 2 s</span></td>"

"""Records lost to retention, on the real broker: ``delete_records`` moves the log start past
a group's committed offset, the exporter counts exactly the records deleted unread (and
nothing when the deletion stays below the committed offset), and the shipped
KafkaConsumerGroupRecordsLost rule fires in a real Prometheus for that group only."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from devenv.kafka import KafkaCluster
from tests.conftest import (
    KAFKA_VERSION,
    ROOT_DIR,
    admin_for,
    commit_offsets,
    create_topic,
    cycles_until,
    exporter_config,
    produce,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, value
from tests.support.prometheus_proc import PrometheusProcess

RULES = ROOT_DIR / "alerts" / "lagwatch.rules.yml"
ALERT = "KafkaConsumerGroupRecordsLost"
# Cycles the exporter may take to see a change: the cycle already under way when the
# change was made, the next cycle's sample, and the one that publishes it.
SEE = 3


def _delete(kafka: KafkaCluster, topic: str, upto: dict[int, int]) -> None:
    """Delete the records of each partition below ``upto[p]`` (what kafka-delete-records does)."""
    admin = admin_for(kafka)
    futs = admin.delete_records([TopicPartition(topic, p, o) for p, o in upto.items()])
    for f in futs.values():
        f.result(30)


def _lost(exp: ExporterProcess, group: str) -> float | None:
    return value(exp.metrics(), "kafka_consumergroup_records_lost_total", cluster="test", group=group)


@pytest.fixture(scope="module")
def prom(exporter: ExporterProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    work = Path(tmp_path_factory.mktemp("prom-lost"))
    rules = Path(shutil.copy(RULES, work / RULES.name))
    p = PrometheusProcess(work / "prometheus", targets={"lagwatch": [f"127.0.0.1:{exporter.port}"]},
                          rule_files=[rules])
    try:
        p.wait_ready()
        yield p
    finally:
        p.stop()


def test_delete_records_below_the_committed_offset_counts_exactly(
        kafka: KafkaCluster, exporter: ExporterProcess, prom: PrometheusProcess) -> None:
    topic = create_topic(kafka, unique("lost"), partitions=2)
    produce(kafka, topic, {0: 100, 1: 100})
    lossy, safe = unique("lost-g"), unique("safe-g")
    commit_offsets(kafka.bootstrap_servers, lossy, topic, {0: 60, 1: 100})
    commit_offsets(kafka.bootstrap_servers, safe, topic, {0: 100, 1: 100})
    started = time.time()
    for g in (lossy, safe):  # first sight: the baseline, served at 0
        wait_for(lambda g=g: _lost(exporter, g) == 0, 30, f"records_lost_total of {g} at 0")
    wait_for(lambda: prom.query(f'kafka_consumergroup_records_lost_total{{group="{lossy}"}}'), 30,
             "Prometheus to scrape the counter at 0")

    # 40 records of partition 0 deleted unread by lossy; partition 1 deleted only below
    # both groups' committed offsets; safe has read everything deleted.
    _delete(kafka, topic, {0: 100, 1: 50})
    n = cycles_until(exporter, lambda: _lost(exporter, lossy) == 40, 30, "40 records lost")
    assert n <= SEE, n
    doc = exporter.api(f"clusters/test/groups/{lossy}")
    p0 = next(p for p in doc["partitions"] if p["partition"] == 0)
    p1 = next(p for p in doc["partitions"] if p["partition"] == 1)
    assert (p0["records_lost_total"], p0["records_below_log_start"]) == (40, 40)
    assert (p1["records_lost_total"], p1["records_below_log_start"]) == (0, 0)
    assert doc["records_lost_total"] == 40
    assert f"{topic}[0]: 40 records deleted by retention before the group read them " \
           f"(committed 60 < log start 100)" in doc["reasons"]
    page = exporter.get("/")[1].decode()
    row = page[page.index(f"<td>{lossy}</td>"):]
    row = row[:row.index("</tr>")]
    assert "40 records deleted by retention" in row  # the reason
    # the records lost column, the records below the log start now, the exposure (unknown:
    # no instrumented member), then rebalances: none (no member ever joined the group)
    assert row.endswith("<td class='num'><span class='down'>40</span></td>"
                        "<td class='num below'><span class='down'>40</span></td>"
                        "<td class='num exposure'>&ndash;</td><td class='num'>0 / 0</td>")

    # Counted once, not again at every cycle while the committed offset stays below.
    cycles_until(exporter, lambda: True, 5, "a cycle")
    start = _cycles(exporter)
    wait_for(lambda: _cycles(exporter) >= start + 3, 15, "three more cycles")
    assert _lost(exporter, lossy) == 40 and _lost(exporter, safe) == 0

    # A second deletion counts only the records newly lost: 100..130 (safe reads the new
    # records first, and the exporter sees it before anything is deleted).
    produce(kafka, topic, {0: 50})
    commit_offsets(kafka.bootstrap_servers, safe, topic, {0: 150, 1: 100})
    wait_for(lambda: value(exporter.metrics(), "kafka_consumergroup_committed_offset", group=safe,
                           partition="0") == 150, 30, "the exporter to see safe at 150")
    _delete(kafka, topic, {0: 130})
    cycles_until(exporter, lambda: _lost(exporter, lossy) == 70, 30, "70 records lost")
    # The group moves past the log start, then loses 140..150: counted from where it stood.
    commit_offsets(kafka.bootstrap_servers, lossy, topic, {0: 140, 1: 100})
    wait_for(lambda: value(exporter.metrics(), "kafka_consumergroup_committed_offset", group=lossy,
                           partition="0") == 140, 30, "the exporter to see committed 140")
    _delete(kafka, topic, {0: 150})
    cycles_until(exporter, lambda: _lost(exporter, lossy) == 80, 30, "80 records lost")
    assert _lost(exporter, safe) == 0

    _fires_for_only(prom, lossy, safe, started)


def _fires_for_only(prom: PrometheusProcess, lossy: str, safe: str, started: float) -> None:
    """The shipped rule fires in a real Prometheus, for the lossy group only."""
    def firing() -> list:
        return [a for a in prom.alerts() if a["labels"].get("alertname") == ALERT
                and a["labels"].get("group") == lossy and a["state"] == "firing"]
    fired = wait_for(firing, 30, f"{ALERT} firing for {lossy}")
    assert fired[0]["labels"]["severity"] == "critical" and fired[0]["labels"]["cluster"] == "test"
    def scraped() -> list[float]:  # the counter as Prometheus parsed it
        got = prom.query(f'kafka_consumergroup_records_lost_total{{group="{lossy}"}}')
        return [float(s["value"][1]) for s in got]
    wait_for(lambda: scraped() == [80.0], 10, "Prometheus to scrape 80")
    hist = prom.query_range(f'ALERTS{{alertname="{ALERT}", group="{safe}"}}', started, time.time())
    assert hist == [], hist


def _cycles(exp: ExporterProcess) -> int:
    return int(value(exp.metrics(), "lagwatch_cycles_total", cluster="test") or 0)


# -- retention on small segments ---------------------------------------------------------

@pytest.fixture(scope="module")
def retention_kafka() -> Iterator[KafkaCluster]:
    """A broker of its own that enforces retention every half second (Kafka checks every 5
    minutes, after a 30 s start-up delay, by default; neither can change at runtime)."""
    cluster = KafkaCluster(brokers_count=1, version=KAFKA_VERSION, heap="512m",
                           extra_config={"log.retention.check.interval.ms": "500",
                                         "log.initial.task.delay.ms": "500"})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _earliest(kafka: KafkaCluster, topic: str) -> int:
    """Kafka's own log start offset of partition 0 (ListOffsets earliest)."""
    c = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": unique("probe"),
                  "enable.auto.commit": False})
    try:
        lo, _hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return lo
    finally:
        c.close()


def test_retention_on_small_segments_is_counted_exactly(retention_kafka: KafkaCluster,
                                                        tmp_path: Path) -> None:
    kafka = retention_kafka
    # One segment per batch (segment.ms), each deleted 4 s after its last record.
    topic = create_topic(kafka, unique("retained"), partitions=1,
                         config={"segment.ms": "1000", "retention.ms": "4000"})
    group = unique("late-g")
    with ExporterProcess(None, config=exporter_config(tmp_path, kafka.bootstrap_servers)) as exp:
        exp.wait_ready()
        # Retention's 4 s start now: the exporter must see the group before (a loss at first
        # sight is a baseline, not counted).
        produce(kafka, topic, {0: 30})
        commit_offsets(kafka.bootstrap_servers, group, topic, {0: 10})
        wait_for(lambda: _lost(exp, group) == 0, 30, "the group seen")
        assert _earliest(kafka, topic) == 0, "retention ran before the exporter saw the group"
        for _ in range(2):
            time.sleep(1.5)  # past segment.ms: the next batch starts a new segment
            produce(kafka, topic, {0: 30})
        # Retention deletes the segments one after the other (two at least, each counted as
        # it goes); wait until Kafka's log start has settled, then the exporter must have
        # counted exactly the records below it.
        settled: list[int] = []

        def counted() -> bool:
            ls = _earliest(kafka, topic)
            settled.append(ls)
            return ls >= 60 and settled[-3:] == [ls] * 3 and _lost(exp, group) == ls - 10
        wait_for(counted, 30, f"records lost = log start - 10; log starts seen {settled[-5:]}")
        final = settled[-1]
        cycles_until(exp, lambda: True, 5, "one more cycle")
        assert _lost(exp, group) == final - 10, (final, settled)
        doc = exp.api(f"clusters/test/groups/{group}")
        assert doc["records_below_log_start"] == final - 10
        print(f"\nretention moved the log start to {final}: {final - 10} records lost, counted")


# -- a loss older than lagwatch ----------------------------------------------------------

def _first_cycle(exp: ExporterProcess, group: str) -> dict:
    """The samples of the exporter's first published cycle (``lagwatch_cycles_total`` 1;
    its interval leaves the test seconds to scrape it before the second)."""
    def first():
        m = exp.metrics()
        n = value(m, "lagwatch_cycles_total", cluster="test")
        if not n:
            return None
        assert n == 1, f"cycle {n} is the first one scraped: the interval is too short"
        return m
    m = wait_for(first, 60, "the exporter's first cycle")
    assert value(m, "kafka_consumergroup_committed_offset", group=group, partition="0") is not None
    return m


def _deficit(m: dict, group: str) -> tuple[float | None, float | None, float | None, float | None]:
    """(partition 0's records below the log start, partition 1's, the group's, records lost)."""
    return (value(m, "kafka_consumergroup_records_below_log_start", group=group, partition="0"),
            value(m, "kafka_consumergroup_records_below_log_start", group=group, partition="1"),
            value(m, "kafka_consumergroup_group_records_below_log_start", group=group),
            value(m, "kafka_consumergroup_records_lost_total", group=group))


def test_a_loss_older_than_lagwatch_is_served_at_once_and_never_counted(
        kafka: KafkaCluster, tmp_path: Path) -> None:
    """A group already 40 records below the log start when lagwatch starts: the gauge serves
    40 from the first cycle (metrics, API, status page), the counter stays 0 until a new
    deletion passes the committed offset, and a restarted lagwatch serves the deficit at
    once again without counting it."""
    topic = create_topic(kafka, unique("old-loss"), partitions=2)
    produce(kafka, topic, {0: 100, 1: 100})
    group = unique("old-loss-g")
    commit_offsets(kafka.bootstrap_servers, group, topic, {0: 60, 1: 100})
    _delete(kafka, topic, {0: 100, 1: 50})  # p0: 60..100 gone unread; p1: below committed
    # A state topic of its own: the session's exporter (cluster "test" too) may have sampled
    # the group before the deletion, and its state would make the deletion a loss seen.
    cfg = exporter_config(tmp_path, kafka.bootstrap_servers, interval=3.0, clusters=[
        {"name": "test", "bootstrap_servers": kafka.bootstrap_servers,
         "state": {"topic": unique("old-loss-state")}}])
    with ExporterProcess(None, config=cfg) as exp:
        exp.wait_ready()
        assert _deficit(_first_cycle(exp, group), group) == (40, None, 40, 0)
        doc = exp.api(f"clusters/test/groups/{group}")
        assert (doc["records_below_log_start"], doc["records_lost_total"]) == (40, 0)
        p0 = next(p for p in doc["partitions"] if p["partition"] == 0)
        assert (p0["records_below_log_start"], p0["records_lost_total"]) == (40, 0)
        page = exp.get("/")[1].decode()
        row = page[page.index(f"<td>{group}</td>"):]
        row = row[:row.index("</tr>")]
        assert "<td class='num'>0</td><td class='num below'><span class='down'>40</span></td>" in row

        cycles_until(exp, lambda: True, 30, "a cycle")
        start = _cycles(exp)
        wait_for(lambda: _cycles(exp) >= start + 2, 30, "two more cycles")
        assert _deficit(exp.metrics(), group) == (40, None, 40, 0)  # never counted

        produce(kafka, topic, {0: 50})
        _delete(kafka, topic, {0: 130})  # 30 more of the group's records: a new loss
        n = cycles_until(exp, lambda: _deficit(exp.metrics(), group) == (70, None, 70, 30), 30,
                         "30 records lost and 70 below the log start")
        assert n <= SEE, n
    with ExporterProcess(None, config=cfg) as exp:  # restarted: the deficit, not a new loss
        exp.wait_ready()
        # the counter continues from the state topic (written in the cycle it moved)
        assert _deficit(_first_cycle(exp, group), group) == (70, None, 70, 30)

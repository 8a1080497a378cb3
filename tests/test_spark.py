"""The PySpark listener: offset parsing (fast), and real Spark queries on the real broker.

The Spark tests run once per supported Spark line, PySpark 4.0 and 3.5, each in
one driver process (tests/support/spark_driver.py: local[2], the spark-sql-kafka
connector jars resolved by tools/fetch-jars, one LagListener), against one
exporter subprocess. Each test starts its own query on its own topic and
compares what the exporter serves with the offsets the test itself produced.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from devenv.groups_tool import describe_group
from devenv.jars import SPARK35_VERSION, SPARK_NEWEST_VERSION, spark_kafka_jars
from devenv.kafka import KafkaCluster
from devenv.pyenvs import spark_python
from exporter.reports.decode import decode
from spark_metrics.offsets import OffsetParseError, parse_offsets, parse_progress
from tests.conftest import create_topic, cycles, produce, unique, wait_for
from tests.support.dists import Dist, distributions, pip_install
from tests.support.exporter_proc import ExporterProcess, group_offsets, select, value
from tests.support.recorded import Fixture, record_dir
from tests.support.spark_proc import SparkDriverProcess

# --- real progress shapes ------------------------------------------------------------------

# json.loads(event.progress.json) of batch 1 of a classic PySpark 4.2.0 query reading two topics
# (captured from a run against the test broker).
CLASSIC_PROGRESS = {
    "id": "ab7eaefa-9672-450a-86f9-5da60f46c128", "runId": "c237318d-6d74-4483-9e7a-60acedb6f0e4",
    "name": "explore", "timestamp": "2026-11-21T20:30:15.001Z", "batchId": 1, "batchDuration": 782,
    "numInputRows": 3, "inputRowsPerSecond": 3.0, "processedRowsPerSecond": 3.8,
    "durationMs": {"addBatch": 616, "commitOffsets": 98, "getBatch": 0, "latestOffset": 8,
                   "queryPlanning": 20, "triggerExecution": 782, "walCommit": 37},
    "stateOperators": [],
    "sources": [{
        "description": "KafkaV2[Subscribe[ta, tb]]",
        "startOffset": {"ta": {"0": 30, "1": 12}, "tb": {"0": 5}},
        "endOffset": {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}},
        "latestOffset": {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}},
        "numInputRows": 3, "inputRowsPerSecond": 3.0, "processedRowsPerSecond": 3.8,
        "metrics": {"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": "0",
                    "minOffsetsBehindLatest": "0"}}],
    "sink": {"description": "NoopTable", "numOutputRows": 3},
}


def _source(desc: str, end: Any, latest: Any = None, start: Any = None) -> dict[str, Any]:
    return {"description": desc, "startOffset": start, "endOffset": end, "latestOffset": latest,
            "numInputRows": 0, "inputRowsPerSecond": 0.0, "processedRowsPerSecond": 0.0,
            "metrics": {}}


def test_classic_progress_json() -> None:
    info = parse_progress(json.dumps(CLASSIC_PROGRESS))
    assert info.query_id == CLASSIC_PROGRESS["id"] and info.run_id == CLASSIC_PROGRESS["runId"]
    assert info.name == "explore" and info.batch_id == 1 and info.batch_duration_ms == 782
    assert info.input_rows_per_second == 3.0 and info.processed_rows_per_second == 3.8
    assert info.kafka_sources == 1 and not info.errors
    assert info.end_offsets == {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}}
    assert info.latest_offsets == {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}}


def test_first_batch_has_null_start_and_pre_4_0_has_no_batch_duration() -> None:
    p = copy.deepcopy(CLASSIC_PROGRESS)
    p["sources"][0]["startOffset"] = None
    del p["batchDuration"]  # Spark < 4.0 (SPARK-44971)
    info = parse_progress(p)
    assert info.batch_duration_ms == 782  # durationMs.triggerExecution
    assert info.end_offsets["ta"] == {"0": 33, "1": 12}


def test_connect_progress_objects_and_repr_offsets() -> None:
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    # Spark Connect builds the progress from JSON: PySpark 4.0/4.1 leave the offsets as
    # str(dict) (a Python repr), 4.2+ JSON-encode them; both must parse.
    prog = StreamingQueryProgress.fromJson(copy.deepcopy(CLASSIC_PROGRESS))
    assert parse_offsets(prog.sources[0].endOffset) == CLASSIC_PROGRESS["sources"][0]["endOffset"]
    assert parse_progress(prog).end_offsets == {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}}

    # Connect 4.0/4.1: SourceProgress offsets are str(dict), a Python repr with single quotes.
    repr_end = str(CLASSIC_PROGRESS["sources"][0]["endOffset"])
    assert repr_end.startswith("{'ta': {'0': 33")
    assert parse_offsets(repr_end) == {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}}
    with pytest.raises(ValueError):
        json.loads(repr_end)
    p = copy.deepcopy(CLASSIC_PROGRESS)
    for s in p["sources"]:
        s["endOffset"] = str(s["endOffset"])
        s["latestOffset"] = str(s["latestOffset"])
        s["startOffset"] = str(s["startOffset"])
    assert parse_progress(p).end_offsets == {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}}
    # A progress object whose .json is unusable falls back to its typed (dict) fields.
    prog2 = StreamingQueryProgress.fromJson(p)
    prog2._jdict = None
    info = parse_progress(prog2)
    assert info.end_offsets == {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}} and not info.errors
    # The classic typed attribute: a JSON string.
    assert parse_offsets('{"ta":{"0":33,"1":12}}') == {"ta": {"0": 33, "1": 12}}


def test_multiple_sources_topics_and_non_kafka_sources() -> None:
    p = copy.deepcopy(CLASSIC_PROGRESS)
    p["sources"] = [
        _source("KafkaV2[Subscribe[orders]]", {"orders": {"0": 100, "1": 90}},
                {"orders": {"0": 120, "1": 90}}),
        _source("KafkaV2[SubscribePattern[pay.*]]",
                {"payments": {"0": 7}, "payouts": {"2": 3, "0": 1}}, {"payments": {"0": 9}}),
        _source("RateStreamV2[rowsPerSecond=1, rampUpTimeSeconds=0, numPartitions=default",
                "5", "5"),
        _source("FileStreamSource[file:/tmp/in]", {"logOffset": 3}, None),
        # a self-join reading `orders` a second time, further behind on partition 0
        _source("KafkaSourceV1[Assign[orders-0]]", '{"orders":{"0":80}}', '{"orders":{"0":125}}'),
    ]
    info = parse_progress(p)
    assert info.kafka_sources == 3 and not info.errors
    assert info.end_offsets == {"orders": {"0": 80, "1": 90}, "payments": {"0": 7},
                                "payouts": {"0": 1, "2": 3}}
    assert info.latest_offsets == {"orders": {"0": 125, "1": 90}, "payments": {"0": 9}}


def test_bad_offsets_are_reported_not_raised() -> None:
    p = copy.deepcopy(CLASSIC_PROGRESS)
    p["sources"].append(_source("KafkaV2[Subscribe[x]]", "{not offsets", None))
    info = parse_progress(p)
    assert info.kafka_sources == 2 and len(info.errors) == 1
    assert info.end_offsets == {"ta": {"0": 33, "1": 12}, "tb": {"0": 5}}
    for bad in ("[1, 2]", '{"t": {"x": 1}}', '{"t": [1]}', '{"t": {"0": "abc"}}'):
        with pytest.raises(OffsetParseError):
            parse_offsets(bad)
    # -1 / -2 are Spark's "latest"/"earliest" markers, not positions
    assert parse_offsets({"t": {"0": -1, "1": 4}}) == {"t": {"1": 4}}
    assert parse_offsets(None) is None and parse_offsets("null") is None


# --- the listener without Spark or Kafka ---------------------------------------------------

class _Ev:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def test_listener_never_blocks_when_kafka_is_unreachable(caplog: pytest.LogCaptureFixture) -> None:
    from spark_metrics import LagListener

    lst = LagListener(bootstrap_servers="127.0.0.1:1", heartbeat_interval=0.2, queue_size=5,
                      producer_config={"message.timeout.ms": 1500})
    qid, rid = CLASSIC_PROGRESS["id"], CLASSIC_PROGRESS["runId"]
    t0 = time.monotonic()
    lst.onQueryStarted(_Ev(id=qid, runId=rid, name="explore", timestamp="x"))
    for _ in range(50):
        lst.onQueryProgress(_Ev(progress=json.dumps(CLASSIC_PROGRESS)))
    lst.onQueryProgress(_Ev(progress=object()))  # garbage: caught and counted
    assert time.monotonic() - t0 < 0.5, "callbacks must return at once"
    c = lst.counters
    assert c["events_progress"] == 51 and c["callback_errors"] == 1
    assert c["reports_queued"] + c.get("reports_dropped_queue_full", 0) >= 50
    # The sender first fails to create the topic (5 s request timeout), then the reports
    # expire in librdkafka's buffer: dropped, counted, and a warning says so.
    wait_for(lambda: lst.counters.get("reports_failed"), 20, "an undeliverable report")
    assert lst.counters.get("topic_errors") == 1
    assert "not delivered" in caplog.text and "is Kafka reachable?" in caplog.text
    lst.onQueryTerminated(_Ev(id=qid, runId=rid, exception=None))
    t1 = time.monotonic()
    lst.close(timeout=2)
    assert time.monotonic() - t1 < 3
    assert lst.errors >= 2 and lst.active_queries() == []


def test_listener_reports_decode_as_the_exporter_expects() -> None:
    from spark_metrics import LagListener

    sent: list[tuple[bytes, bytes]] = []

    class FakeProducer:  # stands in for librdkafka only to capture the bytes handed to it
        def __init__(self, conf: dict[str, Any]) -> None:
            self.conf = conf

        def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Any) -> None:
            sent.append((key, value))

        def poll(self, _t: float) -> int:
            return 0

        def flush(self, _t: float) -> int:
            return 0

    lst = LagListener(bootstrap_servers="127.0.0.1:1", cluster="prod", group="payments",
                      heartbeat_interval=0.2, create_topic=False, probe_status=False,
                      min_send_interval=0.05)
    lst._sender._producer_factory = FakeProducer
    qid, rid = CLASSIC_PROGRESS["id"], CLASSIC_PROGRESS["runId"]
    lst.onQueryStarted(_Ev(id=qid, runId=rid, name="explore", timestamp="x"))
    lst.onQueryProgress(_Ev(progress=json.dumps(CLASSIC_PROGRESS)))
    wait_for(lambda: any(json.loads(v)["event"] == "heartbeat" for _, v in sent), 5, "a heartbeat")
    lst.onQueryTerminated(_Ev(id=qid, runId=rid, exception="boom\nat line 1"))
    lst.close(timeout=2)
    reps = [decode(v, "prod", time.time()) for _, v in sent]
    assert {k for k, _ in sent} == {f"spark/payments/{qid}".encode()}
    assert reps[-1].event == "terminated" and reps[-1].exception == "boom\nat line 1"
    assert reps[-1].batch_started is None
    hb = [r for r in reps if r.event == "heartbeat"][-1]
    assert hb.group == "payments" and hb.name == "explore" and hb.batch_id == 1
    assert hb.end_offsets == {("ta", 0): 33, ("ta", 1): 12, ("tb", 0): 5}
    assert hb.batch_started is not None and hb.last_progress is not None
    assert hb.interval == 0.2 and hb.batch_duration_ms == 782
    assert lst.counters.get("callback_errors", 0) == 0


# --- real Spark, real broker, real exporter -------------------------------------------------

INTERVAL = 1.0
STALL_AFTER = 4.0
LIVELOCK_AFTER = 6.0
REPORT_STALE_AFTER = 5.0
REPORT_EXPIRY = 12.0
HEARTBEAT = 1.0


# The oldest supported line and the newest PySpark whose connector resolves (devenv/jars.py).
# 4.0.0 (the suite's own pyspark, still used by the parsing tests above) is left out: a
# third driver adds about 2.5 minutes to this file, run by one xdist worker (--dist
# loadfile), and make test has to stay within 12 minutes on 2 cores.
@pytest.fixture(scope="module", params=[SPARK_NEWEST_VERSION, SPARK35_VERSION],
                ids=lambda v: f"pyspark-{v}")
def driver(request: pytest.FixtureRequest, kafka: KafkaCluster,
           dists: dict[str, Dist]) -> Iterator[SparkDriverProcess]:
    """A PySpark driver process (tests/support/spark_driver.py) with a LagListener, per Spark version.

    Each runs with its own virtualenv (devenv/pyenvs.py), into which the lagwatch-client
    wheel built from this checkout is installed (nothing else is: the venv holds pyspark and
    confluent-kafka). One driver serves every test of its version.
    """
    version = request.param
    python = spark_python(version)
    pip_install(python, "--no-deps", "--force-reinstall", dists["lagwatch-client"].wheel)
    d = SparkDriverProcess(python, kafka.bootstrap_servers, spark_kafka_jars(version), HEARTBEAT)
    assert d.hello["pyspark"] == version
    # a driver with only the light install
    assert distributions(python) == {"lagwatch-client", "confluent-kafka", "pyspark", "py4j"}
    assert d.hello["importable"] == [], d.hello
    assert d.hello["spark_metrics"].startswith(str(python.parent.parent)), d.hello
    yield d
    counters = d.close()["main"]
    assert counters.get("callback_errors", 0) == 0, counters
    assert counters.get("parse_errors", 0) == 0, counters
    assert counters.get("running_batch_unreadable", 0) == 0, counters  # read on every version


class Exporter:
    """The exporter subprocess under test; restartable in place."""

    def __init__(self, kafka: KafkaCluster, config: Path) -> None:
        self.kafka = kafka
        self.config = config
        self.records: list[str | None] = []  # each run's --record directory (tests/support/recorded.py)
        self.fixture = Fixture("spark", self.records)
        self.proc = self._start()

    def _start(self) -> ExporterProcess:
        self.records.append(record_dir())
        return ExporterProcess(
            self.kafka.bootstrap_servers, "--interval", str(INTERVAL),
            "--stall-after", str(STALL_AFTER), "--livelock-after", str(LIVELOCK_AFTER),
            config=str(self.config), record=self.records[-1]).wait_ready()

    def cycles(self) -> int:
        return int(value(self.proc.metrics(), "lagwatch_cycles_total") or 0)

    def watch(self, role: str, driver: SparkDriverProcess, name: str) -> str:
        """Name the query in the recording; the role carries the Spark version."""
        full = f"{role}-pyspark-{driver.hello['pyspark']}"
        self.fixture.watch(full, name)
        return full

    def restart(self) -> float:
        """Stop, start again; returns the monotonic time the new one became ready."""
        self.proc.stop()
        os.unlink(self.proc.log.name)
        self.proc = self._start()
        return time.monotonic()

    def group(self, gid: str) -> dict[str, Any] | None:
        code, body, _ = self.proc.get(f"/api/v1/clusters/default/groups/{gid}")
        return json.loads(body) if code == 200 else None


@pytest.fixture(scope="module")
def exporter(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    cfg = tmp_path_factory.mktemp("spark-exporter") / "lagwatch.yml"
    cfg.write_text(f"thresholds:\n  report_expiry: {REPORT_EXPIRY}\n"
                   f"  report_stale_after: {REPORT_STALE_AFTER}\n")
    exp = Exporter(kafka, cfg)
    try:
        yield exp
        exp.fixture.close()
    finally:
        exp.proc.stop()
        os.unlink(exp.proc.log.name)


class BackgroundProducer:
    """Keeps writing to ``topic`` until stopped; counts delivered records per partition."""

    def __init__(self, kafka: KafkaCluster, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.delivered: dict[int, int] = dict.fromkeys(range(partitions), 0)
        self.first_delivery: float | None = None
        self._p = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 5})
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _cb(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered[msg.partition()] += 1
            if self.first_delivery is None:
                self.first_delivery = time.monotonic()

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(0.05):
            self._p.produce(self.topic, value=b"x%d" % i, partition=i % self.partitions,
                            on_delivery=self._cb)
            self._p.poll(0)
            i += 1

    def start(self) -> BackgroundProducer:
        self._t.start()
        return self

    def stop(self) -> dict[int, int]:
        self._stop.set()
        self._t.join()
        assert self._p.flush(30) == 0
        return dict(self.delivered)


def _partition_values(samples: Any, family: str, group: str, topic: str) -> dict[int, float]:
    return {p: v for (t, p), v in group_offsets(samples, group, family, [topic]).items()}


def _first_batch(driver: SparkDriverProcess, name: str) -> None:
    wait_for(lambda: driver.call("query", name=name)["batch_id"] is not None, 60, "the first batch")


def _caught_up(exporter: Exporter, name: str, topic: str, want: dict[int, int]) -> Any:
    """Metrics once the exporter shows ``name`` ok with committed = HW = ``want``, lag 0."""
    s = exporter.proc.metrics()
    committed = _partition_values(s, "kafka_consumergroup_committed_offset", name, topic)
    lag = _partition_values(s, "kafka_consumergroup_lag_offsets", name, topic)
    hw = {int(dict(lab)["partition"]): v for lab, v in
          select(s, "kafka_partition_high_watermark_offset", topic=topic).items()}
    status = value(s, "kafka_consumergroup_status", group=name, status="ok")
    ok = committed == want and hw == want and lag == {p: 0 for p in want} and status == 1
    return s if ok else None


@pytest.mark.spark
def test_healthy_query_lag_matches_end_offsets(driver: SparkDriverProcess, kafka: KafkaCluster,
                                               exporter: Exporter) -> None:
    topic = create_topic(kafka, unique("spark-ok"), partitions=3)
    name = unique("q-ok")
    produce(kafka, topic, {0: 50, 1: 30, 2: 7})
    # A second listener that only mirrors the offsets into a consumer group named like the
    # query (its own reports go to a scratch topic so the exporter sees one reporter).
    driver.call("add_listener", key="mirror", commit_offsets_to_group=True,
                reports_topic=unique("scratch-reports"), heartbeat_interval=HEARTBEAT)
    mirror_counters: dict[str, int] = {}
    role = exporter.watch("healthy", driver, name)
    try:
        qid = driver.call("start", name=name, topic=topic)["id"]
        _first_batch(driver, name)
        produce(kafka, topic, {0: 10, 2: 5})  # more data while the query runs, then stop
        want = {0: 60, 1: 30, 2: 12}
        s = wait_for(lambda: _caught_up(exporter, name, topic, want), 30,
                     f"lag 0 at committed {want} for {name}")
        # HW - endOffset per partition, with HW and endOffset as the test produced them
        ends = driver.call("listener", name=name)["end_offsets"][topic]
        assert {int(p): o for p, o in ends.items()} == want
        assert value(s, "kafka_consumergroup_info", group=name, type="spark") == 1
        assert value(s, "kafka_consumergroup_members", group=name) == 1
        assert value(s, "kafka_spark_query_batch_duration_seconds", group=name) is not None
        g = exporter.group(name)
        assert g is not None and g["type"] == "spark" and g["status"] == "ok", g
        assert g["spark"]["query_id"] == qid and g["spark"]["active"] is True

        # Kafka's own tool sees the query as a consumer group, committed = endOffset; the
        # exporter still shows one group of type spark (the empty mirror group does not win).
        def mirrored() -> Any:
            rows = {r.partition: r for r in describe_group(kafka, name) if r.topic == topic}
            return rows if {p: r.current_offset for p, r in rows.items()} == want else None

        rows = wait_for(mirrored, 30, f"offsets committed to consumer group {name}")
        assert {p: r.lag for p, r in rows.items()} == {p: 0 for p in want}
        seen_at = time.time()  # wait for a cycle sampled after the group surely existed

        def sampled_after() -> Any:
            m = exporter.proc.metrics()
            t = value(m, "lagwatch_last_sample_timestamp_seconds")
            return m if t is not None and t > seen_at else None

        s = wait_for(sampled_after, 10, "an exporter cycle after the commit")
        assert value(s, "kafka_consumergroup_info", group=name, type="spark") == 1
        assert not select(s, "kafka_consumergroup_info", group=name, type="classic")
    finally:
        exporter.fixture.end(role)
        with contextlib.suppress(Exception):
            driver.call("stop", name=name)
        mirror_counters = driver.call("remove_listener", key="mirror")["counters"]
    assert mirror_counters.get("commits", 0) >= 1, mirror_counters
    assert mirror_counters.get("commit_errors", 0) == 0, mirror_counters
    # every progress event came as one JSON text, not PySpark's field-by-field conversion
    # (tens of py4j calls per event on Spark's single listener-bus thread, which queues
    # events behind each other on a busy driver)
    assert mirror_counters["events_progress_json"] == mirror_counters["events_progress"] >= 2, \
        mirror_counters


@pytest.mark.spark
def test_idle_query_is_ok_and_resumes(driver: SparkDriverProcess, kafka: KafkaCluster,
                                      exporter: Exporter) -> None:
    """No new data: Spark 3.5+ calls onQueryIdle (every 10 s by default) instead of
    onQueryProgress, so reports carry no new offsets. The query must read `ok`, with no
    batch "running" (an idle query is not a hung one), and pick up new data as usual."""
    topic = create_topic(kafka, unique("spark-idle"), partitions=2)
    name = unique("q-idle")
    want = {0: 8, 1: 4}
    produce(kafka, topic, want)
    role = exporter.watch("idle", driver, name)
    try:
        driver.call("start", name=name, topic=topic)
        wait_for(lambda: _caught_up(exporter, name, topic, want), 60, f"{name} caught up")
        exporter.fixture.mark(role, name, "CAUGHT_UP")
        c0 = driver.call("listener")["counters"]
        # Idle for longer than the livelock threshold, until Spark reported idleness.
        since = time.monotonic()
        seen: list[dict[str, Any]] = []

        def idle_long_enough() -> Any:
            g = exporter.group(name)
            assert g is not None
            seen.append(g)
            c = driver.call("listener")["counters"]
            idle = c.get("events_idle", 0) > c0.get("events_idle", 0)
            return c if idle and time.monotonic() - since >= LIVELOCK_AFTER + 2 * INTERVAL else None

        c = wait_for(idle_long_enough, 30, f"an idle event for {name}", interval=INTERVAL / 2)
        # 3.5+ reports no-data triggers with onQueryIdle only (SPARK-43183), no progress event.
        assert c["events_progress"] == c0["events_progress"], (c0, c)
        bad = [g for g in seen if g["status"] != "ok" or g["lag_offsets"] != 0]
        assert not bad, [(g["status"], g["lag_offsets"], g["spark"]["batch_running_seconds"],
                          g["reasons"]) for g in bad]
        # A micro-batch may run for seconds on a busy machine; an idle query must not stay
        # shown as running one (it would look hung, its figure growing with time): soon
        # after Spark's idle event no batch has run as long as the livelock threshold.
        wait_for(lambda: (exporter.group(name)["spark"]["batch_running_seconds"] or 0) < LIVELOCK_AFTER,
                 10 * INTERVAL, f"{name} shown with no batch running")

        exporter.fixture.mark(role, name, "RESUMED")
        produce(kafka, topic, {0: 5})  # data again: caught up without ever looking stuck
        want = {0: 13, 1: 4}
        t0 = time.monotonic()
        timeline: list[tuple[Any, ...]] = []  # what a failure needs: lagwatch's view and Spark's

        def resumed() -> Any:
            g = exporter.group(name)
            spark = driver.call("query", name=name)
            timeline.append((round(time.monotonic() - t0, 1), g["status"] if g else "absent",
                             g and g["reasons"], g and g["spark"]["batch_running_seconds"],
                             spark["trigger_active"], spark["batch_id"]))
            return _caught_up(exporter, name, topic, want)

        wait_for(resumed, 30, f"{name} at {want} after idling")
        assert {s for _t, s, *_ in timeline} <= {"ok", "lagging"}, timeline
    finally:
        exporter.fixture.end(role)
        driver.call("stop", name=name)


@pytest.mark.spark
def test_hung_batch_is_livelocked_and_survives_exporter_restart(
        driver: SparkDriverProcess, kafka: KafkaCluster, exporter: Exporter,
        tmp_path: Path) -> None:
    topic = create_topic(kafka, unique("spark-hang"), partitions=2)
    name = unique("q-hang")
    initial = {0: 20, 1: 10}
    produce(kafka, topic, initial)
    flag = tmp_path / "hang"  # while it exists, the query's Python UDF does not return
    writer = None
    role = exporter.watch("hung", driver, name)
    try:
        driver.call("start", name=name, topic=topic, hang_flag=str(flag))
        _first_batch(driver, name)
        flag.touch()  # the next batch will hang
        cycles_before = exporter.cycles()
        writer = BackgroundProducer(kafka, topic, 2).start()
        wait_for(lambda: writer.first_delivery, 10, "the producer to deliver")
        t_hang = writer.first_delivery
        assert t_hang is not None
        exporter.fixture.mark(role, name, "HUNG", time.time() - (time.monotonic() - t_hang))
        polled: list[int] = []  # the cycle count at each poll before it was livelocked

        def livelocked() -> Any:
            n = exporter.cycles()
            g = exporter.group(name)
            if g and g["status"] == "livelocked":
                return g
            polled.append(n)
            return None

        g = wait_for(livelocked, LIVELOCK_AFTER + 2 * INTERVAL + 60, f"{name} livelocked")
        took = time.monotonic() - t_hang
        # threshold + 2 cycles, + the trigger and the batch's start in the driver; counted
        # from the last poll that did not see it, so a starved test process cannot inflate it
        n = (polled[-1] if polled else cycles_before) + 1 - cycles_before
        assert n <= cycles(LIVELOCK_AFTER, INTERVAL) + 6, f"livelocked after {n} cycles ({took:.1f}s)"
        m = re.search(r"batch (\d+) has been running for (\d+) seconds", " ".join(g["reasons"]))
        assert m, g["reasons"]
        assert m.group(1) == "1", "batch 0 completed, batch 1 hangs"
        assert LIVELOCK_AFTER <= int(m.group(2)) <= took + 2, (m.group(0), took)
        q = driver.call("query", name=name)
        assert q["active"] and q["trigger_active"], q  # Spark agrees: still in the batch
        assert g["spark"]["batch_running_seconds"] >= LIVELOCK_AFTER

        # Redelivery exposure: the hung batch's end offsets (Spark's offset log, read from
        # the checkpoint here) against batch 0's, what a restart of the query runs again.
        planned = driver.call("planned", name=name, batch=1)
        want = {p: planned[str(p)] - initial[p] for p in initial}
        assert sum(want.values()) > 0, planned  # batch 1 was planned for records that arrived

        def exposure() -> Any:
            g = exporter.group(name)
            got = g and {p["partition"]: p["redelivery_exposure_records"] for p in g["partitions"]}
            return g if got == want and g["redelivery_exposure_records"] == sum(want.values()) else None

        wait_for(exposure, 30, f"exposure {want} of the hung batch of {name}")

        # The producer stops: lag = HW - endOffset of batch 0, exactly what the test wrote.
        delivered = writer.stop()
        writer = None
        hw_want = {p: initial[p] + delivered[p] for p in initial}

        def lag_settled() -> Any:
            s = exporter.proc.metrics()
            lag = _partition_values(s, "kafka_consumergroup_lag_offsets", name, topic)
            committed = _partition_values(s, "kafka_consumergroup_committed_offset", name, topic)
            want_lag = {p: hw_want[p] - initial[p] for p in initial}
            return s if committed == initial and lag == want_lag else None

        s = wait_for(lag_settled, 15, f"lag = HW - endOffset for {name}")
        assert value(s, "kafka_consumergroup_status", group=name, status="livelocked") == 1
        assert value(s, "kafka_consumergroup_info", group=name, type="spark") == 1

        # Restart the exporter while the batch still hangs: the exporter replays the
        # compacted reports before its first view, so the query is known within one cycle.
        exporter.fixture.mark(role, name, "RESTARTED")
        exporter.restart()
        polled.clear()
        g = wait_for(livelocked, 60, f"{name} livelocked after the restart", interval=0.1)
        # known from the restarted exporter's first cycle on: no poll saw a cycle without it
        assert not [n for n in polled if n >= 1], f"cycles without it after the restart: {polled}"
        assert "has been running for" in " ".join(g["reasons"])
    finally:
        exporter.fixture.end(role)
        if writer is not None:
            writer.stop()
        if flag.exists():
            flag.unlink()
        driver.call("stop", name=name)


@pytest.mark.spark
def test_stopped_query_is_stopped_then_expires(driver: SparkDriverProcess, kafka: KafkaCluster,
                                               exporter: Exporter) -> None:
    topic = create_topic(kafka, unique("spark-stop"), partitions=2)
    name = unique("q-stop")
    produce(kafka, topic, {0: 5, 1: 5})
    role = exporter.watch("stopped", driver, name)
    driver.call("start", name=name, topic=topic)
    try:
        wait_for(lambda: (exporter.group(name) or {}).get("partitions"), 60,
                 f"{name} with offsets on the exporter")
        produce(kafka, topic, {0: 3})  # lag while the query is gone
    finally:
        driver.call("stop", name=name)
    exporter.fixture.mark(role, name, "STOPPED")
    stopped_at = time.monotonic()

    def stopped() -> Any:
        g = exporter.group(name)
        return g if g and g["status"] == "stopped" else None

    g = wait_for(stopped, 60, f"{name} stopped")
    assert g["spark"]["active"] is False
    assert any("terminated" in r for r in g["reasons"]), g["reasons"]

    def gone() -> bool:
        s = exporter.proc.metrics()
        return not any(dict(lab).get("group") == name for (_, lab) in s)

    wait_for(gone, REPORT_EXPIRY + 10, f"series of {name} to expire")
    took = time.monotonic() - stopped_at
    assert took >= REPORT_EXPIRY - 1.0, f"series vanished after {took:.1f}s, before expiry"
    assert exporter.group(name) is None

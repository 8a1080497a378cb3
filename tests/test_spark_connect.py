"""The Spark listener under Spark Connect, against a real Connect server on loopback.

Under Spark Connect the query runs on the server. PySpark 4.x runs the listener in the
client, apart from the query; 3.5 runs it in the server's Python, so lagwatch-client is
installed there (docs/spark.md). Each server (tests/support/spark_proc.py: ``SparkConnectServer``
through pyspark's spark-submit, in a virtualenv with ``pyspark[connect]``) and each client
(tests/support/spark_driver.py with ``--remote``) is a process of its own, so that either can die
alone: a dead server must not read as a batch still running (``livelocked``), and a dead
client must not read as a stopped query while the server still runs it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from devenv.jars import SPARK35_VERSION, SPARK_NEWEST_VERSION, spark_connect_jars, spark_kafka_jars
from devenv.kafka import KafkaCluster
from devenv.pyenvs import spark_python
from exporter.reports.decode import ReportError, SparkReport, decode
from lagwatch_client.wire import DEFAULT_REPORTS_TOPIC
from tests.conftest import create_topic, produce, unique, wait_for
from tests.support.dists import Dist, pip_install
from tests.support.exporter_proc import ExporterProcess, group_offsets
from tests.support.spark_proc import ConnectServer, SparkDriverProcess
from tests.test_spark import BackgroundProducer

INTERVAL = 1.0
HEARTBEAT = 1.0
REPORT_STALE_AFTER = 5.0
# Far above REPORT_STALE_AFTER: a dead server's query must be judged by the server's
# silence before a batch could count as hung, and never as hung after.
LIVELOCK_AFTER = 20.0
REPORT_EXPIRY = 120.0
# A client's session, and under 3.5 its listener's registration: every attempt of
# tests/support/spark_driver.py's ADD_LISTENER_ATTEMPTS on a loaded machine.
CLIENT_START_TIMEOUT = 240.0


# --- the report's Spark Connect fields, and the client's probe, without Spark ---------------

def _report(**extra: Any) -> bytes:
    return json.dumps({"v": 1, "kind": "spark", "group": "q", "query_id": "qid", "run_id": "rid",
                       "sent_at": 1795000100.0, "event": "heartbeat", "interval": 1.0,
                       "end_offsets": {"t": {"0": 5}}, "latest_offsets": {}, **extra}).encode()


def test_connect_fields_are_optional_and_checked() -> None:
    old = decode(_report(), "default", 1795000100.0)  # a classic driver's, or an older listener's
    assert isinstance(old, SparkReport)
    assert old.connect is None and old.server_seen is None and old.server_silent(1795000200.0) is None
    new = decode(_report(connect="client", server_seen=1795000070.0, server_error="E: down"),
                 "default", 1795000101.0)
    assert isinstance(new, SparkReport) and new.connect == "client" and new.server_error == "E: down"
    # the reporter's own clock (sent_at - server_seen), plus the time since it was received
    assert new.server_silent(1795000111.0) == pytest.approx(40.0)
    server = decode(_report(connect="server"), "default", 1795000100.0)
    assert isinstance(server, SparkReport) and server.server_silent(1795000200.0) is None
    for bad in ({"connect": "driver"}, {"connect": 1}, {"server_error": 5},
                {"connect": "client", "server_seen": "soon"}):
        with pytest.raises(ReportError):
            decode(_report(**bad), "default", 1795000100.0)


class _Server:
    """What a Spark Connect server answers about one query: "runs", "down" (every call fails,
    as gRPC does), "unknown" (the session has no such query)."""

    state = "runs"

    def call(self) -> None:
        if self.state == "down":
            raise ConnectionError("UNAVAILABLE: connection refused")


class _Handle:
    def __init__(self, server: _Server) -> None:
        self.server = server

    @property
    def isActive(self) -> bool:  # noqa: N802 - PySpark's name
        self.server.call()
        return self.server.state == "runs"

    @property
    def status(self) -> dict[str, Any]:
        self.server.call()
        return {"isTriggerActive": False}


def _connect_session(server: _Server) -> Any:
    class Streams:
        def get(self, _query_id: str) -> Any:
            server.call()
            return _Handle(server) if server.state == "runs" else None

    session = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})()
    session.streams = Streams()
    return session


def test_client_listener_reports_the_servers_answers() -> None:
    """A listener in a Connect client, probed step by step: an answer dates server_seen, a
    failure keeps its error and leaves server_seen, and a server that twice does not know
    the query as active has ended it."""
    from spark_metrics import LagListener

    sent: list[dict[str, Any]] = []
    lst = LagListener(bootstrap_servers="127.0.0.1:1", heartbeat_interval=3600, create_topic=False)
    lst._sender.submit = lambda _key, report: sent.append(report) or True  # type: ignore[method-assign]
    server = _Server()
    lst.spark = _connect_session(server)
    lst.onQueryStarted(type("E", (), {"id": "qid", "runId": "rid", "name": "q"})())
    q = lst._queries["qid"]

    def probe(state: str) -> dict[str, Any]:
        server.state = state
        time.sleep(0.01)  # the clock moves between probes (server_seen has ms resolution)
        lst._probe_server(q)
        lst._emit(q, "heartbeat", time.time())
        return sent[-1]

    started = sent[0]
    assert started["connect"] == "client" and started["server_seen"] is not None
    runs = probe("runs")
    assert runs["server_seen"] > started["server_seen"] and runs["server_error"] is None
    down = probe("down")
    assert down["server_error"] == "ConnectionError: UNAVAILABLE: connection refused"
    assert down["server_seen"] == runs["server_seen"]  # a failure dates nothing
    assert probe("unknown")["event"] == "heartbeat"  # once may be a race with the start
    lst._probe_server(q)
    lst.close(1)
    assert sent[-1]["event"] == "terminated" and not lst.active_queries()
    assert sent[-1]["exception"] == "the Spark Connect server does not run this query any more"


class Servers:
    """A Connect server per PySpark version, started when a test first asks for it and again
    after a test killed it; one at a time (two cores). Each runs in the pyspark[connect]
    virtualenv of its version, with the lagwatch-client wheel of this checkout: the
    clients' Python and the server's (3.5 runs listeners there)."""

    def __init__(self, dists: dict[str, Dist]) -> None:
        self.dists = dists
        self.pythons: dict[str, Path] = {}
        self.running: dict[str, ConnectServer] = {}

    def python(self, version: str) -> Path:
        if version not in self.pythons:
            python = spark_python(version, connect=True)
            pip_install(python, "--no-deps", "--force-reinstall", self.dists["lagwatch-client"].wheel)
            self.pythons[version] = python
        return self.pythons[version]

    def get(self, version: str) -> ConnectServer:
        for v in [v for v, srv in self.running.items() if v != version or srv.proc.poll() is not None]:
            self.running.pop(v).close()
        if version not in self.running:
            jars = spark_kafka_jars(version) + spark_connect_jars(version)
            self.running[version] = ConnectServer(self.python(version), jars)
        return self.running[version]

    def close(self) -> None:
        for srv in self.running.values():
            srv.close()


@pytest.fixture(scope="module")
def servers(dists: dict[str, Dist]) -> Iterator[Servers]:
    s = Servers(dists)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def exporter(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExporterProcess]:
    cfg = tmp_path_factory.mktemp("spark-connect-exporter") / "lagwatch.yml"
    cfg.write_text(f"thresholds:\n  report_expiry: {REPORT_EXPIRY}\n"
                   f"  report_stale_after: {REPORT_STALE_AFTER}\n")
    exp = ExporterProcess(kafka.bootstrap_servers, "--interval", str(INTERVAL),
                          "--livelock-after", str(LIVELOCK_AFTER), config=str(cfg)).wait_ready()
    try:
        yield exp
    finally:
        exp.stop()
        os.unlink(exp.log.name)


def _group(exp: ExporterProcess, gid: str) -> dict[str, Any] | None:
    code, body, _ = exp.get(f"/api/v1/clusters/default/groups/{gid}")
    return json.loads(body) if code == 200 else None


def _latest_report(kafka: KafkaCluster, query_id: str) -> SparkReport | None:
    """The newest report of ``query_id`` on the reports topic, decoded as the exporter does."""
    c = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": unique("peek"),
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        parts = c.list_topics(DEFAULT_REPORTS_TOPIC, timeout=10).topics[DEFAULT_REPORTS_TOPIC].partitions
        c.assign([TopicPartition(DEFAULT_REPORTS_TOPIC, p, 0) for p in parts])
        latest, left = None, set(parts)
        while left:
            for m in c.consume(500, timeout=5):
                if m.error() is not None:
                    left.discard(m.partition())
                    continue
                rep = decode(m.value(), "default", time.time())
                if isinstance(rep, SparkReport) and rep.query_id == query_id:
                    latest = rep if latest is None or rep.sent_at >= latest.sent_at else latest
        return latest
    finally:
        c.close()


def _ok_at(exp: ExporterProcess, name: str, topic: str, want: dict[int, int]) -> Any:
    """The group once lagwatch shows the query ``ok`` with committed = ``want``, lag 0."""
    g = _group(exp, name)
    s = exp.metrics()
    offsets = group_offsets(s, name, "kafka_consumergroup_committed_offset", [topic])
    committed = {p: v for (_t, p), v in offsets.items()}
    ok = g is not None and g["status"] == "ok" and g["lag_offsets"] == 0 and committed == want
    return g if ok else None


def _client(python: Path, kafka: KafkaCluster, server: ConnectServer,
            session: str | None = None) -> SparkDriverProcess:
    """A Connect client with a LagListener; with ``session``, one attached to that session
    without a listener (PySpark 4.2's ``addListener`` there does not return while the
    session still holds the listener of a client that was killed)."""
    url = server.url + (f"/;session_id={session}" if session else "")
    return SparkDriverProcess(python, kafka.bootstrap_servers, [], HEARTBEAT, remote=url,
                              listener=session is None, start_timeout=CLIENT_START_TIMEOUT,
                              server_log=server.output)


@pytest.mark.spark
@pytest.mark.parametrize("version", [SPARK35_VERSION, SPARK_NEWEST_VERSION],
                         ids=lambda v: f"pyspark-{v}")
def test_connect_healthy_query_is_ok(version: str, kafka: KafkaCluster, exporter: ExporterProcess,
                                     servers: Servers) -> None:
    """4.x runs the listener in the client, 3.5 in the server's Python: either way the query
    reads ``ok`` at the offsets the test produced, and its reports say where they come from."""
    python, server = servers.python(version), servers.get(version)
    client = None
    try:
        client = _client(python, kafka, server)
        assert client.hello["pyspark"] == version
        topic = create_topic(kafka, unique("connect-ok"), partitions=2)
        name = unique("cq-ok")
        produce(kafka, topic, {0: 30, 1: 12})
        qid = client.call("start", name=name, topic=topic, timeout=120)["id"]
        produce(kafka, topic, {0: 5})
        want = {0: 35, 1: 12}
        seen: list[str] = []

        def ok() -> Any:
            g = _group(exporter, name)
            if g is not None:
                seen.append(g["status"])
            return _ok_at(exporter, name, topic, want)

        g = wait_for(ok, 120, f"{name} ok at {want}", interval=INTERVAL / 2)
        assert g["type"] == "spark" and g["spark"]["query_id"] == qid
        assert g["spark"]["connect"] == ("server" if version.startswith("3.") else "client"), g
        assert set(seen) == {"ok"}, seen
        rep = _latest_report(kafka, qid)
        assert rep is not None
        if version.startswith("3."):
            assert rep.connect == "server" and rep.server_seen is None, rep
        else:  # the client reports when the server last spoke about the query
            assert rep.connect == "client" and rep.server_seen is not None, rep
            assert rep.sent_at - rep.server_seen < 3 * HEARTBEAT, rep
        assert client.call("query", name=name)["active"]
        client.call("stop", name=name)
    finally:
        if client is not None:
            client.kill()


def _running(client: SparkDriverProcess, kafka: KafkaCluster, exp: ExporterProcess,
             prefix: str) -> tuple[str, str, BackgroundProducer]:
    """A query of ``client``'s, seen ``ok`` by lagwatch, on a topic a producer keeps writing
    to (so that records wait whenever its offsets stop moving): (name, query id, producer)."""
    topic = create_topic(kafka, unique(prefix), partitions=2)
    name = unique(prefix)
    produce(kafka, topic, {0: 10, 1: 10})
    qid = client.call("start", name=name, topic=topic, timeout=120)["id"]
    wait_for(lambda: _ok_at(exp, name, topic, {0: 10, 1: 10}), 120, f"{name} ok")
    return name, qid, BackgroundProducer(kafka, topic, 2).start()


def _statuses_until(exp: ExporterProcess, name: str, done: Any, timeout: float,
                    what: str) -> tuple[dict[str, Any], list[str]]:
    """Poll the group until ``done(group)``; returns it and every status seen on the way."""
    seen: list[str] = []

    def check() -> Any:
        g = _group(exp, name)
        if g is not None:
            seen.append(g["status"])
        return g if g is not None and done(g) else None

    return wait_for(check, timeout, what, interval=INTERVAL / 2), seen


@pytest.mark.spark
def test_connect_client_dies_query_may_still_run(kafka: KafkaCluster, exporter: ExporterProcess,
                                                 servers: Servers) -> None:
    """4.x: the client that added the listener is SIGKILLed while its query keeps running on
    the server. lagwatch reads what it knows ("no reports since ...; the query may still run
    on its Connect server"), never ``stopped``; a new client on the same session finds the
    query active, past the batch the dead client last reported."""
    python, server = servers.python(SPARK_NEWEST_VERSION), servers.get(SPARK_NEWEST_VERSION)
    client = other = writer = None
    try:
        client = _client(python, kafka, server)
        name, qid, writer = _running(client, kafka, exporter, "connect-client")
        session = client.hello["session_id"]
        last = _latest_report(kafka, qid)
        assert last is not None and last.connect == "client"
        client.kill()
        killed = time.monotonic()

        def unknown(g: dict[str, Any]) -> bool:
            return g["status"] == "error" and any("may still run on its Connect server" in r
                                                  for r in g["reasons"])

        g, seen = _statuses_until(exporter, name, unknown, 60, f"{name} unknown after its client died")
        assert "stopped" not in seen and "livelocked" not in seen, seen
        text = " ".join(g["reasons"])
        assert f"from the Spark Connect client that reported query {qid}" in text, text
        assert "no reports since " in text and "evidence: a Spark Connect client's reports" in text
        # past the livelock threshold too: still unknown, never stopped nor livelocked
        _, later = _statuses_until(
            exporter, name, lambda _g: time.monotonic() - killed > LIVELOCK_AFTER + 3 * INTERVAL,
            LIVELOCK_AFTER + 30, "the livelock threshold to pass")
        assert set(later) == {"error"}, later

        # the server's word: the query still runs, past what the dead client reported
        other = _client(python, kafka, server, session=session)
        reported = last.batch_id or 0

        def ran_on() -> Any:
            q = other.call("query_by_id", query_id=qid)
            return q if q["batch_id"] is not None and q["batch_id"] > reported else None

        q = wait_for(ran_on, 60, "a batch after the client died")
        assert q["known"] and q["active"], q
    finally:
        if writer is not None:
            writer.stop()
        for proc in (client, other):
            if proc is not None:
                proc.kill()


@pytest.mark.spark
def test_connect_server_dies_reads_unreachable(kafka: KafkaCluster, exporter: ExporterProcess,
                                               servers: Servers) -> None:
    """4.x: the Connect server is SIGKILLed while the client lives and heartbeats. The
    client's listener reports the server's silence; lagwatch says the server has not answered
    and that whether the query runs is unknown, never a batch running (``livelocked``)."""
    python, server = servers.python(SPARK_NEWEST_VERSION), servers.get(SPARK_NEWEST_VERSION)
    client = writer = None
    try:
        client = _client(python, kafka, server)
        name, qid, writer = _running(client, kafka, exporter, "connect-server")
        server.kill()
        killed = time.monotonic()

        def unreachable(g: dict[str, Any]) -> bool:
            return g["status"] == "error" and any("has not answered its client" in r for r in g["reasons"])

        g, seen = _statuses_until(exporter, name, unreachable, 60, f"{name} with its server unreachable")
        assert "livelocked" not in seen and "stopped" not in seen, seen
        text = " ".join(g["reasons"])
        assert f"the Spark Connect server of query {qid} has not answered its client" in text, text
        assert "the client is alive (heartbeat" in text and "whether the query runs is unknown" in text
        assert g["members"] and g["spark"]["active"], g  # the client still reports
        assert g["spark"]["connect"] == "client", g["spark"]
        assert g["spark"]["server_silent_seconds"] > REPORT_STALE_AFTER, g["spark"]
        _, later = _statuses_until(
            exporter, name, lambda _g: time.monotonic() - killed > LIVELOCK_AFTER + 3 * INTERVAL,
            LIVELOCK_AFTER + 30, "the livelock threshold to pass")
        assert set(later) == {"error"}, later
        rep = _latest_report(kafka, qid)
        assert rep is not None and rep.server_seen is not None
        assert rep.sent_at - rep.server_seen > LIVELOCK_AFTER, rep  # the client kept reporting
    finally:
        if writer is not None:
            writer.stop()
        if client is not None:
            client.kill()

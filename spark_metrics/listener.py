"""``LagListener``: a StreamingQueryListener that makes a Spark query look like a consumer group.

For every query with Kafka sources it publishes, to lagwatch's compacted
reports topic, the ``endOffset`` of the last completed batch (the query's
"committed offset"), the ``latestOffset`` Spark saw, batch figures and
lifecycle events. Spark emits nothing while a batch hangs, so a heartbeat
thread per active query keeps reporting whether a batch is running and since
when; lagwatch then tells "alive but stuck" (livelocked) from "gone" (stopped).

A heartbeat proves the process that sends it alive, not the query. In a classic
driver the two are one process. Under Spark Connect they are apart: PySpark 4.x
runs the listener in the client while the query runs on the server (3.5 runs it
in the server's Python). A listener in a Connect client therefore also asks the
server about the query at each heartbeat and reports when the server last
answered (``server_seen``): a dead server does not read as a batch still running.

When does the current batch start? Spark starts the next trigger right after
the previous one finished, i.e. right after the last progress (or idle) event,
or at query start. That is the conservative estimate. When the listener can
reach the query object it refines it with ``query.status['isTriggerActive']``:
no trigger active means no batch running (a query waiting for a long trigger
interval is not "stuck"), and a batch that became active is dated from the
last time the query was seen inactive.

In classic PySpark a progress event reaches Python as a JVM object, which
PySpark converts field by field over py4j on Spark's single listener-bus
thread: about 60 ms per event on an idle machine, 435 ms on a starved one, so
three 500 ms queries had their events queued and delivered up to 17 s late
(``bench/spark_progress_delivery.py``), and lagwatch judged them by offsets
that old. The listener asks the JVM for the event's JSON instead (one call,
about 1 ms): see :class:`_JsonProgressBridge`.

Callbacks only update a little state under a lock and ``put_nowait`` a report
into a bounded queue; everything that talks to Kafka happens in the sender
thread (:mod:`spark_metrics.sender`). Every exception is caught and counted
in :attr:`LagListener.counters`.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

try:  # classic PySpark's py4j adapter (3.4+); Spark Connect never uses it
    from pyspark.sql.streaming.listener import JStreamingQueryListener
except ImportError:  # pragma: no cover - an older or Connect-only PySpark
    JStreamingQueryListener = None

from lagwatch_client.wire import DEFAULT_REPORTS_TOPIC, MAX_NAME, VERSION, report_key
from spark_metrics.offsets import Offsets, parse_progress, running_batch
from spark_metrics.sender import Counters, RateLimitedLog, ReportSender

log = logging.getLogger("lagwatch.spark")
NameFn = Callable[[str | None, str], str]


@dataclass
class _Query:
    query_id: str
    run_id: str
    name: str | None
    group: str
    commit_group: str | None
    started_at: float
    last_event_at: float  # start/progress/idle: no batch was running at that moment
    batch_id: int | None = None
    last_progress: float | None = None
    batch_duration_ms: float | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    end_offsets: Offsets = field(default_factory=dict)
    latest_offsets: Offsets = field(default_factory=dict)
    kafka: bool | None = None  # None until the first progress event says
    terminated: bool = False
    exception: str | None = None
    # status probe
    trigger_active: bool | None = None
    probed_at: float = 0.0
    inactive_seen_at: float | None = None
    # the batch planned and not committed (offsets.running_batch), when the probe could read it
    running: dict[str, Any] | None = None
    running_read_at: float = 0.0
    handle: Any = None
    handle_misses: int = 0
    # Spark Connect, listener in the client: when the server last spoke about the query (an
    # event, or an answer to the status probe), and why the last probe failed
    server_seen: float | None = None
    server_error: str | None = None
    server_misses: int = 0  # probes in a row the server answered without knowing the query
    probe_thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    heartbeat: threading.Thread | None = None


@dataclass(frozen=True)
class _ProgressJson:
    """A progress event as its JSON text, the form :func:`parse_progress` reads first."""

    progress: str


if JStreamingQueryListener is not None:
    class _JsonProgressBridge(JStreamingQueryListener):
        """PySpark's own py4j adapter, except that a progress event is fetched as one JSON
        text rather than converted field by field (``StreamingQueryProgress.fromJObject``
        makes dozens of py4j round trips per event, on Spark's listener-bus thread).
        PySpark calls this class's methods; the Java interface comes from the parent."""

        def onQueryProgress(self, jevent: Any) -> None:
            try:
                text = jevent.progress().json()
            except Exception:  # noqa: BLE001 - e.g. a gateway closing: PySpark's way
                super().onQueryProgress(jevent)
                return
            self.pylistener._counters.inc("events_progress_json")
            self.pylistener.onQueryProgress(_ProgressJson(text))


def _clip(s: str, n: int = MAX_NAME) -> str:
    return s if len(s) <= n else s[: n - 1] + "~"


class LagListener(StreamingQueryListener):
    """Report the Kafka offsets, liveness and termination of streaming queries to lagwatch.

    ``spark.streams.addListener(LagListener(bootstrap_servers="broker:9092"))``

    Parameters
    ----------
    bootstrap_servers: Kafka cluster holding the reports topic (the one the
        exporter watches; normally the cluster the query reads).
    cluster: the exporter's name for that cluster; set it when the exporter
        watches several clusters (reports naming another cluster are ignored).
    group: the ``group`` label; default the query name, or its id when unnamed.
        A callable ``(name, query_id) -> str`` is accepted for several queries.
    reports_topic: compacted topic the exporter tails (created if missing).
    heartbeat_interval: seconds between heartbeats of an active query.
    producer_config: extra librdkafka properties (SASL/TLS...) for the
        producer and admin client.
    commit_offsets_to_group: off by default. ``True`` commits each completed
        batch's end offsets to a consumer group named like ``group``; a string
        (or callable like ``group``) names the consumer group. Other Kafka tools
        (``kafka-consumer-groups``, Burrow...) then see the query's progress.
        The group must not have active members.
    probe_status: refine "is a batch running" with ``query.status``.
    """

    def __init__(self, bootstrap_servers: str, cluster: str | None = None,
                 group: str | NameFn | None = None, reports_topic: str = DEFAULT_REPORTS_TOPIC,
                 heartbeat_interval: float = 5.0, producer_config: dict[str, Any] | None = None,
                 commit_offsets_to_group: bool | str | NameFn | None = None, *,
                 probe_status: bool = True, queue_size: int = 1000,
                 min_send_interval: float = 1.0, create_topic: bool = True) -> None:
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
            raise ValueError("bootstrap_servers must be 'host:port[,host:port...]'")
        if not 0.05 <= float(heartbeat_interval) <= 3600:
            raise ValueError("heartbeat_interval must be between 0.05 and 3600 seconds")
        if isinstance(group, str) and not group:
            raise ValueError("group must be a non-empty string")
        self.bootstrap_servers = bootstrap_servers.strip()
        self.cluster = cluster
        self.group = group
        self.reports_topic = reports_topic
        self.heartbeat_interval = float(heartbeat_interval)
        self.producer_config = dict(producer_config or {})
        self.commit_offsets_to_group = commit_offsets_to_group
        self.probe_status = probe_status
        self.queue_size = queue_size
        self.min_send_interval = min_send_interval
        self.create_topic = create_topic
        self._init_runtime()

    # Spark Connect 3.5 pickles server-side listeners: ship the configuration only.
    def __getstate__(self) -> dict[str, Any]:
        keep = ("bootstrap_servers", "cluster", "group", "reports_topic", "heartbeat_interval",
                "producer_config", "commit_offsets_to_group", "probe_status", "queue_size",
                "min_send_interval", "create_topic")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.RLock()
        self._queries: dict[str, _Query] = {}
        self._counters = Counters()
        self._warn = RateLimitedLog(log)
        self._closed = False
        conf = {"bootstrap.servers": self.bootstrap_servers, **self.producer_config}
        self._sender = ReportSender(conf, self.reports_topic, self._counters,
                                    queue_size=self.queue_size,
                                    min_interval=self.min_send_interval,
                                    create_topic=self.create_topic)
        ref = weakref.ref(self)
        atexit.register(lambda: (lambda s: s.close(2.0) if s is not None else None)(ref()))

    @property
    def _jlistener(self) -> Any:
        """The JVM side of this listener, which classic PySpark's ``addListener`` registers
        (after importing ``org.apache.spark.sql.streaming.*`` into the gateway): PySpark's
        wrapper around :class:`_JsonProgressBridge` instead of its field-by-field adapter."""
        if not hasattr(self, "_jlistenerobj"):
            if JStreamingQueryListener is None:
                return StreamingQueryListener._jlistener.fget(self)  # type: ignore[attr-defined]
            from pyspark import SparkContext

            jvm: Any = SparkContext._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_JsonProgressBridge(self))
        return self._jlistenerobj

    # -- public helpers ------------------------------------------------------------
    @property
    def counters(self) -> dict[str, int]:
        """Events seen, reports queued/produced/delivered/dropped, and every error, by name."""
        return self._counters.snapshot()

    @property
    def errors(self) -> int:
        """Sum of every error counter (callbacks, heartbeats, sender, Kafka, dropped reports)."""
        return sum(v for k, v in self.counters.items()
                   if k.endswith("errors") or k.startswith("reports_dropped")
                   or k == "reports_failed")

    def active_queries(self) -> list[str]:
        with self._lock:
            return [q.query_id for q in self._queries.values() if not q.terminated]

    def close(self, timeout: float = 5.0) -> None:
        """Stop heartbeats and deliver what is queued (at most ``timeout`` seconds)."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            for q in self._queries.values():
                q.stop.set()
        self._sender.close(timeout)

    # -- StreamingQueryListener ------------------------------------------------------
    def onQueryStarted(self, event: Any) -> None:
        self._guard("started", self._started, event)

    def onQueryProgress(self, event: Any) -> None:
        self._guard("progress", self._progress, event)

    def onQueryIdle(self, event: Any) -> None:
        self._guard("idle", self._idle, event)

    def onQueryTerminated(self, event: Any) -> None:
        self._guard("terminated", self._terminated, event)

    def _guard(self, what: str, fn: Callable[[Any], None], event: Any) -> None:
        try:
            self._counters.inc(f"events_{what}")
            if not self._closed:
                fn(event)
        except Exception:  # noqa: BLE001 - a listener must never disturb the query
            self._counters.inc("callback_errors")
            self._warn.warning(f"cb-{what}", "lagwatch: error handling %s event", what,
                               exc_info=True)

    # -- event handling (fast: state update + put_nowait) -------------------------------
    def _names(self, name: str | None, query_id: str) -> tuple[str, str | None]:
        g = self.group
        group = g(name, query_id) if callable(g) else (g or name or query_id)
        c = self.commit_offsets_to_group
        if c is None or c is False:
            commit = None
        elif c is True:
            commit = group
        else:
            commit = c(name, query_id) if callable(c) else str(c)
        return _clip(str(group)), commit

    def _query(self, query_id: str, run_id: str, name: str | None, now: float) -> _Query:
        """The state of this run, created when unknown (also for a listener added late)."""
        q = self._queries.get(query_id)
        if q is not None and q.run_id == run_id:
            return q
        group, commit = self._names(name, query_id)
        fresh = _Query(query_id=query_id, run_id=run_id, name=name, group=group,
                       commit_group=commit, started_at=now, last_event_at=now)
        if q is not None:  # a restart of the same query: it resumes where it stopped
            q.stop.set()
            fresh.end_offsets = q.end_offsets
            fresh.batch_id = q.batch_id
            fresh.kafka = q.kafka
        self._queries[query_id] = fresh
        self._forget_old()
        return fresh

    def _forget_old(self) -> None:
        if len(self._queries) <= 1000:
            return
        done = sorted((q for q in self._queries.values() if q.terminated),
                      key=lambda q: q.last_event_at)
        for q in done[: len(self._queries) - 1000]:
            del self._queries[q.query_id]

    def _started(self, event: Any) -> None:
        now = time.time()
        qid, rid = str(event.id), str(event.runId)
        name = getattr(event, "name", None) or None
        with self._lock:
            q = self._query(qid, rid, name, now)
            q.started_at = q.last_event_at = q.server_seen = now
            if q.kafka is False:  # a restart of a query known to read no Kafka source
                return
            self._emit(q, "started", now)
            self._start_heartbeat(q)

    def _progress(self, event: Any) -> None:
        now = time.time()
        info = parse_progress(event.progress)
        for err in info.errors:
            self._counters.inc("parse_errors")
            self._warn.warning("parse", "lagwatch: cannot read offsets: %s", err)
        if info.query_id is None or info.run_id is None:
            raise ValueError("progress event without id/runId")
        with self._lock:
            q = self._query(info.query_id, info.run_id, info.name, now)
            if info.kafka_sources == 0:
                if q.kafka is None:
                    log.info("lagwatch: query %s has no Kafka source; not reporting it",
                             info.name or info.query_id)
                q.kafka = False
                q.stop.set()
                return
            q.kafka = True
            q.last_event_at = q.last_progress = q.server_seen = now
            q.batch_id = info.batch_id
            q.batch_duration_ms = info.batch_duration_ms
            q.input_rows_per_second = info.input_rows_per_second
            q.processed_rows_per_second = info.processed_rows_per_second
            changed = info.end_offsets and info.end_offsets != q.end_offsets
            if info.end_offsets:
                q.end_offsets = info.end_offsets
            if info.latest_offsets:
                q.latest_offsets = info.latest_offsets
            self._emit(q, "progress", now)
            if changed and q.commit_group:
                self._sender.submit_commit(q.commit_group, q.end_offsets)
            if q.heartbeat is None or not q.heartbeat.is_alive():
                self._start_heartbeat(q)

    def _idle(self, event: Any) -> None:
        now = time.time()
        with self._lock:
            q = self._queries.get(str(event.id))
            if q is None or q.run_id != str(event.runId) or q.kafka is False:
                return
            q.last_event_at = q.server_seen = now
            self._emit(q, "idle", now)

    def _terminated(self, event: Any) -> None:
        now = time.time()
        with self._lock:
            q = self._queries.get(str(event.id))
            if q is None or q.run_id != str(event.runId):
                return  # never seen (listener added late, nothing reported): nothing to close
            q.stop.set()
            if q.kafka is False:
                return
            q.terminated = True
            q.last_event_at = q.server_seen = now
            exc = getattr(event, "exception", None)
            q.exception = str(exc)[:2000] if exc else None
            self._emit(q, "terminated", now)

    # -- reports -----------------------------------------------------------------------
    def _batch_started(self, q: _Query, now: float) -> float | None:
        if q.terminated:
            return None
        fresh_probe = now - q.probed_at <= 2 * self.heartbeat_interval
        if fresh_probe and q.trigger_active is False:
            return None
        since = q.last_event_at
        if fresh_probe and q.inactive_seen_at is not None:
            since = max(since, q.inactive_seen_at)
        return since

    def _connect(self) -> str | None:
        """Where this listener runs under Spark Connect: ``"server"`` (PySpark 3.5 runs client
        listeners in the server's Python, which sets ``SPARK_CONNECT_LOCAL_URL``), ``"client"``
        (4.x: the session that added it is a Connect session), None in a classic driver."""
        if os.environ.get("SPARK_CONNECT_LOCAL_URL"):
            return "server"
        session = getattr(self, "spark", None)
        if session is not None and type(session).__module__.startswith("pyspark.sql.connect"):
            return "client"
        return None

    def _emit(self, q: _Query, event: str, now: float) -> None:
        """Queue the full current state of ``q`` (the exporter keeps only the latest)."""
        report: dict[str, Any] = {
            "v": VERSION, "kind": "spark", "group": q.group, "query_id": q.query_id,
            "run_id": q.run_id, "name": _clip(q.name) if q.name else None, "event": event,
            "batch_id": q.batch_id, "batch_started": _r(self._batch_started(q, now)),
            "last_progress": _r(q.last_progress), "batch_duration_ms": q.batch_duration_ms,
            "input_rows_per_second": q.input_rows_per_second,
            "processed_rows_per_second": q.processed_rows_per_second,
            "interval": self.heartbeat_interval,
            "end_offsets": q.end_offsets, "latest_offsets": q.latest_offsets,
            "exception": q.exception,
        }
        # what a restart would run again; after termination the last batch read stays, as
        # Spark re-runs it when the query starts again
        if q.running_read_at and (q.terminated or now - q.running_read_at <= 3 * self.heartbeat_interval):
            running = q.running
            if running is not None and q.batch_id is not None and running["batch_id"] <= q.batch_id:
                running = None  # completed since it was read: its progress event came first
            report["running_batch"] = running
        connect = self._connect()
        if connect is not None:
            report["connect"] = connect
        if connect == "client":
            report["server_seen"] = _r(q.server_seen)
            report["server_error"] = q.server_error
        if self.cluster:
            report["cluster"] = self.cluster
        self._sender.submit(report_key("spark", q.group, q.query_id), report)

    # -- heartbeats ----------------------------------------------------------------------
    def _start_heartbeat(self, q: _Query) -> None:
        if q.terminated or q.kafka is False or self._closed:
            return
        t = threading.Thread(target=self._heartbeat_loop, args=(q,), daemon=True,
                             name=f"lagwatch-heartbeat-{q.query_id[:8]}")
        q.heartbeat = t
        t.start()

    def _heartbeat_loop(self, q: _Query) -> None:
        while not q.stop.wait(self.heartbeat_interval):
            try:
                if self.probe_status:
                    self._probe(q)
                with self._lock:
                    if q.stop.is_set() or q.terminated:
                        return
                    self._emit(q, "heartbeat", time.time())
                self._counters.inc("heartbeats")
            except Exception:  # noqa: BLE001 - keep beating
                self._counters.inc("heartbeat_errors")
                self._warn.warning("heartbeat", "lagwatch: heartbeat failed", exc_info=True)

    def _probe(self, q: _Query) -> None:
        """Ask ``query.status`` in a throwaway daemon thread, waiting at most 1 s.

        A JVM or Spark Connect server that does not answer must not stop heartbeats: a
        probe still waiting is left to finish, and the next heartbeat does not start another.
        """
        connect_client = self._connect() == "client"
        if q.handle_misses >= 3 and not connect_client:
            return  # this query is not reachable from here (another session); events only
        if q.probe_thread is not None and q.probe_thread.is_alive():
            self._counters.inc("probe_timeouts")
            return
        target = self._probe_server if connect_client else self._probe_once
        t = threading.Thread(target=target, args=(q,), daemon=True,
                             name=f"lagwatch-probe-{q.query_id[:8]}")
        q.probe_thread = t
        t.start()
        t.join(min(1.0, self.heartbeat_interval / 2))

    def _probe_once(self, q: _Query) -> None:
        try:
            if q.handle is None:
                q.handle = self._find_query(q.query_id)
                if q.handle is None:
                    q.handle_misses += 1
                    return
            self._trigger_seen(q, bool(q.handle.status.get("isTriggerActive")))
            self._read_running(q)
        except Exception:  # noqa: BLE001
            self._counters.inc("probe_errors")
            q.handle = None
            q.handle_misses += 1

    def _trigger_seen(self, q: _Query, active: bool) -> None:
        now = time.time()
        with self._lock:
            q.trigger_active = active
            q.probed_at = now
            if not active:
                q.inactive_seen_at = now

    def _probe_server(self, q: _Query) -> None:
        """A listener in a Spark Connect client: ask the server, over the session that added
        the listener, whether it still runs the query. An answer dates ``server_seen``; a
        failure (server down, session gone) is kept as ``server_error``; a server that twice
        in a row does not know the query as active has ended it: reported as terminated."""
        try:
            handle = q.handle or self.spark.streams.get(q.query_id)
            active = handle is not None and handle.isActive
            trigger = handle is not None and active and bool(handle.status.get("isTriggerActive"))
        except Exception as e:  # noqa: BLE001 - the server's failure is what is reported
            self._counters.inc("probe_errors")
            with self._lock:
                q.handle = None
                q.server_error = _first_line(e)
            return
        with self._lock:
            q.handle = handle if active else None
            q.server_seen, q.server_error = time.time(), None
            q.server_misses = 0 if active else q.server_misses + 1
            gone = q.server_misses >= 2 and not q.terminated
        if active:
            self._trigger_seen(q, trigger)
        elif gone:
            self._server_ended(q)

    def _server_ended(self, q: _Query) -> None:
        """The Connect server does not run the query any more and no termination event came."""
        now = time.time()
        with self._lock:
            q.stop.set()
            q.terminated = True
            q.last_event_at = now
            q.exception = q.exception or "the Spark Connect server does not run this query any more"
            self._emit(q, "terminated", now)

    def _read_running(self, q: _Query) -> None:
        """The batch planned and not committed, from the query's own offset and commit logs;
        left unknown where the query's JVM object is out of reach (Spark Connect)."""
        jsq = getattr(q.handle, "_jsq", None)
        if jsq is None:
            return
        try:
            running = running_batch(jsq.streamingQuery())
        except Exception:  # noqa: BLE001 - another Spark's internals: left unknown
            self._counters.inc("running_batch_unreadable")
            return
        with self._lock:
            q.running, q.running_read_at = running, time.time()

    def _find_query(self, query_id: str) -> Any:
        sessions: list[Any] = [self.spark]  # set by Spark Connect
        try:
            from pyspark.sql import SparkSession

            sessions += [SparkSession._activeSession, SparkSession._instantiatedSession]
        except Exception:  # noqa: BLE001
            pass
        for s in sessions:
            if s is None:
                continue
            try:
                sq = s.streams.get(query_id)
            except Exception:  # noqa: BLE001
                continue
            if sq is not None:
                return sq
        return None


def _first_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {text}"[:200]


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)

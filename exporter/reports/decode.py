"""Reports that consumers and Spark drivers publish to the compacted reports topic.

Format (JSON object, UTF-8, at most MAX_REPORT_BYTES), version 1::

    consumer: {"v":1, "kind":"consumer", "cluster"?: str, "group": str,
               "client_id": str, "member_id": str, "host": str,
               "sent_at": epoch s, "last_poll": epoch s, "interval": s,
               "partitions": [{"topic": str, "partition": int,
                               "position"?: int, "committed"?: int}],
               "closed"?: bool, "rebalances"?: int,
               "commit_mode"?: "auto"|"manual", "auto_commit_interval"?: s}
    spark:    {"v":1, "kind":"spark", "cluster"?: str, "group": str,
               "query_id": str, "run_id": str, "name"?: str|null,
               "sent_at": epoch s, "event": "started"|"progress"|"idle"|"heartbeat"|"terminated",
               "batch_id"?: int, "batch_started"?: epoch s|null, "last_progress"?: epoch s|null,
               "batch_duration_ms"?: number, "input_rows_per_second"?: number,
               "processed_rows_per_second"?: number, "interval": s,
               "end_offsets": {topic: {partition: offset}},
               "latest_offsets": {topic: {partition: offset}},
               "exception"?: str|null,
               "running_batch"?: null|{"batch_id": int, "start_offsets": {topic: {partition: offset}},
                                       "end_offsets": {topic: {partition: offset}}},
               "connect"?: "client"|"server", "server_seen"?: epoch s|null,
               "server_error"?: str|null}

Fields marked ``?`` are optional, so that reports of older reporters keep decoding:
``commit_mode`` is the consumer's own configuration (``enable.auto.commit``, with
``auto.commit.interval.ms`` as ``auto_commit_interval`` in seconds); ``running_batch`` is
the micro-batch Spark has planned (its offset log) but not committed (its commit log):
null when none is, absent when the listener cannot tell. ``connect`` says where the listener
runs under Spark Connect (absent: a classic driver, which runs the query itself): in the
``client`` (PySpark 4.x), apart from the server that runs the query, or in the ``server``'s
Python (3.5). A client listener adds ``server_seen``, when the server last spoke about the
query (an event or an answer to the listener's status probe, on the reporter's clock), and
``server_error``, why its last probe failed.

``rebalances``: how many rebalances the client took part in, cumulative (the Python
client counts the assignments librdkafka hands it; the JVM interceptor reports the
consumer's ``rebalance-total``), when it knows.

Times compared with each other come from the reporter's own clock
(``sent_at - last_poll``), so clock skew between hosts does not matter.
The decoder is strict: anything unexpected raises :class:`ReportError` with a
short reason that becomes the ``reason`` label of the drop counter.
"""

from __future__ import annotations

import json
import math
from typing import Any

from exporter.contracts.reports import (
    REPORTED_COMMIT_MODES,
    CommitMode,
    ConnectSide,
    ConsumerReport,
    Report,
    RunningBatch,
    SparkEvent,
    SparkReport,
)
from exporter.contracts.snapshot import TP
from lagwatch_client.wire import MAX_NAME, MAX_REPORT_BYTES, VERSION, encode, report_key  # noqa: F401

# The wire format is lagwatch_client.wire, shared with the reporters (encode and report_key
# are re-exported for tests that build reports the way reporters do).

_SPARK_EVENTS = tuple(e.value for e in SparkEvent)
MAX_PARTITIONS = 10_000
MAX_OFFSET = 2**63 - 1
# Reasons are a closed set: they are a label value of lagwatch_reports_dropped_total.
DROP_REASONS = ("oversized", "malformed", "wrong_type", "bad_version", "unknown_cluster",
                "absurd_value", "too_many_partitions", "flood")


class ReportError(ValueError):
    def __init__(self, reason: str, detail: str = "") -> None:
        assert reason in DROP_REASONS
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def _str(d: dict[str, Any], key: str, *, required: bool = True, empty: bool = False) -> str | None:
    v = d.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str) or (not v and not empty):
        raise ReportError("wrong_type", f"{key} must be a non-empty string")
    if len(v) > MAX_NAME:
        raise ReportError("absurd_value", f"{key} longer than {MAX_NAME}")
    return v


def _num(d: dict[str, Any], key: str, *, required: bool = True, lo: float = 0.0,
         hi: float = 1e15) -> float | None:
    v = d.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ReportError("wrong_type", f"{key} must be a number")
    if not math.isfinite(v) or not lo <= v <= hi:
        raise ReportError("absurd_value", f"{key}={v!r} out of range")
    return float(v)


def _offset(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ReportError("wrong_type", f"{what} must be an integer")
    if not 0 <= v <= MAX_OFFSET:
        raise ReportError("absurd_value", f"{what}={v} out of range")
    return v


def _partition(v: Any, what: str) -> int:
    if isinstance(v, str) and v.isascii() and v.isdigit() and len(v) < 8:
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1_000_000:
        raise ReportError("wrong_type", f"{what} must be a partition number")
    return v


def _offset_map(raw: Any, key: str) -> dict[TP, int]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ReportError("wrong_type", f"{key} must be an object")
    out: dict[TP, int] = {}
    for topic, parts in raw.items():
        if not isinstance(topic, str) or not topic or len(topic) > 249:
            raise ReportError("wrong_type", f"{key}: bad topic name")
        if not isinstance(parts, dict):
            raise ReportError("wrong_type", f"{key}.{topic} must be an object")
        for p, off in parts.items():
            out[(topic, _partition(p, f"{key}.{topic} partition"))] = _offset(off, f"{key} offset")
            if len(out) > MAX_PARTITIONS:
                raise ReportError("too_many_partitions")
    return out


def decode(raw: bytes | None, cluster: str, received_at: float) -> Report:
    """Validate one report read from ``cluster``'s reports topic."""
    d = _json_object(raw)
    if d.get("v") != VERSION:
        raise ReportError("bad_version", f"v={d.get('v')!r}")
    rc = d.get("cluster")
    if rc is not None and rc != cluster:
        raise ReportError("unknown_cluster", f"report for {rc!r} on cluster {cluster!r}")
    kind = d.get("kind")
    group = _str(d, "group")
    assert group is not None
    sent_at = _num(d, "sent_at", lo=1e9, hi=1e11)
    assert sent_at is not None
    interval = _num(d, "interval", required=False, lo=0.01, hi=86400) or 5.0
    if kind == "consumer":
        return _consumer(d, group, sent_at, interval, received_at)
    if kind == "spark":
        return _spark(d, group, sent_at, interval, received_at)
    raise ReportError("wrong_type", f"unknown kind {kind!r}")


def _json_object(raw: bytes | None) -> dict[str, Any]:
    """The report's JSON object, within the size limit."""
    if raw is None:
        raise ReportError("malformed", "empty value")
    if len(raw) > MAX_REPORT_BYTES:
        raise ReportError("oversized", f"{len(raw)} bytes")
    try:
        d = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ReportError("malformed", "not JSON") from None
    except RecursionError:  # "[[[[..." well under the size limit still overflows the parser
        raise ReportError("malformed", "nested too deeply") from None
    if not isinstance(d, dict):
        raise ReportError("malformed", "not a JSON object")
    return d


def _consumer(d: dict[str, Any], group: str, sent_at: float, interval: float,
              received_at: float) -> ConsumerReport:
    """A consumer's report (``kind: consumer``): its partitions' positions and commits."""
    positions, committed = _consumer_partitions(d.get("partitions", []))
    closed = d.get("closed", False)
    if not isinstance(closed, bool):
        raise ReportError("wrong_type", "closed must be a boolean")
    last_poll = _num(d, "last_poll", lo=1e9, hi=1e11)
    assert last_poll is not None
    mode, auto_interval = _commit_mode(d)
    return ConsumerReport(
        group=group, client_id=_str(d, "client_id", empty=True) or "",
        member_id=_str(d, "member_id", empty=True) or "", host=_str(d, "host", empty=True) or "",
        sent_at=sent_at, last_poll=last_poll, interval=interval,
        positions=positions, committed=committed, closed=closed, received_at=received_at,
        rebalances=_offset(d["rebalances"], "rebalances") if d.get("rebalances") is not None else None,
        commit_mode=mode, auto_commit_interval=auto_interval)


def _commit_mode(d: dict[str, Any]) -> tuple[CommitMode | None, float | None]:
    """(``commit_mode``, ``auto_commit_interval``): both optional, the interval only with "auto"."""
    mode = d.get("commit_mode")
    if mode is not None and mode not in REPORTED_COMMIT_MODES:
        raise ReportError("wrong_type", f"commit_mode must be one of {', '.join(REPORTED_COMMIT_MODES)}")
    auto_interval = _num(d, "auto_commit_interval", required=False, lo=0.0, hi=86400 * 365)
    if auto_interval is not None and mode != CommitMode.AUTO:
        raise ReportError("wrong_type", "auto_commit_interval without commit_mode auto")
    return (None if mode is None else CommitMode(mode)), auto_interval


def _running_batch(d: dict[str, Any]) -> RunningBatch | None:
    """A Spark report's ``running_batch``: None when absent (the listener cannot tell),
    an empty RunningBatch when null (no batch running)."""
    if "running_batch" not in d:
        return None
    rb = d["running_batch"]
    if rb is None:
        return RunningBatch(batch_id=None, start_offsets={}, end_offsets={})
    if not isinstance(rb, dict):
        raise ReportError("wrong_type", "running_batch must be an object or null")
    batch_id = rb.get("batch_id")
    if batch_id is None:
        raise ReportError("wrong_type", "running_batch.batch_id must be an integer")
    return RunningBatch(batch_id=_offset(batch_id, "running_batch.batch_id"),
                        start_offsets=_offset_map(rb.get("start_offsets"), "running_batch.start_offsets"),
                        end_offsets=_offset_map(rb.get("end_offsets"), "running_batch.end_offsets"))


def _consumer_partitions(parts: Any) -> tuple[dict[TP, int], dict[TP, int]]:
    """(positions, committed offsets) from a consumer report's ``partitions`` list."""
    if not isinstance(parts, list):
        raise ReportError("wrong_type", "partitions must be a list")
    if len(parts) > MAX_PARTITIONS:
        raise ReportError("too_many_partitions")
    positions: dict[TP, int] = {}
    committed: dict[TP, int] = {}
    for item in parts:
        if not isinstance(item, dict):
            raise ReportError("wrong_type", "partition entry must be an object")
        topic = _str(item, "topic")
        assert topic is not None
        tp = (topic, _partition(item.get("partition"), "partition"))
        if item.get("position") is not None:
            positions[tp] = _offset(item["position"], "position")
        if item.get("committed") is not None:
            committed[tp] = _offset(item["committed"], "committed")
    return positions, committed


def _spark(d: dict[str, Any], group: str, sent_at: float, interval: float,
           received_at: float) -> SparkReport:
    """A Spark listener's report (``kind: spark``): one query's progress or liveness."""
    event = d.get("event")
    if event not in _SPARK_EVENTS:
        raise ReportError("wrong_type", f"unknown spark event {event!r}")
    batch_id = d.get("batch_id")
    if batch_id is not None:
        batch_id = _offset(batch_id, "batch_id")
    exc = d.get("exception")
    if exc is not None and not isinstance(exc, str):
        raise ReportError("wrong_type", "exception must be a string")
    return SparkReport(
        group=group, query_id=_str(d, "query_id") or "", run_id=_str(d, "run_id") or "",
        name=_str(d, "name", required=False), sent_at=sent_at, event=SparkEvent(event),
        batch_id=batch_id,
        batch_started=_num(d, "batch_started", required=False, lo=1e9, hi=1e11),
        last_progress=_num(d, "last_progress", required=False, lo=1e9, hi=1e11),
        batch_duration_ms=_num(d, "batch_duration_ms", required=False),
        input_rows_per_second=_num(d, "input_rows_per_second", required=False),
        processed_rows_per_second=_num(d, "processed_rows_per_second", required=False),
        interval=interval,
        end_offsets=_offset_map(d.get("end_offsets"), "end_offsets"),
        latest_offsets=_offset_map(d.get("latest_offsets"), "latest_offsets"),
        exception=(exc[:2000] if exc else None), received_at=received_at,
        running=_running_batch(d), **_connect(d))


CONNECT_SIDES = tuple(ConnectSide)


def _connect(d: dict[str, Any]) -> dict[str, Any]:
    """A Spark report's optional Spark Connect fields (absent from classic drivers' and older
    listeners' reports)."""
    side = d.get("connect")
    if side is not None and side not in CONNECT_SIDES:
        raise ReportError("wrong_type", f"connect must be one of {', '.join(CONNECT_SIDES)}")
    err = d.get("server_error")
    if err is not None and not isinstance(err, str):
        raise ReportError("wrong_type", "server_error must be a string")
    return {"connect": None if side is None else ConnectSide(side),
            "server_seen": _num(d, "server_seen", required=False, lo=1e9, hi=1e11),
            "server_error": err[:200] if err else None}

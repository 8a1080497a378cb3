"""Redelivery exposure and commit mode (exporter/evaluate/exposure.py), without a broker:
the report fields (optional, so older reporters' reports keep working), the evaluator's
position - committed per partition and a Spark query's running batch, and what /metrics,
the JSON API and the status page serve. The live halves are in tests/test_exposure_live.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Thresholds
from exporter.contracts.reports import ConsumerReport, SparkReport
from exporter.contracts.snapshot import GroupSample, Member, PartitionOffsets, Snapshot
from exporter.evaluate.evaluator import Evaluator
from exporter.expose.api import group_doc, group_summary
from exporter.expose.render import render_cluster
from exporter.expose.statuspage import render
from exporter.reports.decode import decode

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

T0 = 1_800_000_000.0
A, B = ("orders", 0), ("orders", 1)
TH = Thresholds(stall_after=30, livelock_after=20, lag_seconds=3600, window=300, report_stale_after=30)


def _report(**extra: Any) -> dict[str, Any]:
    rep: dict[str, Any] = {
        "v": 1, "kind": "consumer", "group": "g", "client_id": "billing-7", "member_id": "m-1",
        "host": "/10.0.0.5", "sent_at": T0, "last_poll": T0, "interval": 5,
        "partitions": [{"topic": "orders", "partition": 0, "position": 160, "committed": 150},
                       {"topic": "orders", "partition": 1, "position": 75}]}
    rep.update(extra)
    return rep


def parse_exposition(v: Any) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a view's families as served (header, then sample lines, per family)."""
    text = b"".join(header + bytes(lines) for _name, header, lines in render_cluster(v)).decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def _decode(rep: dict[str, Any]) -> ConsumerReport | SparkReport:
    return decode(json.dumps(rep).encode(), "c", T0)


def _snap(members: tuple[Member, ...], committed: dict, group: str = "g") -> Snapshot:
    po = PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0, hw=400, lso=400, leo=400)
    return Snapshot(cluster="c", taken_at=T0, duration=0.01, partitions={A: po, B: po},
                    groups={group: GroupSample(group_id=group, type="classic", state="stable",
                                               members=members, coordinator=1, committed=committed)})


MEMBER = Member(member_id="m-1", client_id="billing-7", host="/10.0.0.5", assignment=(A, B))


def test_an_older_reporters_report_decodes_without_commit_mode() -> None:
    rep = _decode(_report())
    assert isinstance(rep, ConsumerReport)
    assert (rep.commit_mode, rep.auto_commit_interval) == (None, None)
    spark = _decode({"v": 1, "kind": "spark", "group": "q", "query_id": "i", "run_id": "r",
                     "sent_at": T0, "event": "heartbeat", "end_offsets": {"orders": {"0": 5}}})
    assert isinstance(spark, SparkReport) and spark.running is None


def test_commit_mode_and_running_batch_decode() -> None:
    rep = _decode(_report(commit_mode="auto", auto_commit_interval=5.0))
    assert isinstance(rep, ConsumerReport)
    assert (rep.commit_mode, rep.auto_commit_interval) == ("auto", 5.0)
    rep = _decode(_report(commit_mode="manual"))
    assert isinstance(rep, ConsumerReport) and (rep.commit_mode, rep.auto_commit_interval) == ("manual", None)
    base = {"v": 1, "kind": "spark", "group": "q", "query_id": "i", "run_id": "r", "sent_at": T0,
            "event": "heartbeat"}
    spark = _decode({**base, "running_batch": {"batch_id": 4, "start_offsets": {"orders": {"0": 10}},
                                               "end_offsets": {"orders": {"0": 17}}}})
    assert isinstance(spark, SparkReport) and spark.running is not None
    assert (spark.running.batch_id, spark.running.start_offsets, spark.running.end_offsets) == (
        4, {A: 10}, {A: 17})
    idle = _decode({**base, "running_batch": None})
    assert isinstance(idle, SparkReport) and idle.running is not None and idle.running.batch_id is None


def _evaluate(reports: list[ConsumerReport], committed: dict | None = None,
              members: tuple[Member, ...] = (MEMBER,)) -> Any:
    ev = Evaluator("c", TH, interval=10)
    return ev.evaluate(_snap(members, {A: 150, B: 70} if committed is None else committed),
                       {"g": reports})


def test_exposure_is_position_minus_committed_per_partition() -> None:
    # A: the report's own committed offset (150); B: none reported yet, the broker's (70).
    rep = _decode(_report(commit_mode="manual"))
    assert isinstance(rep, ConsumerReport)
    v = _evaluate([rep])
    g = v.groups["g"]
    assert g.exposure is not None
    assert g.exposure.partitions == {A: 10, B: 5}
    assert g.exposure.records == 15
    assert (g.exposure.commit_mode, g.members[0].commit_mode) == ("manual", "manual")
    # a position behind the committed offset (a commit after the report): 0, never negative
    v = _evaluate([rep], committed={A: 150, B: 90})
    assert v.groups["g"].exposure.partitions == {A: 10, B: 0}


def test_older_reports_still_give_exposure_and_no_commit_mode() -> None:
    rep = _decode(_report())
    assert isinstance(rep, ConsumerReport)
    g = _evaluate([rep]).groups["g"]
    assert g.exposure is not None and g.exposure.records == 15
    assert g.exposure.commit_mode is None and g.members[0].commit_mode is None


def test_no_instrumentation_means_unknown_not_zero() -> None:
    v = _evaluate([])
    assert v.groups["g"].exposure is None
    families = parse_exposition(v)
    assert not [s for s in families if "redelivery_exposure" in s[0]]
    assert group_summary(v.groups["g"])["redelivery_exposure_records"] is None


def test_members_in_different_modes_are_mixed_with_the_longest_interval() -> None:
    m2 = Member(member_id="m-2", client_id="billing-8", host="/10.0.0.6", assignment=(B,))
    m1 = Member(member_id="m-1", client_id="billing-7", host="/10.0.0.5", assignment=(A,))
    r1 = _decode(_report(commit_mode="auto", auto_commit_interval=5.0,
                         partitions=[{"topic": "orders", "partition": 0, "position": 151}]))
    r2 = _decode(_report(member_id="m-2", client_id="billing-8", commit_mode="auto",
                         auto_commit_interval=1.0,
                         partitions=[{"topic": "orders", "partition": 1, "position": 72}]))
    g = _evaluate([r1, r2], members=(m1, m2)).groups["g"]  # type: ignore[list-item]
    assert (g.exposure.commit_mode, g.exposure.auto_commit_interval) == ("auto", 5.0)
    assert g.exposure.partitions == {A: 1, B: 2}
    r3 = _decode(_report(member_id="m-2", client_id="billing-8", commit_mode="manual",
                         partitions=[{"topic": "orders", "partition": 1, "position": 72}]))
    g = _evaluate([r1, r3], members=(m1, m2)).groups["g"]  # type: ignore[list-item]
    assert (g.exposure.commit_mode, g.exposure.auto_commit_interval) == ("mixed", 5.0)


def _spark(running: dict | None, absent: bool = False) -> SparkReport:
    rep: dict[str, Any] = {"v": 1, "kind": "spark", "group": "q", "query_id": "i", "run_id": "r",
                           "sent_at": T0, "event": "heartbeat", "batch_id": 6,
                           "batch_started": T0 - 1, "end_offsets": {"orders": {"0": 100, "1": 40}},
                           "interval": 5}
    if not absent:
        rep["running_batch"] = running
    out = _decode(rep)
    assert isinstance(out, SparkReport)
    return out


def _spark_view(rep: SparkReport) -> Any:
    ev = Evaluator("c", TH, interval=10)
    po = PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0, hw=400, lso=400, leo=400)
    snap = Snapshot(cluster="c", taken_at=T0, duration=0.01, partitions={A: po, B: po}, groups={})
    return ev.evaluate(snap, spark_reports={"q": rep})


def test_a_spark_querys_running_batch_exposure_is_end_minus_committed() -> None:
    rep = _spark({"batch_id": 7, "start_offsets": {"orders": {"0": 100, "1": 40}},
                  "end_offsets": {"orders": {"0": 130, "1": 41}}})
    v = _spark_view(rep)
    ex = v.groups["q"].exposure
    assert ex is not None and ex.partitions == {A: 30, B: 1} and ex.records == 31
    doc = group_doc("c", v.groups["q"])
    assert doc["redelivery_exposure_records"] == 31
    assert [p["redelivery_exposure_records"] for p in doc["partitions"]] == [30, 1]
    # no batch running: nothing would be re-run
    ex = _spark_view(_spark(None)).groups["q"].exposure
    assert ex is not None and ex.partitions == {A: 0, B: 0} and ex.records == 0
    # an older listener: unknown
    assert _spark_view(_spark(None, absent=True)).groups["q"].exposure is None


def test_metrics_api_and_page_show_exposure_and_commit_mode() -> None:
    rep = _decode(_report(commit_mode="auto", auto_commit_interval=5.0))
    assert isinstance(rep, ConsumerReport)
    v = _evaluate([rep])
    families = parse_exposition(v)
    got = {(name, labels.get("topic"), labels.get("partition")): val for name, labels, val in families
           if "redelivery_exposure" in name}
    assert got == {("kafka_consumergroup_partition_redelivery_exposure_records", "orders", "0"): 10.0,
                   ("kafka_consumergroup_partition_redelivery_exposure_records", "orders", "1"): 5.0,
                   ("kafka_consumergroup_redelivery_exposure_records", None, None): 15.0}
    doc = group_doc("c", v.groups["g"])
    assert (doc["redelivery_exposure_records"], doc["commit_mode"], doc["auto_commit_interval_seconds"]) == (
        15, "auto", 5.0)
    member = doc["members"][0]
    assert (member["commit_mode"], member["auto_commit_interval_seconds"]) == ("auto", 5.0)
    page = render([v], now=T0)
    assert "redelivery exposure" in page
    assert "<td class='num exposure'>15 <span class='reason'>auto every 5 s</span></td>" in page


# -- the Spark listener's reading of the running batch (spark_metrics.offsets.running_batch) --
# Stand-ins for the py4j handles of a StreamExecution's offset and commit logs, with the
# calls the listener makes (Scala Option, Tuple2, Seq); tests/test_spark.py reads real ones.

class _Opt:
    def __init__(self, v: Any = None) -> None:
        self.v = v

    def isEmpty(self) -> bool:  # noqa: N802 - Scala's name
        return self.v is None

    def get(self) -> Any:
        return self.v


class _Pair:
    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b

    def _1(self) -> Any:
        return self.a

    def _2(self) -> Any:
        return self.b


class _Seq:
    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def size(self) -> int:
        return len(self.items)

    def apply(self, i: int) -> Any:
        return self.items[i]


class _Offset:
    def __init__(self, text: str) -> None:
        self.text = text

    def json(self) -> str:
        return self.text


class _OffsetSeq:
    def __init__(self, *jsons: str | None) -> None:
        self.seq = _Seq([_Opt(_Offset(j) if j is not None else None) for j in jsons])

    def offsets(self) -> _Seq:
        return self.seq


class _Log:
    def __init__(self, batches: dict[int, Any]) -> None:
        self.batches = batches

    def getLatest(self) -> _Opt:  # noqa: N802
        if not self.batches:
            return _Opt()
        n = max(self.batches)
        return _Opt(_Pair(n, self.batches[n]))

    def get(self, n: int) -> _Opt:
        return _Opt(self.batches.get(n))


class _Execution:
    def __init__(self, offsets: dict[int, Any], commits: dict[int, Any]) -> None:
        self.offsets, self.commits = _Log(offsets), _Log(commits)

    def offsetLog(self) -> _Log:  # noqa: N802
        return self.offsets

    def commitLog(self) -> _Log:  # noqa: N802
        return self.commits


def test_running_batch_is_read_from_the_offset_and_commit_logs() -> None:
    from spark_metrics.offsets import running_batch

    logs = {0: _OffsetSeq('{"orders":{"0":100,"1":40}}', "17"),  # a Kafka source and a rate source
            1: _OffsetSeq('{"orders":{"0":130,"1":41}}', "19")}
    got = running_batch(_Execution(logs, {0: object()}))
    assert got == {"batch_id": 1, "start_offsets": {"orders": {"0": 100, "1": 40}},
                   "end_offsets": {"orders": {"0": 130, "1": 41}}}
    assert running_batch(_Execution(logs, {0: object(), 1: object()})) is None  # committed
    assert running_batch(_Execution({}, {})) is None  # nothing planned yet
    first = running_batch(_Execution({0: _OffsetSeq('{"orders":{"0":5}}', None)}, {}))
    assert first == {"batch_id": 0, "start_offsets": {}, "end_offsets": {"orders": {"0": 5}}}
    # what the listener sends decodes, and the exporter's exposure is end - start
    rep = _spark({"batch_id": got["batch_id"], "start_offsets": got["start_offsets"],  # type: ignore[index]
                  "end_offsets": got["end_offsets"]})  # type: ignore[index]
    ex = _spark_view(rep).groups["q"].exposure
    assert ex is not None and ex.partitions == {A: 30, B: 1}


def test_listener_sends_the_running_batch_it_read() -> None:
    from spark_metrics import LagListener
    from spark_metrics.listener import _Query

    sent: list[dict[str, Any]] = []
    lst = LagListener(bootstrap_servers="127.0.0.1:1", group="payments", create_topic=False,
                      probe_status=False)
    lst._sender.submit = lambda _key, report: sent.append(report)  # type: ignore[method-assign]
    q = _Query(query_id="qid", run_id="rid", name="n", group="payments", commit_group=None,
               started_at=T0, last_event_at=T0)

    class Handle:
        _jsq = type("W", (), {"streamingQuery": lambda self: _Execution(
            {0: _OffsetSeq('{"orders":{"0":100}}'), 1: _OffsetSeq('{"orders":{"0":104}}')},
            {0: object()})})()

    q.handle = Handle()
    lst._emit(q, "heartbeat", T0)
    assert "running_batch" not in sent[-1]  # not read yet: unknown
    lst._read_running(q)
    lst._emit(q, "heartbeat", q.running_read_at)
    assert sent[-1]["running_batch"] == {"batch_id": 1, "start_offsets": {"orders": {"0": 100}},
                                         "end_offsets": {"orders": {"0": 104}}}
    q.batch_id = 1  # batch 1's progress event: it completed since it was read
    lst._emit(q, "progress", q.running_read_at)
    assert sent[-1]["running_batch"] is None
    q.handle = type("Connect", (), {})()  # a handle without the JVM object: stays unknown
    lst._emit(q, "heartbeat", q.running_read_at + 60)
    assert "running_batch" not in sent[-1]
    lst.close(0.1)


def test_recordings_keep_the_new_report_fields() -> None:
    """--record writes reports with exporter/recording.py's typed JSON: the new fields round-trip,
    and a report without them is written as before (defaults left out)."""
    from exporter.recording import _dec, _enc

    rep = _decode(_report(commit_mode="auto", auto_commit_interval=5.0))
    assert _dec(ConsumerReport, json.loads(json.dumps(_enc(rep)))) == rep
    old = _decode(_report())
    assert "commit_mode" not in _enc(old) and "auto_commit_interval" not in _enc(old)
    spark = _spark({"batch_id": 7, "start_offsets": {"orders": {"0": 100}},
                    "end_offsets": {"orders": {"0": 130}}})
    assert _dec(SparkReport, json.loads(json.dumps(_enc(spark)))) == spark
    assert "running" not in _enc(_spark(None, absent=True))

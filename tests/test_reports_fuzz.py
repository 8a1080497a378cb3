"""Hostile input on the reports topic: the decoder and the report reader never crash or get poisoned.

* Property tests (hypothesis) over :func:`exporter.reports.decode.decode`: arbitrary bytes,
  arbitrary JSON, and valid reports with one field replaced by arbitrary JSON
  raise nothing but :class:`ReportError` (whose reason is one of DROP_REASONS),
  and whatever is accepted holds no NaN, no infinity, no negative or oversized
  offset. Valid generated reports round-trip field by field.
* :class:`ReportReader.ingest` with real shapes: malformed, wrong types, huge
  payloads, unknown clusters, absurd offsets, floods from one key — each dropped
  and counted under its reason, and a good report stored earlier (for the same
  group, from the same key) survives the barrage unchanged.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.config import ClusterConfig, Thresholds
from exporter.contracts.reports import ConsumerReport, SparkReport
from exporter.reports import reader as report_reader
from exporter.reports.decode import (
    DROP_REASONS,
    MAX_OFFSET,
    MAX_REPORT_BYTES,
    ReportError,
    decode,
    encode,
    report_key,
)
from exporter.reports.reader import FLOOD_PER_KEY, FLOOD_WINDOW, ReportReader

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

CLUSTER = "c"
NOW = 1_800_000_000.0
# database=None: no .hypothesis/ directory in the repository.
FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats() | st.text(max_size=20))
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children,
                                                                      max_size=5),
    max_leaves=25)
# Any text a reporter might put in a name: quotes, newlines, unicode (no lone surrogates: not UTF-8).
names = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)
topics = st.from_regex(r"[A-Za-z0-9._-]{1,60}", fullmatch=True)
offsets = st.integers(0, MAX_OFFSET)
times = st.floats(1e9, 1e11)
rates = st.floats(0, 1e15)
part_entries = st.fixed_dictionaries(
    {"topic": topics, "partition": st.integers(0, 999_999)},
    optional={"position": offsets, "committed": offsets})
consumer_reports = st.fixed_dictionaries(
    {"v": st.just(1), "kind": st.just("consumer"), "group": names,
     "client_id": st.text(max_size=30), "member_id": st.text(max_size=30), "host": st.text(max_size=30),
     "sent_at": times, "last_poll": times, "partitions": st.lists(part_entries, max_size=12)},
    optional={"cluster": st.just(CLUSTER), "closed": st.booleans(), "interval": st.floats(0.01, 86400)})
offset_maps = st.dictionaries(topics, st.dictionaries(st.integers(0, 999_999).map(str), offsets,
                                                      max_size=4), max_size=4)
spark_reports = st.fixed_dictionaries(
    {"v": st.just(1), "kind": st.just("spark"), "group": names, "query_id": names, "run_id": names,
     "sent_at": times, "event": st.sampled_from(["started", "progress", "idle", "heartbeat", "terminated"]),
     "end_offsets": offset_maps, "latest_offsets": offset_maps},
    optional={"cluster": st.just(CLUSTER), "name": st.none() | names, "batch_id": st.none() | offsets,
              "batch_started": st.none() | times, "last_progress": st.none() | times,
              "batch_duration_ms": rates, "input_rows_per_second": rates,
              "processed_rows_per_second": rates, "interval": st.floats(0.01, 86400),
              "exception": st.none() | st.text(max_size=3000)})
valid_reports = consumer_reports | spark_reports


def check_invariants(rep: ConsumerReport | SparkReport) -> None:
    """What the evaluator relies on: numbers finite and in range, names non-empty strings."""
    assert isinstance(rep.group, str) and rep.group
    if isinstance(rep, ConsumerReport):
        maps = [rep.positions, rep.committed]
        floats = [rep.sent_at, rep.last_poll, rep.interval]
    else:
        assert isinstance(rep, SparkReport)
        maps = [rep.end_offsets, rep.latest_offsets]
        floats = [f for f in (rep.sent_at, rep.interval, rep.batch_started, rep.last_progress,
                              rep.batch_duration_ms, rep.input_rows_per_second,
                              rep.processed_rows_per_second) if f is not None]
        assert rep.batch_id is None or (type(rep.batch_id) is int and 0 <= rep.batch_id <= MAX_OFFSET)
    for m in maps:
        for (topic, part), off in m.items():
            assert isinstance(topic, str) and topic
            assert type(part) is int and part >= 0
            assert type(off) is int and 0 <= off <= MAX_OFFSET, off
    for f in floats:
        assert isinstance(f, float) and math.isfinite(f) and f >= 0, f


def decode_or_reason(raw: bytes | None) -> ConsumerReport | SparkReport | str:
    try:
        rep = decode(raw, CLUSTER, NOW)
    except ReportError as e:
        assert e.reason in DROP_REASONS
        return e.reason
    check_invariants(rep)
    return rep


# -- properties of the decoder ------------------------------------------------------

@FUZZ
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(raw: bytes) -> None:
    decode_or_reason(raw)


@FUZZ
@given(json_values)
def test_arbitrary_json(value: Any) -> None:
    decode_or_reason(json.dumps(value).encode())  # NaN and Infinity tokens included


@FUZZ
@given(valid_reports, st.data())
def test_one_field_replaced_by_garbage(report: dict[str, Any], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(report) + ["partitions", "end_offsets", "closed", "commit_mode",
                                                       "auto_commit_interval", "running_batch"]))
    report[key] = data.draw(json_values)
    decode_or_reason(json.dumps(report).encode())


@FUZZ
@given(valid_reports, st.data())
def test_nested_field_replaced_by_garbage(report: dict[str, Any], data: st.DataObject) -> None:
    if report["kind"] == "consumer":
        report["partitions"].append({"topic": data.draw(json_values), "partition": data.draw(json_values),
                                     "position": data.draw(json_values)})
    else:
        report["end_offsets"][data.draw(st.text(max_size=5))] = data.draw(json_values)
    decode_or_reason(json.dumps(report).encode())


@FUZZ
@given(valid_reports)
def test_valid_reports_round_trip(report: dict[str, Any]) -> None:
    rep = decode(encode(report), CLUSTER, NOW)
    check_invariants(rep)
    assert rep.group == report["group"]
    assert rep.sent_at == report["sent_at"]
    assert rep.received_at == NOW
    assert rep.interval == report.get("interval", 5.0)
    if report["kind"] == "consumer":
        assert isinstance(rep, ConsumerReport)
        pos = {(p["topic"], p["partition"]): p["position"] for p in report["partitions"] if "position" in p}
        com = {(p["topic"], p["partition"]): p["committed"] for p in report["partitions"]
               if "committed" in p}
        assert (rep.positions, rep.committed) == (pos, com)
        assert (rep.client_id, rep.member_id, rep.host) == (report["client_id"], report["member_id"],
                                                            report["host"])
        assert rep.last_poll == report["last_poll"]
        assert rep.closed is report.get("closed", False)
    else:
        assert isinstance(rep, SparkReport)

        def tps(m: dict[str, dict[str, int]]) -> dict[tuple[str, int], int]:
            return {(t, int(p)): o for t, ps in m.items() for p, o in ps.items()}

        assert rep.end_offsets == tps(report["end_offsets"])
        assert rep.latest_offsets == tps(report["latest_offsets"])
        assert (rep.query_id, rep.run_id, rep.event) == (report["query_id"], report["run_id"],
                                                         report["event"])
        assert rep.name == report.get("name")
        assert rep.batch_id == report.get("batch_id")
        for k in ("batch_started", "last_progress", "batch_duration_ms", "input_rows_per_second",
                  "processed_rows_per_second"):
            assert getattr(rep, k) == report.get(k), k
        assert rep.exception == ((report.get("exception") or "")[:2000] or None)


# -- hand-picked hostile payloads ------------------------------------------------------

def consumer(group: str = "A", member: str = "m1", sent_at: float = NOW - 1, **extra: Any) -> dict[str, Any]:
    rep: dict[str, Any] = {
        "v": 1, "kind": "consumer", "cluster": CLUSTER, "group": group, "client_id": f"{member}-client",
        "member_id": member, "host": "/10.0.0.1", "sent_at": sent_at, "last_poll": NOW - 2,
        "interval": 5, "partitions": [{"topic": "orders", "partition": 0, "position": 42, "committed": 40}]}
    rep.update(extra)
    return rep


def raw(rep: dict[str, Any]) -> bytes:
    return json.dumps(rep).encode()


HOSTILE: list[tuple[str, bytes | None, str]] = [
    ("tombstone", None, "malformed"),
    ("empty", b"", "malformed"),
    ("not-json", b"{\"v\": 1, \"kind\": ", "malformed"),
    ("not-utf8", b"\xff\xfe\x00{", "malformed"),
    ("json-array", b"[1, 2, 3]", "malformed"),
    ("json-string", b"\"consumer\"", "malformed"),
    ("deeply-nested-array", b"[" * 100_000, "malformed"),
    ("deeply-nested-object", b"{\"a\":" * 40_000 + b"1" + b"}" * 40_000, "malformed"),
    ("huge", raw(consumer(host="x" * (MAX_REPORT_BYTES + 1))), "oversized"),
    ("huge-garbage", b"\x00" * (4 * MAX_REPORT_BYTES), "oversized"),
    ("no-version", raw({k: v for k, v in consumer().items() if k != "v"}), "bad_version"),
    ("future-version", raw(consumer(v=2)), "bad_version"),
    ("unknown-cluster", raw(consumer(cluster="someone-else")), "unknown_cluster"),
    ("unknown-kind", raw(consumer(kind="producer")), "wrong_type"),
    ("group-number", raw(consumer(group=12)), "wrong_type"),
    ("group-empty", raw(consumer(group="")), "wrong_type"),
    ("group-too-long", raw(consumer(group="g" * 10_000)), "absurd_value"),
    ("sent-at-string", raw(consumer(sent_at="now")), "wrong_type"),
    ("sent-at-nan", raw(consumer()).replace(b"\"sent_at\": 1799999999.0", b"\"sent_at\": NaN"),
     "absurd_value"),
    ("sent-at-infinity", raw(consumer()).replace(b"\"sent_at\": 1799999999.0", b"\"sent_at\": Infinity"),
     "absurd_value"),
    ("sent-at-year-1970", raw(consumer(sent_at=5)), "absurd_value"),
    ("partitions-object", raw(consumer(partitions={"orders": 0})), "wrong_type"),
    ("partition-negative", raw(consumer(partitions=[{"topic": "t", "partition": -1, "position": 1}])),
     "wrong_type"),
    ("partition-superscript-digit", raw(consumer(partitions=[{"topic": "t", "partition": "\u00b2"}])),
     "wrong_type"),
    ("offset-negative", raw(consumer(partitions=[{"topic": "t", "partition": 0, "position": -5}])),
     "absurd_value"),
    ("offset-2^63", raw(consumer(partitions=[{"topic": "t", "partition": 0, "committed": 2**63}])),
     "absurd_value"),
    ("offset-2^200", raw(consumer(partitions=[{"topic": "t", "partition": 0, "committed": 2**200}])),
     "absurd_value"),
    ("offset-float", raw(consumer(partitions=[{"topic": "t", "partition": 0, "position": 1e30}])),
     "wrong_type"),
    ("offset-string", raw(consumer(partitions=[{"topic": "t", "partition": 0, "position": "42"}])),
     "wrong_type"),
    ("offset-bool", raw(consumer(partitions=[{"topic": "t", "partition": 0, "position": True}])),
     "wrong_type"),
    ("offset-5000-digits", raw(consumer()).replace(b"\"position\": 42", b"\"position\": " + b"9" * 5000),
     "malformed"),
    ("too-many-partitions", raw({"v": 1, "kind": "spark", "group": "q", "query_id": "i", "run_id": "r",
                                 "sent_at": NOW, "event": "progress",
                                 "end_offsets": {"t": {str(i): 0 for i in range(10_001)}}}),
     "too_many_partitions"),
    ("closed-string", raw(consumer(closed="yes")), "wrong_type"),
    ("commit-mode-unknown", raw(consumer(commit_mode="sometimes")), "wrong_type"),
    ("commit-mode-bool", raw(consumer(commit_mode=True)), "wrong_type"),
    ("auto-commit-interval-string", raw(consumer(commit_mode="auto", auto_commit_interval="5s")),
     "wrong_type"),
    ("auto-commit-interval-negative", raw(consumer(commit_mode="auto", auto_commit_interval=-1)),
     "absurd_value"),
    ("auto-commit-interval-with-manual", raw(consumer(commit_mode="manual", auto_commit_interval=5)),
     "wrong_type"),
    ("spark-running-batch-list", raw({"v": 1, "kind": "spark", "group": "q", "query_id": "i",
                                      "run_id": "r", "sent_at": NOW, "event": "heartbeat",
                                      "running_batch": [1]}), "wrong_type"),
    ("spark-running-batch-no-id", raw({"v": 1, "kind": "spark", "group": "q", "query_id": "i",
                                       "run_id": "r", "sent_at": NOW, "event": "heartbeat",
                                       "running_batch": {"end_offsets": {"t": {"0": 5}}}}),
     "wrong_type"),
    ("spark-running-batch-negative-offset", raw({"v": 1, "kind": "spark", "group": "q", "query_id": "i",
                                                 "run_id": "r", "sent_at": NOW, "event": "heartbeat",
                                                 "running_batch": {"batch_id": 3,
                                                                   "end_offsets": {"t": {"0": -5}}}}),
     "absurd_value"),
    ("spark-bad-event", raw({"v": 1, "kind": "spark", "group": "q", "query_id": "i", "run_id": "r",
                             "sent_at": NOW, "event": "exploded"}), "wrong_type"),
    ("spark-offset-map-list", raw({"v": 1, "kind": "spark", "group": "q", "query_id": "i", "run_id": "r",
                                   "sent_at": NOW, "event": "progress", "end_offsets": [1]}), "wrong_type"),
    ("spark-absurd-offset", raw({"v": 1, "kind": "spark", "group": "q", "query_id": "i", "run_id": "r",
                                 "sent_at": NOW, "event": "progress",
                                 "end_offsets": {"t": {"0": -1}}}), "absurd_value"),
]


@pytest.mark.parametrize(("value", "reason"), [(v, r) for _, v, r in HOSTILE], ids=[i for i, _, _ in HOSTILE])
def test_hostile_payload_reason(value: bytes | None, reason: str) -> None:
    assert decode_or_reason(value) == reason


# -- the report reader ------------------------------------------------------------------

def reader() -> ReportReader:
    # Never started: no thread, no Kafka; ingest() is what the tailing thread calls.
    return ReportReader(ClusterConfig(name=CLUSTER, bootstrap_servers="127.0.0.1:9"), Thresholds())


def stored(r: ReportReader, now: float = NOW) -> dict[str, list[ConsumerReport]]:
    consumers, _ = r.current(now)
    return consumers


def test_each_hostile_payload_dropped_and_counted() -> None:
    r = reader()
    key_a = report_key("consumer", "A", "m1")
    r.ingest(key_a, raw(consumer()), NOW - 1, NOW)
    good = stored(r)["A"]
    want: dict[str, int] = {}
    for i, (_, value, reason) in enumerate(HOSTILE):
        # each from its own key, so the flood limit stays out of the way
        r.ingest(f"hostile/{i}".encode(), value, NOW, NOW)
        want[reason] = want.get(reason, 0) + 1
    assert dict(r.dropped) == want
    assert dict(r.received) == {"consumer": 1}
    assert stored(r)["A"] == good


def test_barrage_on_the_same_key_and_group_never_poisons() -> None:
    """A good report for A survives bad ones from A's own key claiming A, and B is untouched."""
    r = reader()
    key_a, key_b = report_key("consumer", "A", "m1"), report_key("consumer", "B", "m9")
    r.ingest(key_a, raw(consumer("A", "m1")), NOW - 30, NOW - 30)
    r.ingest(key_b, raw(consumer("B", "m9")), NOW - 30, NOW - 30)
    before = stored(r)
    t = NOW - 20
    for _, value, _reason in HOSTILE:
        for key in (key_a, b"attacker"):
            t += FLOOD_WINDOW / FLOOD_PER_KEY * 1.5  # slow enough never to hit the flood limit
            r.ingest(key, value, t, t)
    # ... and same-group reports that are valid JSON but lie about other clusters or offsets
    for bad in (consumer("A", "m1", cluster="other"), consumer("B", "m9", sent_at=1.0),
                consumer("A", "m1", partitions=[{"topic": "orders", "partition": 0, "position": -1}])):
        r.ingest(key_a, raw(bad), t, t)
    after = stored(r, t)
    assert after == before
    assert r.dropped["flood"] == 0
    assert sum(r.dropped.values()) == 2 * len(HOSTILE) + 3
    assert dict(r.received) == {"consumer": 2}


def test_flood_from_one_key_is_limited_and_counted() -> None:
    r = reader()
    flood_key = report_key("consumer", "A", "m1")
    for i in range(500):
        t = NOW + i * 0.001
        r.ingest(flood_key, raw(consumer("A", "m1", sent_at=t)), t, t)
    assert r.received["consumer"] == FLOOD_PER_KEY
    assert r.dropped["flood"] == 500 - FLOOD_PER_KEY
    # other reporters are not affected by the flood ...
    r.ingest(report_key("consumer", "B", "m2"), raw(consumer("B", "m2", sent_at=NOW + 1)), NOW + 1, NOW + 1)
    assert stored(r, NOW + 1)["B"][0].member_id == "m2"
    # ... and the flooding key is heard again once its window has passed
    later = NOW + FLOOD_WINDOW + 5
    r.ingest(flood_key, raw(consumer("A", "m1", sent_at=later)), later, later)
    assert stored(r, later)["A"][0].sent_at == later


def test_replay_of_one_key_history_keeps_the_latest() -> None:
    """After a restart the compacted topic's uncompacted tail is read in one burst.

    A reporter that sent a report every 5 s for 15 minutes has 180 records under one key;
    reading them is not a flood (their own timestamps are 5 s apart) and the newest must win.
    """
    r = reader()
    key = report_key("consumer", "A", "m1")
    start = NOW - 900
    for i in range(180):
        ts = start + 5 * i
        r.ingest(key, raw(consumer("A", "m1", sent_at=ts)), ts, NOW)
    assert r.dropped["flood"] == 0
    assert stored(r)["A"][0].sent_at == start + 5 * 179


def test_many_distinct_keys_do_not_lock_out_new_reporters(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-key rate table is bounded, but idle keys leave it: churned members do not
    fill it for good (each restart of a consumer brings a new member id, hence a new key)."""
    monkeypatch.setattr(report_reader, "MAX_KEYS", 50)
    r = reader()
    for i in range(50):
        r.ingest(report_key("consumer", "old", f"m{i}"), raw(consumer("old", f"m{i}")), NOW, NOW)
    # while all 50 are active, a 51st key is refused (the bound holds) ...
    r.ingest(b"one-too-many", raw(consumer("X", "x")), NOW, NOW)
    assert r.dropped["flood"] == 1
    # ... a minute later they are idle, and a new consumer is heard
    later = NOW + 60
    r.ingest(report_key("consumer", "new", "n1"), raw(consumer("new", "n1", sent_at=later)), later, later)
    assert stored(r, later)["new"][0].member_id == "n1"
    assert r.dropped["flood"] == 1


def test_oversized_payload_is_not_parsed() -> None:
    """A 50 MB value is refused on its length alone (cheap), whatever it contains."""
    r = reader()
    r.ingest(b"k", b"{" * (50 * 1024 * 1024), NOW, NOW)
    assert dict(r.dropped) == {"oversized": 1}

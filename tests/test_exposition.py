"""/metrics without a broker: golden expositions and one record per scrape.

The golden files under tests/golden/ are the exact exposition of a hand-built
pair of clusters, plain and with ``--compat kafka_exporter``; a change to the
renderer shows as a diff to review. After an intended change, regenerate them
with ``.venv/bin/python -m tests.test_exposition`` and review ``git diff tests/golden``.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path
from types import MappingProxyType

import pytest

from exporter.contracts.snapshot import PartitionOffsets
from exporter.contracts.view import (
    ClusterView,
    GroupExposure,
    GroupProgress,
    GroupRebalances,
    GroupView,
    MemberView,
    PartitionProgress,
    PartitionView,
    SparkInfo,
)
from exporter.expose.metrics import CycleStage
from exporter.expose.render import render_cluster
from exporter.expose.scrape import scrape
from exporter.state.codec import DropReason
from exporter.store import ClusterRecord, SelfStats, StateStats, Store, frozen_counts, initial_record
from tests.support.exporter_proc import parse_metrics, value

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

GOLDEN = Path(__file__).resolve().parent / "golden"
SAMPLED_AT = 1_767_225_600.25  # 2026-01-01 00:00:00.25 UTC
NOW = SAMPLED_AT + 2.5
ODD = 'we"ird\\topic\nname'  # quote, backslash and newline: every escape of the text format


def _pv(topic: str, part: int, committed: int | None, lag: int | None, lag_s: float | None,
        status: str = "ok", position: int | None = None, stalled: float = 0.0) -> PartitionView:
    return PartitionView(topic=topic, partition=part, committed=committed, position=position,
                         lag_offsets=lag, lag_seconds=lag_s, stalled_seconds=stalled, status=status,
                         reason="" if status == "ok" else f"{topic}[{part}]: {status}", owner="")


def _mv(member_id: str, client_id: str, host: str, partitions: int, poll_age: float | None,
        **kw: object) -> MemberView:
    return MemberView(member_id=member_id, client_id=client_id, host=host, partitions=partitions,
                      last_poll_age=poll_age, **kw)


def _gv(group: str, type_: str, state: str, status: str, reasons: tuple[str, ...],
        members: tuple[MemberView, ...], partitions: tuple[PartitionView, ...], **kw: object) -> GroupView:
    return GroupView(group=group, type=type_, state=state, status=status, reasons=reasons,
                     members=members, partitions=partitions, **kw)


def _progress(consume: float, produce: float, eta: float | None, lost: int) -> GroupProgress:
    return GroupProgress(window_seconds=600.0, consume_rate=consume, produce_rate=produce,
                         catchup_seconds=eta, falling_behind=eta is None, records_lost_total=lost,
                         below_log_start=0, notes=(), partitions={})


def _rebalances(total: int, source: str) -> GroupRebalances:
    return GroupRebalances(total=total, recent=min(total, 2), window_seconds=600.0, storm=False,
                           source=source, notes=())


def hand_built_views() -> list[ClusterView]:
    """Every family and every kind of value: unknown offsets, floats, escapes, Spark, an
    empty group, a topic the group no longer subscribes to, a duplicate client id, streams
    and share groups with epochs, and a second cluster that was never sampled."""
    partitions = {
        ("orders", 0): PartitionOffsets(leader=1, replicas=3, isr=3, log_start=10, hw=1500, lso=1490,
                                        leo=1502),
        ("orders", 1): PartitionOffsets(leader=2, replicas=3, isr=2, log_start=0),  # HW unknown
        (ODD, 0): PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0, hw=7, lso=7, leo=7),
    }
    billing = _gv(
        "billing", "classic", "stable", "lagging", ("orders[0]: lagging",),
        (_mv("m-1", "billing-7", "/10.0.0.5", 1, 0.75),
         _mv("m-2", "billing-7", "/10.0.0.6", 1, 3.0),  # same client id: one series
         _mv("m-3", "", "/10.0.0.7", 0, None)),
        (_pv("orders", 0, 1200, 300, 12.345, "lagging", position=1250, stalled=4.5),
         _pv("orders", 1, 40, None, None),
         # a topic no member subscribes to any more: its rows, and left out of the group's lag
         dataclasses.replace(_pv(ODD, 0, 2, 5, 900.0), unsubscribed=True)),
        progress=_progress(consume=62.5, produce=12.5, eta=6.0, lost=40),
        rebalances=_rebalances(7, "membership"),
        exposure=GroupExposure(records=50, partitions={("orders", 0): 50}, commit_mode="auto",
                               auto_commit_interval=5.0))
    # stopped 3 records below the log start: deleted unread before lagwatch watched it
    below = PartitionProgress(consume_rate=0.0, produce_rate=0.0, catchup_seconds=None,
                              lost_total=0, below_log_start=3)
    odd_group = _gv(
        'gr"oup\\1', "consumer", "empty", "stopped", (f"{ODD}[0]: stopped",), (),
        (_pv(ODD, 0, 5, 2, 600.0, "stopped", stalled=61.0),),
        progress=dataclasses.replace(_progress(consume=0.0, produce=0.0, eta=None, lost=0),
                                     below_log_start=3, partitions={(ODD, 0): below}))
    spark = _gv(
        "spark-etl", "spark", "active", "ok", (), (_mv("run-1", "spark-driver", "", 1, None),),
        (_pv("orders", 0, 1500, 0, 0.0),),
        spark=SparkInfo(query_id="q-1", run_id="run-1", batch_id=42, batch_duration_seconds=1.5,
                        input_rows_per_second=1000.0, processed_rows_per_second=None,
                        last_progress_age=0.5, batch_running_seconds=None, active=True),
        exposure=GroupExposure(records=0, partitions={("orders", 0): 0}, commit_mode=None,
                               auto_commit_interval=None))
    idle = _gv("idle", "classic", "empty", "ok", (), (), ())
    streams = _gv(
        "wordcount-app", "streams", "stable", "ok", (),
        (_mv("s-1", "wordcount-app-1-StreamThread-1", "/10.0.0.8", 1, None, epoch=14,
             process_id="5b1e0c1e-proc"),),
        (_pv("orders", 0, 1500, 0, 0.0),), epoch=14, rebalances=_rebalances(0, "epoch"))
    share = _gv(
        "jobs-queue", "share", "stable", "stalled", ("orders[0]: stalled",),
        (_mv("q-1", "worker-1", "/10.0.0.9", 1, None, epoch=3),),
        (_pv("orders", 0, 900, 550, 30.0, "stalled", stalled=40.0),), epoch=3,
        progress=_progress(consume=0.0, produce=12.5, eta=None, lost=0))
    prod = ClusterView(cluster="prod-eu", up=True, sampled_at=SAMPLED_AT, sample_duration=0.125,
                       partitions=partitions,
                       groups={g.group: g for g in (billing, odd_group, spark, idle, streams, share)},
                       brokers=3, dropped_group_partitions=2)
    dr = ClusterView(cluster="dr", up=False, sampled_at=0.0, sample_duration=10.0, partitions={}, groups={},
                     last_error="metadata: timed out")
    return [prod, dr]


def hand_built_records(compat: frozenset[str]) -> list[ClusterRecord]:
    prod, dr = hand_built_views()
    stats = SelfStats(cycles=17, cycle_duration=0.25, requests=1234,
                      stages=MappingProxyType({CycleStage.SAMPLE: 0.125, CycleStage.RECORD_TIMESTAMPS: 0.0,
                                               CycleStage.STATE_RESTORE: 0.0, CycleStage.EVALUATION: 0.0625,
                                               CycleStage.RENDER: 0.0625}),
                      errors=frozen_counts({"metadata": 2, "worker_crash": 1}),
                      reports_received=frozen_counts({"consumer": 5}),
                      reports_dropped=frozen_counts({"wrong_type": 1}), groups_at_rest=7,
                      state=StateStats(writable=True, written=40, restored_groups=5,
                                       dropped=frozen_counts({r.value: int(r == DropReason.STALE)
                                                              for r in DropReason})))
    return [ClusterRecord(view=prod, stats=stats, exposition=render_cluster(prod, compat)),
            ClusterRecord(view=dr, stats=SelfStats(cycles=3, errors=frozen_counts({"metadata": 3})),
                          exposition=render_cluster(dr, compat))]


def exposition(compat: frozenset[str]) -> bytes:
    chunks, ctype = scrape(hand_built_records(compat), None, NOW)
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    return b"".join(chunks)


CASES = {"metrics-plain.prom": frozenset(), "metrics-kafka_exporter.prom": frozenset({"kafka_exporter"})}


def test_exposition_matches_the_golden_files() -> None:
    for name, compat in CASES.items():
        got = exposition(compat).decode()
        want = (GOLDEN / name).read_text()
        assert got == want, f"{name} differs; if intended, regenerate (see this module's docstring)"


# promtool's only findings are lint, not format errors: gauges named ..._sum. Ours is part of
# the metric contract (dashboards and alerts use it); kafka_exporter's two are reproduced by
# name on purpose. Anything else promtool reports fails the test.
KNOWN_LINT = {
    "kafka_consumergroup_lag_offsets_sum": "plain compat",
    "kafka_consumergroup_current_offset_sum": "compat",
    "kafka_consumergroup_lag_sum": "compat",
}


def test_promtool_accepts_the_golden_expositions() -> None:
    for name, compat in CASES.items():
        res = subprocess.run(["promtool", "check", "metrics"], input=(GOLDEN / name).read_bytes(),
                             capture_output=True, timeout=30)
        out = (res.stdout + res.stderr).decode()
        findings = {ln.split()[0]: ln for ln in out.splitlines() if ln.strip()}
        mode = "compat" if compat else "plain"
        want = {n for n, where in KNOWN_LINT.items() if mode in where.split()}
        assert set(findings) == want, (name, out)
        assert all('should not have "_sum" suffix' in ln for ln in findings.values()), (name, out)
        assert res.returncode == (3 if want else 0), (name, res.returncode, out)  # 3: lint only


def test_golden_files_hold_what_the_view_says() -> None:
    """The golden files are not just frozen output: spot-check them against the view."""
    m = parse_metrics((GOLDEN / "metrics-kafka_exporter.prom").read_text())
    assert value(m, "kafka_partition_log_end_offset", cluster="prod-eu", topic="orders",
                 partition="0") == 1502
    assert value(m, "kafka_partition_high_watermark_offset", topic="orders", partition="1") is None
    assert value(m, "kafka_partition_high_watermark_offset", topic=ODD, partition="0") == 7
    assert value(m, "kafka_consumergroup_lag_seconds", group="billing", topic="orders",
                 partition="0") == 12.345
    # the topic billing left: shown, marked, and not the group's lag (900 s there)
    assert value(m, "kafka_consumergroup_lag_seconds", group="billing", topic=ODD) == 900
    assert value(m, "kafka_consumergroup_topic_unsubscribed", group="billing", topic=ODD) == 1
    assert value(m, "kafka_consumergroup_topic_unsubscribed", group="billing", topic="orders") is None
    assert value(m, "kafka_consumergroup_max_lag_seconds", group="billing") == 12.345
    assert value(m, "kafka_consumergroup_status", group='gr"oup\\1', status="stopped") == 1
    assert value(m, "kafka_consumergroup_member_last_poll_age_seconds", group="billing",
                 client_id="billing-7") == 0.75
    assert value(m, "kafka_spark_query_batch_running_seconds", group="spark-etl") == 0
    assert value(m, "kafka_spark_query_processed_rows_per_second", group="spark-etl") is None
    assert value(m, "kafka_consumergroup_members", group="billing", consumergroup="billing") == 3
    assert value(m, "kafka_consumergroup_lag", consumergroup="billing", topic="orders", partition="0") == 300
    assert value(m, "kafka_consumergroup_catchup_seconds", group="billing") == 6
    assert value(m, "kafka_consumergroup_catchup_seconds", group="jobs-queue") is None
    assert value(m, "kafka_consumergroup_consumed_records_per_second", group="billing") == 62.5
    assert value(m, "kafka_consumergroup_produced_records_per_second", group="jobs-queue") == 12.5
    assert value(m, "kafka_consumergroup_records_lost_total", group="billing") == 40
    assert value(m, "kafka_consumergroup_records_lost_total", group="jobs-queue") == 0
    assert value(m, "kafka_consumergroup_records_lost_total", group="idle") is None  # no progress
    assert value(m, "kafka_consumergroup_records_lost_total", group='gr"oup\\1') == 0
    assert value(m, "kafka_consumergroup_records_below_log_start", group='gr"oup\\1', topic=ODD,
                 partition="0") == 3
    assert value(m, "kafka_consumergroup_group_records_below_log_start", group='gr"oup\\1') == 3
    # none below: the group's sum at 0, no per-partition series; no progress: nothing
    assert value(m, "kafka_consumergroup_group_records_below_log_start", group="billing") == 0
    assert value(m, "kafka_consumergroup_records_below_log_start", group="billing", topic="orders",
                 partition="0") is None
    assert value(m, "kafka_consumergroup_group_records_below_log_start", group="idle") is None
    assert value(m, "kafka_consumergroup_partition_redelivery_exposure_records", group="billing",
                 topic="orders", partition="0") == 50
    assert value(m, "kafka_consumergroup_redelivery_exposure_records", group="billing") == 50
    assert value(m, "kafka_consumergroup_redelivery_exposure_records", group="spark-etl") == 0
    assert value(m, "kafka_consumergroup_redelivery_exposure_records", group="idle") is None
    assert value(m, "lagwatch_data_age_seconds", cluster="prod-eu") == 2.5
    assert value(m, "lagwatch_data_age_seconds", cluster="dr") is None
    assert value(m, "lagwatch_errors_total", cluster="prod-eu", stage="worker_crash") == 1
    assert value(m, "lagwatch_errors_total", cluster="dr", stage="sample_exception") == 0


# -- one record per cluster per cycle -----------------------------------------------------

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def test_openmetrics_scrape_parses_and_keeps_counters_counters() -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    chunks, ctype = scrape(hand_built_records(frozenset()), OPENMETRICS, NOW)
    assert ctype.startswith("application/openmetrics-text")
    families = {f.name: f for f in text_string_to_metric_families(b"".join(chunks).decode())}
    lost = families["kafka_consumergroup_records_lost"]
    assert lost.type == "counter"
    assert {s.name for s in lost.samples} == {"kafka_consumergroup_records_lost_total"}
    assert sum(s.value for s in lost.samples) > 0
    assert families["kafka_consumergroup_lag_offsets"].type == "gauge"


def test_the_plain_text_format_names_a_counter_after_its_samples() -> None:
    text = b"".join(scrape(hand_built_records(frozenset()), None, NOW)[0]).decode()
    assert "# TYPE kafka_consumergroup_records_lost_total counter\n" in text


def _record(i: int) -> ClusterRecord:
    """Cycle i of cluster "c": the view, the statistics and the text all say i."""
    view = ClusterView(cluster="c", up=True, sampled_at=SAMPLED_AT + i, sample_duration=0.1,
                       partitions={("t", 0): PartitionOffsets(leader=1, replicas=1, isr=1, hw=i)},
                       groups={}, brokers=i)
    return ClusterRecord(view=view, stats=SelfStats(cycles=i, errors=frozen_counts({"cycle": i})),
                         exposition=render_cluster(view))


def _cycle_of(body: bytes) -> set[float]:
    m = parse_metrics(body.decode())
    return {value(m, "kafka_partition_high_watermark_offset", cluster="c"), value(m, "lagwatch_brokers"),
            value(m, "lagwatch_cycles_total"), value(m, "lagwatch_errors_total", stage="cycle")}


def test_a_scrape_serves_one_cycle_never_a_mix() -> None:
    store = Store([_record(0)])
    stop = threading.Event()
    mixed: list[set[float]] = []
    scrapes = [0]

    def scraper() -> None:
        while not stop.is_set():
            chunks, _ = scrape(store.records(), None, NOW)
            seen = _cycle_of(b"".join(chunks))
            scrapes[0] += 1
            if len(seen) != 1:
                mixed.append(seen)

    threads = [threading.Thread(target=scraper) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(1, 400):
            store.publish(_record(i))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not mixed, mixed[:5]
    assert scrapes[0] > 0
    assert _cycle_of(b"".join(scrape(store.records(), None, NOW)[0])) == {399}


def test_a_scrape_of_the_old_record_leaves_the_new_one_alone() -> None:
    old, new = _record(1), _record(2)
    store = Store([old])
    held = store.records()  # a scrape has read the old record ...
    store.publish(new)  # ... when the next cycle publishes
    body = b"".join(scrape(held, None, NOW)[0])
    assert _cycle_of(body) == {1}
    assert store.records() == [new]
    assert store.records()[0].exposition is new.exposition  # not evicted, not re-rendered
    # the scrape writes the record's own bytes: nothing is rendered at scrape time
    chunks = scrape(store.records(), None, NOW)[0]
    bodies = {id(f[2]) for f in new.exposition}
    assert any(id(c) in bodies for c in chunks)
    assert all(id(c) in bodies or isinstance(c, bytes) for c in chunks)
    assert new.exposition[1][2].readonly  # and nobody can change them


def test_a_cluster_not_sampled_yet_serves_headers_and_up_0() -> None:
    store = Store([initial_record("fresh")])
    m = parse_metrics(b"".join(scrape(store.records(), None, NOW)[0]).decode())
    assert value(m, "lagwatch_up", cluster="fresh") == 0
    assert value(m, "lagwatch_cycles_total", cluster="fresh") == 0
    assert not store.ready()


def regenerate() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name, compat in CASES.items():
        (GOLDEN / name).write_bytes(exposition(compat))
        print(f"wrote {GOLDEN / name}", file=sys.stderr)


if __name__ == "__main__":
    regenerate()

"""Memory at scale without a broker: deflated families, compact rate points, bounded /metrics.

- A family whose text outgrows PACK_ABOVE is held deflated and served inflated: the body
  of a scrape is byte for byte what it is with every family kept as text, and so is the
  body the HTTP server writes, with a Content-Length equal to it.
- The rate points of a group-partition live in one array of doubles and give the same
  points and rates as a list of tuples.
- ``metrics_detail: bounded`` serves every group's status and max lag, and its other
  series only where an alert reads them (exporter/expose/detail.py); ``full`` (the
  default) serves them all.
"""

from __future__ import annotations

import dataclasses
import random
import urllib.request

import pytest

from exporter.cli import load
from exporter.config import ConfigError, build_config
from exporter.contracts.snapshot import PartitionOffsets
from exporter.contracts.status import Status
from exporter.contracts.view import ClusterView, GroupProgress, GroupRebalances, GroupView, PartitionView
from exporter.evaluate.rates import Points, add_point, common_rates, rates
from exporter.expose import textformat
from exporter.expose.render import render_cluster
from exporter.expose.scrape import body_of, scrape
from exporter.expose.server import make_server, serve_in_thread
from exporter.expose.textformat import Packed
from exporter.store import ClusterRecord, SelfStats, Store
from tests.support.exporter_proc import parse_metrics

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

NOW = 1_767_225_600.0


def _group(gid: str, status: Status, parts: int, lag: int) -> GroupView:
    pvs = tuple(PartitionView(topic="orders", partition=p, committed=1000 + p, position=None,
                              lag_offsets=lag, lag_seconds=float(lag) / 10, stalled_seconds=0.0,
                              status=status, reason="" if status == Status.OK else f"orders[{p}]: {status}",
                              owner="") for p in range(parts))
    return GroupView(group=gid, type="classic", state="stable", status=status, reasons=(),
                     members=(), partitions=pvs)


def _view(groups: int, parts: int, not_ok_every: int = 0) -> ClusterView:
    gs = {}
    for g in range(groups):
        bad = not_ok_every and g % not_ok_every == 0
        gs[f"g{g:05d}"] = _group(f"g{g:05d}", Status.STOPPED if bad else Status.OK, parts, 7 if bad else 0)
    return ClusterView(cluster="big", up=True, sampled_at=NOW, sample_duration=0.1,
                       partitions={("orders", p): PartitionOffsets(leader=1, replicas=1, isr=1, hw=2000)
                                   for p in range(parts)},
                       groups=gs)


def _record(view: ClusterView, bounded: bool = False) -> ClusterRecord:
    return ClusterRecord(view=view, stats=SelfStats(cycles=1),
                         exposition=render_cluster(view, frozenset({"kafka_exporter"}), bounded))


def test_a_large_family_is_held_deflated_and_served_as_the_same_text(monkeypatch) -> None:
    view = _view(300, 50)  # 15,000 group-partitions: several families past PACK_ABOVE
    packed = _record(view)
    assert any(isinstance(body, Packed) for _n, _h, body in packed.exposition)
    held = sum(len(body.data) if isinstance(body, Packed) else len(body)
               for _n, _h, body in packed.exposition)
    served = body_of(scrape([packed], None, NOW)[0])
    assert held < len(served) / 5  # the labels repeat: deflate shrinks them many times
    monkeypatch.setattr(textformat, "PACK_ABOVE", 1 << 40)
    plain = _record(view)
    assert not any(isinstance(body, Packed) for _n, _h, body in plain.exposition)
    assert served == body_of(scrape([plain], None, NOW)[0])
    assert served.count(b"kafka_consumergroup_lag_offsets{") == 15_000


def test_the_server_writes_a_deflated_family_inflated_with_its_length() -> None:
    record = _record(_view(300, 50))
    want = body_of(scrape([record], None, NOW)[0])
    server = make_server(Store([record]), ("127.0.0.1", 0))
    serve_in_thread(server)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            body, length = r.read(), int(r.headers["Content-Length"])
    finally:
        server.shutdown()
        server.server_close()
    assert length == len(body)
    # the self-metrics are encoded at scrape time: the view families are byte for byte equal
    view_part = want[:want.index(b"# HELP lagwatch_")]
    assert body.startswith(view_part) and len(view_part) > 5_000_000


def _both(events: list[tuple[float, int, int]], window: float) -> tuple[list, Points]:
    as_list: list = []
    packed = Points()
    for p in events:
        add_point(as_list, p, window)
        add_point(packed, p, window)
    return as_list, packed


def test_points_in_an_array_keep_what_a_list_of_tuples_keeps() -> None:
    rnd = random.Random(26)
    t, c, h = NOW, 1000, 2000
    events = []
    for _ in range(500):
        t += rnd.choice((1.0, 5.0, 30.0))
        h += rnd.randrange(0, 50)
        c = rnd.randrange(0, 900) if rnd.random() < 0.02 else min(h, c + rnd.randrange(0, 60))
        events.append((t, c, h))
    as_list, packed = _both(events, 600)
    assert list(packed) == as_list and len(packed) == len(as_list) > 2
    assert rates(packed, 150) == rates(as_list, 150)
    other_list, other = _both([(t0, c0 // 2, h0) for t0, c0, h0 in events[100:]], 600)
    assert common_rates([packed, other], 150) == common_rates([as_list, other_list], 150)


def _lag_series(body: bytes) -> dict[str, int]:
    m = parse_metrics(body.decode())
    out: dict[str, int] = {}
    for name in ("kafka_consumergroup_lag_offsets", "kafka_consumergroup_lag",
                 "kafka_consumergroup_status", "kafka_consumergroup_lag_offsets_sum"):
        out[name] = sum(1 for (n, _labels) in m if n == name)
    return out


def test_bounded_mode_serves_partitions_only_of_groups_not_ok() -> None:
    view = _view(200, 10, not_ok_every=100)  # 2 of 200 groups stopped
    full = _lag_series(body_of(scrape([_record(view)], None, NOW)[0]))
    bounded_body = body_of(scrape([_record(view, bounded=True)], None, NOW)[0])
    bounded = _lag_series(bounded_body)
    assert full["kafka_consumergroup_lag_offsets"] == 2000 and full["kafka_consumergroup_lag"] == 2000
    assert bounded["kafka_consumergroup_lag_offsets"] == 20  # 2 groups x 10 partitions
    assert bounded["kafka_consumergroup_lag"] == 20  # kafka_exporter's name too
    # full: every status of every group; bounded: the status that is 1 of every group
    assert full["kafka_consumergroup_status"] == 200 * len(Status)
    assert bounded["kafka_consumergroup_status"] == 200
    assert full["kafka_consumergroup_lag_offsets_sum"] == 200
    assert bounded["kafka_consumergroup_lag_offsets_sum"] == 2  # the stopped groups'
    m = parse_metrics(bounded_body.decode())
    stopped = {dict(labels)["group"] for (n, labels) in m if n == "kafka_consumergroup_lag_offsets"}
    assert stopped == {"g00000", "g00100"}
    status = {(dict(labels)["group"], dict(labels)["status"]): v for (n, labels), v in m.items()
              if n == "kafka_consumergroup_status"}
    assert status[("g00100", "stopped")] == 1 and status[("g00001", "ok")] == 1
    assert set(status.values()) == {1}


def _progress(lost: int = 0, position: float | None = None) -> GroupProgress:
    return GroupProgress(window_seconds=600.0, consume_rate=1.0, produce_rate=1.0, catchup_seconds=None,
                         falling_behind=False, records_lost_total=lost, below_log_start=0, notes=(),
                         partitions={}, retained_position=position)


def _rebalances(recent: int) -> GroupRebalances:
    return GroupRebalances(total=3 + recent, recent=recent, window_seconds=600.0, storm=False,
                           source="epoch", notes=())


def test_bounded_mode_serves_each_group_what_its_alerts_read() -> None:
    """Every group: its status and max lag. The per-group families also for a group that
    rebalanced within the window (the storm alert) and Spark queries (their alerts find
    them by info{type="spark"}); the per-partition families too for a group not ok, one
    that lost records or nears the log start (the retention alerts), one holding offsets
    on a topic nobody subscribes to (the abandoned-topic alert)."""
    ok = _group("idle", Status.OK, 3, 2)
    groups = {
        "idle": dataclasses.replace(ok, progress=_progress(position=0.6), rebalances=_rebalances(0)),
        "stalled": _group("stalled", Status.STALLED, 3, 7),
        "rebalancing": dataclasses.replace(ok, group="rebalancing", rebalances=_rebalances(2)),
        "spark": dataclasses.replace(ok, group="spark", type="spark"),
        "lost": dataclasses.replace(ok, group="lost", progress=_progress(lost=5)),
        "near": dataclasses.replace(ok, group="near", progress=_progress(position=0.4)),
        "moved": dataclasses.replace(ok, group="moved", partitions=(
            dataclasses.replace(ok.partitions[0], unsubscribed=True), *ok.partitions[1:])),
    }
    view = dataclasses.replace(_view(0, 3), groups=groups)
    full = parse_metrics(body_of(scrape([_record(view)], None, NOW)[0]).decode())
    m = parse_metrics(body_of(scrape([_record(view, bounded=True)], None, NOW)[0]).decode())

    def served(samples: dict, name: str, label: str = "group") -> set[str]:
        return {dict(labels)[label] for (n, labels) in samples if n == name}

    every = set(groups)
    whole = {"stalled", "lost", "near", "moved"}
    per_group = whole | {"rebalancing", "spark"}
    assert served(m, "kafka_consumergroup_status") == every
    assert served(m, "kafka_consumergroup_max_lag_seconds") == every
    for name in ("kafka_consumergroup_info", "kafka_consumergroup_members",
                 "kafka_consumergroup_lag_offsets_sum"):
        assert served(m, name) == per_group, name
        assert served(full, name) == every, name
    assert served(m, "kafka_consumergroup_rebalances_total") == {"idle", "rebalancing"} & per_group
    assert served(m, "kafka_consumergroup_records_lost_total") == {"lost", "near"}
    assert served(m, "kafka_consumergroup_topic_unsubscribed") == {"moved"}
    for name in ("kafka_consumergroup_committed_offset", "kafka_consumergroup_lag_offsets",
                 "kafka_consumergroup_lag_seconds", "kafka_consumergroup_stalled_seconds"):
        assert served(m, name) == whole, name
        assert served(full, name) == every, name
    # kafka_exporter's name (--compat), which leaves Spark queries out
    assert served(m, "kafka_consumergroup_lag", "consumergroup") == whole
    assert served(full, "kafka_consumergroup_lag", "consumergroup") == every - {"spark"}


def test_metrics_detail_goes_through_the_configuration() -> None:
    cluster = {"clusters": [{"name": "c", "bootstrap_servers": "k:9092"}]}
    assert build_config(cluster, {}).metrics_detail == "full"
    assert build_config({**cluster, "metrics_detail": "bounded"}, {}).metrics_detail == "bounded"
    assert load(["--bootstrap-servers", "k:9092", "--metrics-detail", "bounded"]).metrics_detail == "bounded"
    with pytest.raises(ConfigError, match="metrics_detail"):
        build_config({**cluster, "metrics_detail": "some"}, {})
    with pytest.raises(ConfigError, match="--metrics-detail"):
        load(["--bootstrap-servers", "k:9092", "--metrics-detail", "some"])

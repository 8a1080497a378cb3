"""Thresholds per cluster and per group pattern (docs/configuration.md, "Thresholds per
cluster and per group"): parsed and layered by the configuration, applied by the real
Evaluator group by group (simulated clock), carried by recordings into their replay."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter import recording
from exporter.config import Thresholds, build_config, thresholds_for
from exporter.contracts.snapshot import GroupSample, Member, PartitionOffsets, Snapshot
from exporter.contracts.status import Status
from exporter.evaluate.evaluator import Evaluator

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0
RATE = 10  # records per second
STOP = 20.0  # every group's consumer commits its whole backlog each second until then
GROUPS = ("rt-orders", "batch-orders", "batchy-orders")


def _config(extra: dict) -> dict:
    return {"thresholds": {"stall_after": 10, "lag_seconds": 3600},
            "clusters": [{"name": "a", "bootstrap_servers": "k:9092", **extra}]}


def _snap(t: float) -> Snapshot:
    """Each group's one member owns its own topic's partition; all stop committing at STOP
    while records keep arriving."""
    committed = int(RATE * min(t, STOP))
    groups = {g: GroupSample(group_id=g, type="classic", state="stable", coordinator=1,
                             members=(Member(member_id=f"{g}-m", client_id="c", host="h",
                                             assignment=((g, 0),)),),
                             committed={(g, 0): committed})
              for g in GROUPS}
    hw = int(RATE * t)
    return Snapshot(cluster="a", taken_at=T0 + t, duration=0.01, groups=groups,
                    partitions={(g, 0): PartitionOffsets(leader=1, replicas=1, isr=1, log_start=0,
                                                         hw=hw, lso=hw, leo=hw) for g in GROUPS})


def _first_stalled(ev: Evaluator, until: float = 120) -> dict[str, float]:
    """Seconds after the last commit at which each group first reads `stalled`."""
    first: dict[str, float] = {}
    t = 0.0
    while t <= until:
        view = ev.evaluate(_snap(t))
        for g, gv in view.groups.items():
            if gv.status == Status.STALLED and g not in first:
                first[g] = t - STOP
            assert gv.status in (Status.OK, Status.STALLED), (t, g, gv.status, gv.reasons)
        t += 1
    return first


def test_a_group_matching_an_override_is_judged_by_its_own_stall_after() -> None:
    """stall_after 10 s for the cluster, 60 s for ``^batch-``: the same stop is `stalled`
    10 s after it in rt-orders and in batchy-orders (not matched: the pattern wants the
    dash), 60 s after it in batch-orders, and never before."""
    cfg = build_config(_config({"group_thresholds": [
        {"match": "^batch-", "thresholds": {"stall_after": 60}},
        {"match": "^batch", "thresholds": {"stall_after": 30}}]}), {})
    (cluster,) = cfg.clusters
    ev = Evaluator("a", cfg.cluster_thresholds(cluster), 1.0, group_thresholds=cluster.group_thresholds)
    first = _first_stalled(ev)
    # the rule counts from the first record left waiting (one cycle before the last commit
    # seen), and judges at whole cycles: within one cycle of the threshold
    assert 9 <= first["rt-orders"] <= 11, first
    assert 59 <= first["batch-orders"] <= 61, first  # the first match wins, not ^batch (30)
    assert 29 <= first["batchy-orders"] <= 31, first


def test_without_overrides_every_group_shares_the_cluster_thresholds() -> None:
    cfg = build_config(_config({}), {})
    (cluster,) = cfg.clusters
    ev = Evaluator("a", cfg.cluster_thresholds(cluster), 1.0, group_thresholds=cluster.group_thresholds)
    first = _first_stalled(ev)
    assert all(9 <= first[g] <= 11 for g in GROUPS), first


def test_cluster_thresholds_layer_over_the_top_level_and_cluster_overrides_come_first() -> None:
    cfg = build_config({
        "thresholds": {"stall_after": 10, "livelock_after": 20},
        "group_thresholds": [{"match": "^batch", "thresholds": {"stall_after": 600}}],
        "clusters": [
            {"name": "a", "bootstrap_servers": "k:9092", "thresholds": {"stall_after": 30},
             "group_thresholds": [{"match": "^batch-fast", "thresholds": {"livelock_after": 5}}]},
            {"name": "b", "bootstrap_servers": "k:9092"}]}, {})
    a, b = cfg.clusters
    assert cfg.cluster_thresholds(a) == Thresholds(stall_after=30, livelock_after=20)
    assert cfg.cluster_thresholds(b) == cfg.thresholds == Thresholds(stall_after=10, livelock_after=20)
    base = cfg.cluster_thresholds(a)
    # a's own override first: only livelock_after changes, over a's thresholds
    assert thresholds_for(base, a.group_thresholds, "batch-fast-1") == Thresholds(stall_after=30,
                                                                                  livelock_after=5)
    assert thresholds_for(base, a.group_thresholds, "batch-slow") == Thresholds(stall_after=600,
                                                                                livelock_after=20)
    assert thresholds_for(base, a.group_thresholds, "orders") is base
    assert thresholds_for(cfg.thresholds, b.group_thresholds, "batch-fast-1").stall_after == 600


def test_a_recording_replays_with_its_group_overrides(tmp_path) -> None:
    """The header carries the overrides: the replay judges batch-orders by its own 60 s."""
    cfg = build_config(_config({"group_thresholds": [
        {"match": "^batch-", "thresholds": {"stall_after": 60}}]}), {})
    (cluster,) = cfg.clusters
    path = tmp_path / "a.jsonl"
    w = recording.Writer(str(path), recording.header("a", cfg.cluster_thresholds(cluster), 1.0, 120,
                                                     500_000, cluster.group_thresholds))
    for t in range(0, 100):
        w.cycle(_snap(float(t)), {}, {}, {}, T0 + t)
    w.close()
    rec = recording.load(path)
    assert rec.group_thresholds == cluster.group_thresholds
    tl = recording.replay(rec)
    stop = tl.cycle_at(T0 + STOP)
    assert 9 <= tl.first("rt-orders", "stalled") - stop <= 11
    assert 59 <= tl.first("batch-orders", "stalled") - stop <= 61


def test_the_documented_example_parses_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/configuration.md's example file: its cluster's own thresholds and overrides."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```yaml")[1:]]
    (block,) = [b for b in blocks if "group_thresholds" in b]
    monkeypatch.setenv("LAGWATCH_KAFKA_PASSWORD", "x")
    cfg = build_config(yaml.safe_load(block), {})
    cluster, other = cfg.clusters
    assert cfg.cluster_thresholds(other) is cfg.thresholds and len(other.group_thresholds) == 1
    base = cfg.cluster_thresholds(cluster)
    assert base.stall_after == 120 and base.livelock_after == cfg.thresholds.livelock_after == 180
    assert thresholds_for(base, cluster.group_thresholds, "payments-eu").stall_after == 30
    assert thresholds_for(base, cluster.group_thresholds, "batch-nightly").stall_after == 1200
    assert thresholds_for(base, cluster.group_thresholds, "orders") is base

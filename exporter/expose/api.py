"""JSON documents of the /api/v1 endpoints, built from the evaluated views."""

from __future__ import annotations

import time
from typing import Any

from exporter.contracts.view import ClusterView, GroupExposure, GroupProgress, GroupRebalances, GroupView


def _round(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def cluster_doc(v: ClusterView, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    counts: dict[str, int] = {}
    for g in v.groups.values():
        counts[g.status] = counts.get(g.status, 0) + 1
    return {
        "cluster": v.cluster,
        "up": v.up,
        "sampled_at": v.sampled_at or None,
        "data_age_seconds": _round(now - v.sampled_at) if v.sampled_at else None,
        "sample_duration_seconds": _round(v.sample_duration),
        "brokers": v.brokers,
        "groups": len(v.groups),
        "groups_by_status": counts,
        "last_error": v.last_error or None,
    }


def group_summary(g: GroupView) -> dict[str, Any]:
    return {
        "group": g.group,
        "type": g.type,
        "state": g.state,
        "status": g.status,
        # The judgement's reasons, then the progress notes (time to catch up, records lost)
        # and the rebalance notes (a storm, a livelock's rebalances).
        "reasons": list(g.reasons) + list(g.notes),
        "members": len(g.members),
        "lag_offsets": g.total_lag,
        "max_lag_seconds": _round(g.max_lag_seconds),
        **progress_summary(g.progress),
        **rebalance_summary(g.rebalances),
        **exposure_summary(g.exposure),
    }


def rebalance_summary(rb: GroupRebalances | None) -> dict[str, Any]:
    """Rebalances of a group (null for Spark queries, which have none)."""
    return {
        "rebalances_total": rb.total if rb else None,
        "rebalances_recent": rb.recent if rb else None,
        "rebalance_window_seconds": _round(rb.window_seconds) if rb else None,
        "rebalance_storm": rb.storm if rb else False,
        "rebalances_source": rb.source if rb else None,
    }


def exposure_summary(ex: GroupExposure | None) -> dict[str, Any]:
    """Records fetched and not committed (what a crash now delivers again) and the commit
    mode the instrumented members report (null when unknown)."""
    return {
        "redelivery_exposure_records": ex.records if ex else None,
        "commit_mode": ex.commit_mode if ex else None,
        "auto_commit_interval_seconds": _round(ex.auto_commit_interval) if ex else None,
    }


def progress_summary(pr: GroupProgress | None) -> dict[str, Any]:
    """Rates, time to catch up and records lost of a group (null when not known yet)."""
    return {
        "consumed_records_per_second": _round(pr.consume_rate) if pr else None,
        "produced_records_per_second": _round(pr.produce_rate) if pr else None,
        "rate_window_seconds": _round(pr.window_seconds) if pr and pr.window_seconds else None,
        "catchup_seconds": _round(pr.catchup_seconds) if pr else None,
        "falling_behind": pr.falling_behind if pr else False,
        "records_lost_total": pr.records_lost_total if pr else 0,
        "records_below_log_start": pr.below_log_start if pr else 0,
    }


def group_doc(cluster: str, g: GroupView) -> dict[str, Any]:
    doc = group_summary(g)
    doc["cluster"] = cluster
    doc["members"] = [
        {"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
         "partitions": m.partitions, "last_poll_age_seconds": _round(m.last_poll_age),
         "member_epoch": m.epoch, "process_id": m.process_id or None,
         "commit_mode": m.commit_mode, "auto_commit_interval_seconds": _round(m.auto_commit_interval)}
        for m in g.members
    ]
    doc["group_epoch"] = g.epoch
    doc["membership"] = g.membership
    doc["partitions"] = [
        {"topic": p.topic, "partition": p.partition, "committed_offset": p.committed,
         "position_offset": p.position, "lag_offsets": p.lag_offsets,
         "lag_seconds": _round(p.lag_seconds), "stalled_seconds": _round(p.stalled_seconds),
         "status": p.status, "reason": p.explained or None, "owner": p.owner or None,
         "subscribed": not p.unsubscribed, **_partition_progress(g, p.topic, p.partition),
         "redelivery_exposure_records": g.exposure.partitions.get((p.topic, p.partition))
         if g.exposure else None}
        for p in g.partitions
    ]
    if g.spark is not None:
        s = g.spark
        doc["spark"] = {
            "query_id": s.query_id, "run_id": s.run_id, "batch_id": s.batch_id,
            "batch_duration_seconds": _round(s.batch_duration_seconds),
            "input_rows_per_second": _round(s.input_rows_per_second),
            "processed_rows_per_second": _round(s.processed_rows_per_second),
            "last_progress_age_seconds": _round(s.last_progress_age),
            "batch_running_seconds": _round(s.batch_running_seconds),
            "active": s.active, "connect": s.connect,
            "server_silent_seconds": _round(s.server_silent_seconds),
        }
    return doc


def _partition_progress(g: GroupView, topic: str, partition: int) -> dict[str, Any]:
    pp = g.progress.partitions.get((topic, partition)) if g.progress else None
    return {
        "consumed_records_per_second": _round(pp.consume_rate) if pp else None,
        "produced_records_per_second": _round(pp.produce_rate) if pp else None,
        "catchup_seconds": _round(pp.catchup_seconds) if pp else None,
        "records_lost_total": pp.lost_total if pp else 0,
        "records_below_log_start": pp.below_log_start if pp else 0,
    }


def partitions_doc(v: ClusterView) -> list[dict[str, Any]]:
    return [
        {"topic": t, "partition": p, "log_start_offset": po.log_start,
         "high_watermark_offset": po.hw, "last_stable_offset": po.lso,
         "log_end_offset": po.leo, "replicas": po.replicas, "in_sync_replicas": po.isr,
         "leader": po.leader}
        for (t, p), po in sorted(v.partitions.items())
    ]

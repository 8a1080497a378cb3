"""Render a cycle's families (``kafka_*``), one function per family group.

Nothing is kept in labelled gauge objects: every cycle renders the new
immutable :class:`ClusterView` of a cluster, so a deleted group or partition
simply is not in the next view and its series vanish.

The view families (partitions, groups, Spark queries, and kafka_exporter's
names with ``--compat``) are rendered once per cycle by the runner, into the
record it publishes (exporter/store.py); a scrape only writes those bytes
(exporter/expose/scrape.py). Unknown values are left out, never NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from exporter.contracts.view import STATUSES, ClusterView, GroupView, PartitionRows
from exporter.contracts.worker import PartitionBodies, PartitionLinesChunk
from exporter.expose.compat import kafka_exporter_lines
from exporter.expose.detail import Detail, detail_of
from exporter.expose.families import CycleFamilies, field_of
from exporter.expose.labels import group_label_text, group_labels, partition_labels
from exporter.expose.partition_lines import NAMES, Out, add_group
from exporter.expose.textformat import Packed, escape_label, finite

# One family of one cluster: (name, "# HELP/# TYPE" header, read-only sample lines, or
# the deflated lines of a large family: exporter/expose/textformat.py).
Family = tuple[str, bytes, bytes | memoryview | Packed]
# What a scrape writes: text, or a family to inflate as it is written (:func:`write_chunks`).
Chunk = bytes | memoryview | Packed
Exposition = tuple[Family, ...]

# Spark families: (field of CycleFamilies, attribute of SparkInfo).
_SPARK = (("spark_query_batch_duration_seconds", "batch_duration_seconds"),
          ("spark_query_input_rows_per_second", "input_rows_per_second"),
          ("spark_query_processed_rows_per_second", "processed_rows_per_second"),
          ("spark_query_last_progress_age_seconds", "last_progress_age"),
          ("spark_query_batch_running_seconds", "batch_running_seconds"))


def render_partitions(v: ClusterView, fam: CycleFamilies) -> None:
    """kafka_partition_*: broker-side offsets and replicas of every sampled partition."""
    ls, hw, lso, leo = (fam.partition_log_start_offset, fam.partition_high_watermark_offset,
                        fam.partition_last_stable_offset, fam.partition_log_end_offset)
    reps, isr = fam.partition_replicas, fam.partition_in_sync_replicas
    for _topic, lab, po in partition_labels(v):
        if po.log_start is not None:
            ls.add(lab, po.log_start)
        if po.hw is not None:
            hw.add(lab, po.hw)
        if po.lso is not None:
            lso.add(lab, po.lso)
        if po.leo is not None:
            leo.add(lab, po.leo)
        reps.add(lab, po.replicas)
        isr.add(lab, po.isr)


def render_groups(v: ClusterView, fam: CycleFamilies, compat: frozenset[str],
                  level: dict[str, Detail] | None = None) -> None:
    """kafka_consumergroup_*: each group's state, status and group-level series; with
    ``level`` (``metrics_detail: bounded``: exporter/expose/detail.py), only the status
    series that is 1, and of each group only what its level says. The per-partition
    families: :func:`render_partition_lines`, or the worker's."""
    info, members, status = fam.consumergroup_info, fam.consumergroup_members, fam.consumergroup_status
    max_lag, lag_sum = fam.consumergroup_max_lag_seconds, fam.consumergroup_lag_offsets_sum
    poll_age = fam.consumergroup_member_last_poll_age_seconds
    epoch = fam.consumergroup_epoch
    compat_ke = "kafka_exporter" in compat
    for g in v.groups.values():
        gl = group_labels(v, g.group)
        for st in STATUSES if level is None else (g.status,):  # bounded: the current one, 1
            status.add(f'{gl},status="{st}"', 1 if st == g.status else 0)
        mls = g.max_lag_seconds
        if finite(mls):
            max_lag.add(gl, mls)  # type: ignore[arg-type]
        lv = Detail.PARTITIONS if level is None else level[g.group]
        if lv == Detail.STATUS:
            continue
        info.add(f'{gl},state="{escape_label(g.state)}",type="{g.type}"', 1)
        if compat_ke:  # kafka_exporter's name for the same family: one series, both labels
            members.add(f'{gl},consumergroup="{escape_label(g.group)}"', len(g.members))
        else:
            members.add(gl, len(g.members))
        if g.epoch is not None and g.epoch >= 0:
            epoch.add(gl, g.epoch)
        total = g.total_lag
        if total is not None:
            lag_sum.add(gl, total)
        seen_clients: set[str] = set()
        for m in g.members:
            if m.last_poll_age is not None and m.client_id not in seen_clients:
                seen_clients.add(m.client_id)
                poll_age.add(f'{gl},client_id="{escape_label(m.client_id)}"', m.last_poll_age)


def _per_partition(fam: CycleFamilies) -> Out:
    a, b, c, d, e = (getattr(fam, field_of(name)) for name in NAMES)
    return a, b, c, d, e


def render_partition_lines(v: ClusterView, fam: CycleFamilies, bounded: bool) -> None:
    """The per-partition families alone, where no other process rendered them."""
    per_partition = _per_partition(fam)
    for g in v.groups.values():
        if detailed(g, bounded):
            group_lines(group_labels(v, g.group), g.partitions, per_partition)


def group_lines(gl: str, rows: PartitionRows, out: Out) -> None:
    """One group's per-partition series from its rows' columns, no PartitionView made."""
    add_group(gl, rows.tps, rows.committed.tolist(), rows.position.tolist(), rows.lag_offsets.tolist(),
              rows.lag_seconds.tolist(), rows.stalled_seconds.tolist(), out)


def detailed(g: GroupView, bounded: bool) -> bool:
    """Whether ``g``'s per-partition series are served (bounded mode: exporter/expose/detail.py)."""
    return not bounded or detail_of(g) == Detail.PARTITIONS


def chunk_of(cycle: int, cluster: str, views: Iterable[GroupView], bounded: bool) -> PartitionLinesChunk:
    """What the worker needs of these groups' lines: label texts and the rows' five
    columns, one array each for the whole chunk."""
    labels: list[str] = []
    sizes: list[int] = []
    rows: list[PartitionRows] = []
    for g in views:
        if detailed(g, bounded):
            labels.append(group_label_text(cluster, g.group))
            sizes.append(len(g.partitions.tps))
            rows.append(g.partitions)
    tps = [tp for r in rows for tp in r.tps]

    def joined(column: str) -> bytes:
        return np.concatenate([getattr(r, column) for r in rows]).tobytes() if rows else b""

    return PartitionLinesChunk(cycle, labels, sizes, tps, joined("committed"), joined("position"),
                               joined("lag_offsets"), joined("lag_seconds"), joined("stalled_seconds"))


def render_progress(v: ClusterView, fam: CycleFamilies, groups: Iterable[GroupView]) -> None:
    """Rates, time to catch up and records lost per group (exporter/evaluate/progress.py)."""
    consumed = fam.consumergroup_consumed_records_per_second
    produced = fam.consumergroup_produced_records_per_second
    eta, lost = fam.consumergroup_catchup_seconds, fam.consumergroup_records_lost_total
    for g in groups:
        pr = g.progress
        if pr is None:
            continue
        gl = group_labels(v, g.group)
        if finite(pr.consume_rate) and finite(pr.produce_rate):
            consumed.add(gl, pr.consume_rate)  # type: ignore[arg-type]
            produced.add(gl, pr.produce_rate)  # type: ignore[arg-type]
        if finite(pr.catchup_seconds):
            eta.add(gl, pr.catchup_seconds)  # type: ignore[arg-type]
        lost.add(gl, pr.records_lost_total)


def render_below_log_start(v: ClusterView, fam: CycleFamilies, groups: Iterable[GroupView],
                           detailed: Iterable[GroupView]) -> None:
    """Records below the log start now (exporter/evaluate/retention.py): the group's sum
    for every group in ``groups`` (0 when none), the partitions' own in ``detailed`` only
    where there are some, so a cluster of caught-up groups adds no per-partition series."""
    total = fam.consumergroup_group_records_below_log_start
    per_tp = fam.consumergroup_records_below_log_start
    for g in groups:
        if g.progress is not None:
            total.add(group_labels(v, g.group), g.progress.below_log_start)
    for g in detailed:
        pr = g.progress
        if pr is None or not pr.below_log_start:
            continue
        gl = group_labels(v, g.group)
        for (topic, partition), pp in pr.partitions.items():
            if pp.below_log_start:
                per_tp.add(f'{gl},topic="{escape_label(topic)}",partition="{partition}"',
                           pp.below_log_start)


def render_rebalances(v: ClusterView, fam: CycleFamilies, groups: Iterable[GroupView]) -> None:
    """kafka_consumergroup_rebalances_total per group (exporter/evaluate/rebalances.py)."""
    out = fam.consumergroup_rebalances_total
    for g in groups:
        if g.rebalances is not None:
            out.add(group_labels(v, g.group), g.rebalances.total)


def render_exposure(v: ClusterView, fam: CycleFamilies, groups: Iterable[GroupView]) -> None:
    """Records fetched and not committed, per partition and per group
    (exporter/evaluate/exposure.py); absent where unknown."""
    per_tp = fam.consumergroup_partition_redelivery_exposure_records
    total = fam.consumergroup_redelivery_exposure_records
    for g in groups:
        ex = g.exposure
        if ex is None or ex.records is None:
            continue
        gl = group_labels(v, g.group)
        total.add(gl, ex.records)
        for (topic, partition), n in ex.partitions.items():
            per_tp.add(f'{gl},topic="{escape_label(topic)}",partition="{partition}"', n)


def render_unsubscribed(v: ClusterView, fam: CycleFamilies, groups: Iterable[GroupView]) -> None:
    """kafka_consumergroup_topic_unsubscribed: one series per topic a group holds offsets on
    but no member subscribes to, so that alerts can tell an abandoned topic from a consumed
    one (its partitions' own series are served as for any other)."""
    out = fam.consumergroup_topic_unsubscribed
    for g in groups:
        for topic in g.partitions.unsubscribed_topics():
            out.add(f'{group_labels(v, g.group)},topic="{escape_label(topic)}"', 1)


def render_spark(v: ClusterView, fam: CycleFamilies, groups: Iterable[GroupView]) -> None:
    """kafka_spark_query_*: progress of the Spark queries shown as groups."""
    for g in groups:
        sp = g.spark
        if sp is None:
            continue
        gl = group_labels(v, g.group)
        for field, attr in _SPARK:
            val = getattr(sp, attr)
            if attr == "batch_running_seconds":
                val = val or 0.0  # no batch running
            if finite(val):
                getattr(fam, field).add(gl, val)


def render_cluster(v: ClusterView, compat: frozenset[str] = frozenset(), bounded: bool = False,
                   lines: Callable[[], PartitionBodies | None] | None = None) -> Exposition:
    """The view families of one cluster's view, encoded once, in the contract's order;
    ``bounded``: every group's status and max lag, the rest only of the groups
    exporter/expose/detail.py picks. ``lines``: where the per-partition families come
    from, called once the others are rendered (the worker's, rendered beside the
    evaluation: exporter/expose/partition_lines.py); None from it, or no ``lines``:
    rendered here."""
    fam = CycleFamilies.new()
    render_partitions(v, fam)
    groups = list(v.groups.values())
    level = {g.group: detail_of(g) for g in groups} if bounded else None
    render_groups(v, fam, compat, level)
    served = groups if level is None else [g for g in groups if level[g.group] >= Detail.GROUP]
    render_progress(v, fam, served)
    render_rebalances(v, fam, served)
    render_spark(v, fam, served)
    detailed = groups if level is None else [g for g in served if level[g.group] == Detail.PARTITIONS]
    render_exposure(v, fam, detailed)
    render_below_log_start(v, fam, served, detailed)
    render_unsubscribed(v, fam, detailed)
    bodies = lines() if lines is not None else None
    if bodies is None:
        render_partition_lines(v, fam, bounded)
    given = dict(zip(NAMES, bodies, strict=True)) if bodies is not None else {}
    out = fam.in_order()
    if "kafka_exporter" in compat:
        out.extend(kafka_exporter_lines(v, level))
    # A read-only view of each buffer, not a copy, or the deflated text of a large family:
    # the text of a large cluster is ~50 MB.
    return tuple((f.name, f.header().encode(), given[f.name] if f.name in given else f.body())
                 for f in out)

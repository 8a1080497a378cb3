"""Shared grafanalib building blocks for the lagwatch dashboards.

Everything that touches grafanalib's classes lives here, so the dashboard
modules read as a list of panels and PromQL. Conventions enforced by
tests/test_dashboards.py:

- every panel and target uses the ``${datasource}`` variable;
- only timeseries, stat, table and state-timeline panels;
- units on every panel (``s`` for seconds, ``short``/``none`` for offsets);
- missing data stays missing: no ``or vector(0)``, no connected nulls,
  stats show "No data", ratios filter zero denominators instead of
  producing NaN.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attr
from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from exporter.contracts.view import STATUSES

DS = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39  # Grafana 10.4/11 era; the panels below are written in that shape
TAGS = ["lagwatch", "kafka"]

# Label selectors shared by the queries.
C = 'cluster=~"$cluster"'
G = C + ', group=~"$group"'
T = G + ', topic=~"$topic"'
CT = C + ', topic=~"$topic"'

STATUS_COLORS = {
    "ok": "green",
    "lagging": "yellow",
    "rewind": "blue",
    "stalled": "orange",
    "livelocked": "red",
    "stopped": "purple",
    "error": "dark-red",
}
STUCK = ("livelocked", "stalled", "stopped")

GROUP_LABELS = "cluster, group"
PARTITION_LABELS = "cluster, group, topic, partition"


def per_group(metric: str, sel: str = G, labels: str = GROUP_LABELS) -> str:
    """`metric{sel}` reduced to its identifying labels.

    Drops job/instance and folds identical series from several exporter
    replicas scraping the same cluster, so nothing is duplicated or double-counted.
    """
    return f"max by ({labels}) ({metric}{{{sel}}})"


def per_partition(metric: str, sel: str = T) -> str:
    return per_group(metric, sel, PARTITION_LABELS)


# (expr, legendFormat) or (expr, legendFormat, instant)
QuerySpec = tuple


# --------------------------------------------------------------------------- targets


@attr.s
class PromTarget(g.Target):
    """A Prometheus target in the shape current Grafana saves (code editor, range/instant)."""

    def to_json_data(self):
        d = super().to_json_data()
        for legacy in ("query", "target", "metric", "step"):
            d.pop(legacy, None)
        d["range"] = not self.instant
        d["editorMode"] = "code"
        return d


def _targets(queries: Sequence[QuerySpec], instant: bool = False, fmt: str = "time_series") -> list:
    out = []
    for i, q in enumerate(queries):
        expr, legend = q[0], q[1]
        inst = q[2] if len(q) > 2 else instant
        out.append(PromTarget(expr=expr, legendFormat=legend, refId=chr(ord("A") + i), instant=inst,
                              format=fmt, datasource=DS, intervalFactor=1))
    return out


def steps(*pairs: tuple[str, float | None]) -> list[dict]:
    """Threshold steps; the first one is the base (value None)."""
    return [{"color": c, "value": v} for c, v in pairs]


def value_mappings(mapping: dict[int | str, tuple[str, str]]) -> list[dict]:
    """Grafana value mappings: {value: (text, color)}."""
    return [{
        "type": "value",
        "options": {str(k): {"text": text, "color": color, "index": i}
                    for i, (k, (text, color)) in enumerate(mapping.items())},
    }]


STATUS_MAPPINGS = value_mappings({i: (s, STATUS_COLORS.get(s, "red")) for i, s in enumerate(STATUSES)})


def status_code(sel: str) -> str:
    """One number per group: the index of its current status in exporter.contracts.view.STATUSES.

    kafka_consumergroup_status has one 0/1 series per status; a value mapping
    turns the index back into the status name and colour.
    """
    parts = [f'(kafka_consumergroup_status{{{sel}, status="{s}"}} == 1) * {i}'
             for i, s in enumerate(STATUSES)]
    return "max by (cluster, group) (\n  " + "\n  or ".join(parts) + "\n)"


def on_group_partitions(partition_expr: str, sel_t: str) -> str:
    """Restrict a per-partition expression (no group label) to the group's partitions, adding `group`.

    Both sides are aggregated to their identifying labels first, so extra
    target labels (job, instance) or two exporter replicas scraping the same
    cluster cannot make the one-to-many match fail.
    """
    return (f"max by (cluster, topic, partition) ({partition_expr})\n"
            f"  + on(cluster, topic, partition) group_right()\n"
            f"  (0 * {per_partition('kafka_consumergroup_committed_offset', sel_t)})")


# --------------------------------------------------------------------------- panels


def timeseries(title: str, description: str, queries: Sequence[QuerySpec], unit: str,
               axis_label: str = "", overrides: list | None = None,
               thresholds: list | None = None, draw: str = "line") -> g.TimeSeries:
    return g.TimeSeries(
        title=title, description=description, dataSource=DS, targets=_targets(queries),
        unit=unit, axisLabel=axis_label, overrides=overrides or [],
        thresholds=thresholds or steps(("green", None)),
        spanNulls=False, drawStyle=draw, showPoints="auto", lineWidth=1, fillOpacity=0,
        tooltipMode="multi", tooltipSort="desc", legendDisplayMode="list", legendPlacement="bottom",
        maxDataPoints=None,
    )


def stat(title: str, description: str, queries: Sequence[QuerySpec], unit: str,
         thresholds: list | None = None, mappings: list | None = None, text_mode: str = "auto",
         overrides: list | None = None, color_mode: str = "value") -> g.Stat:
    """A stat of the *current* value (instant queries): a series that vanished is not shown."""
    return g.Stat(
        title=title, description=description, dataSource=DS, targets=_targets(queries, instant=True),
        format=unit, thresholds=thresholds or steps(("green", None)), mappings=mappings or [],
        reduceCalc="lastNotNull", graphMode="none", textMode=text_mode, colorMode=color_mode,
        noValue="No data", overrides=overrides or [], orientation="auto", color={"mode": "thresholds"},
    )


def table(title: str, description: str, columns: Sequence[tuple[str, str]], unit: str,
          labels: Sequence[str], sort_by: str = "", overrides: list | None = None,
          hidden: Sequence[str] = (), numeric_labels: Sequence[str] = ()) -> g.Table:
    """Table of instant queries merged on their labels; `columns` is [(header, expr)].

    Each expr is aggregated to exactly `labels` (dropping __name__, job,
    instance and duplicates from exporter replicas), so Grafana's merge
    transformation puts one row per label set.
    """
    by = ", ".join(labels)
    targets = _targets([(f"max by ({by}) (\n  {expr}\n)", "") for _, expr in columns], instant=True,
                       fmt="table")
    rename = {f"Value #{t.refId}": header for t, (header, _) in zip(targets, columns, strict=True)}
    order = {name: i for i, name in enumerate([*labels, *rename])}
    exclude = {"Time": True, **{f"Value #{t.refId}": True for t, (h, _) in zip(targets, columns, strict=True)
                                if h in hidden}}
    transformations = [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": exclude, "indexByName": order,
                                       "renameByName": rename}},
    ]
    if numeric_labels:
        transformations.append({"id": "convertFieldType", "options": {
            "conversions": [{"targetField": f, "destinationType": "number"} for f in numeric_labels],
            "fields": {}}})
    return g.Table(
        title=title, description=description, dataSource=DS, targets=targets, unit=unit,
        transformations=transformations, overrides=overrides or [], filterable=True,
        thresholds=steps(("text", None)),
        sortBy=[g.TableSortByField(displayName=sort_by, desc=True)] if sort_by else [],
    )


def status_timeline(title: str, description: str, sel: str) -> g.StateTimeline:
    return g.StateTimeline(
        title=title, description=description, dataSource=DS,
        targets=_targets([(status_code(sel), "{{cluster}} / {{group}}")]),
        mappings=STATUS_MAPPINGS, thresholds=steps(("text", None)), mergeValues=True,
        showValue="auto", rowHeight=0.9, fillOpacity=80, tooltipMode="single", maxDataPoints=None,
    )


def unit_override(field: str, unit: str) -> dict:
    return {"matcher": {"id": "byName", "options": field}, "properties": [{"id": "unit", "value": unit}]}


def link_override(field: str, title: str, url: str) -> dict:
    return {"matcher": {"id": "byName", "options": field},
            "properties": [{"id": "links", "value": [{"title": title, "url": url}]}]}


# --------------------------------------------------------------------------- variables


@attr.s
class Variable(g.Template):
    """grafanalib's Template, with `current` set the way Grafana stores an 'All' selection."""

    def to_json_data(self):
        d = super().to_json_data()
        if self.type == "query":
            d["definition"] = self.query
        if self.includeAll:
            d["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
        else:
            d["current"] = {}
        return d


def datasource_variable() -> Variable:
    return Variable(name="datasource", label="Data source", query="prometheus", type="datasource",
                    regex="", refresh=g.REFRESH_ON_DASHBOARD_LOAD)


def query_variable(name: str, label: str, query: str, all_value: str | None = ".*") -> Variable:
    """A multi-select variable with All.

    With all_value ".*" the panels keep working while the variable has no
    values yet (e.g. no topic before a group's first commit).
    """
    return Variable(name=name, label=label, query=query, dataSource=DS, includeAll=True, multi=True,
                    allValue=all_value, refresh=g.REFRESH_ON_TIME_RANGE_CHANGE, regex="",
                    sort=g.SORT_ALPHA_IGNORE_CASE_ASC)


CLUSTER_VAR = 'label_values(lagwatch_up, cluster)'
# Group type (classic, consumer, streams, share, spark): narrows the group drop-down, and the
# overview's per-group panels join on it.
TYPE_VAR = 'label_values(kafka_consumergroup_info{cluster=~"$cluster"}, type)'
GROUP_VAR = 'label_values(kafka_consumergroup_info{cluster=~"$cluster", type=~"$type"}, group)'
TYPE = 'type=~"$type"'
SPARK_GROUP_VAR = 'label_values(kafka_consumergroup_info{cluster=~"$cluster", type="spark"}, group)'
# Partition series of a group exist once it has committed; until then "All" (.*) still works.
TOPIC_VAR = 'label_values(kafka_consumergroup_stalled_seconds{cluster=~"$cluster", group=~"$group"}, topic)'


# --------------------------------------------------------------------------- dashboard


Cell = tuple  # (panel, width, height)


def layout(rows: Sequence[Sequence[Cell]]) -> list:
    """Place rows of (panel, w, h) left to right, top to bottom; ids 1..n in reading order."""
    out = []
    y = 0
    pid = 1
    for row in rows:
        x = 0
        height = 0
        for panel, w, h in row:
            if x + w > 24:
                raise ValueError(f"row starting with {row[0][0].title!r} is wider than 24 columns")
            out.append(attr.evolve(panel, gridPos=g.GridPos(h=h, w=w, x=x, y=y), id=pid))
            pid += 1
            x += w
            height = max(height, h)
        y += height
    return out


def dashboard(uid: str, title: str, description: str, variables: list, rows: Sequence[Sequence[Cell]]
              ) -> g.Dashboard:
    return g.Dashboard(
        title=title, uid=uid, description=description, tags=list(TAGS),
        panels=layout(rows), templating=g.Templating(list=variables),
        schemaVersion=SCHEMA_VERSION, refresh="1m", time=g.Time("now-3h", "now"), timezone="browser",
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR, editable=True,
        links=[g.DashboardLink(type="dashboards", tags=["lagwatch"], asDropdown=True, includeVars=True,
                               keepTime=True, title="lagwatch dashboards")],
    )


def render(d: g.Dashboard) -> str:
    """Deterministic JSON text of a dashboard (sorted keys, trailing newline)."""
    return json.dumps(d.to_json_data(), cls=DashboardEncoder, sort_keys=True, indent=2) + "\n"


# --------------------------------------------------------------------------- shared lagwatch panels

GROUP_URL = ("/d/lagwatch-group/lagwatch-group?var-datasource=${datasource}"
             "&var-cluster=${__data.fields.cluster}&var-group=${__value.raw}&${__url_time_range}")


def partition_table(sel_t: str, committed_help: str, title: str = "Partition offsets") -> g.Table:
    """Per partition: the offsets side by side, oldest to newest, then lag and stalled time."""
    def part(metric: str) -> str:
        return on_group_partitions(f"{metric}{{{CT}}}", sel_t)

    columns = [
        ("log start", part("kafka_partition_log_start_offset")),
        ("committed", f"kafka_consumergroup_committed_offset{{{sel_t}}}"),
        ("position", f"kafka_consumergroup_position_offset{{{sel_t}}}"),
        ("LSO", part("kafka_partition_last_stable_offset")),
        ("HW", part("kafka_partition_high_watermark_offset")),
        ("LEO", part("kafka_partition_log_end_offset")),
        ("lag (offsets)", f"kafka_consumergroup_lag_offsets{{{sel_t}}}"),
        ("lag (s)", f"kafka_consumergroup_lag_seconds{{{sel_t}}}"),
        ("stalled (s)", f"kafka_consumergroup_stalled_seconds{{{sel_t}}}"),
    ]
    return table(
        title,
        "Current offsets of every partition the group has committed, from oldest to newest: "
        "log start (retention), committed (" + committed_help + "), position (next offset the "
        "consumer reads; only from instrumented consumers or the Spark listener), LSO (what "
        "read_committed consumers can read), HW (high watermark, what consumers can read) and LEO "
        "(leader's log end, includes records not yet replicated). lag = max(0, HW - committed). "
        "An empty cell means the value is unknown, not zero.",
        columns, "none", labels=("cluster", "group", "topic", "partition"), sort_by="lag (offsets)",
        numeric_labels=("partition",),
        overrides=[unit_override("lag (s)", "s"), unit_override("stalled (s)", "s")],
    )


def lag_offsets_panel(sel_t: str) -> g.TimeSeries:
    return timeseries(
        "Lag per partition (offsets)",
        "max(0, HW - committed) per partition. Offsets depend on throughput; read them together "
        "with the lag in seconds.",
        [(per_partition("kafka_consumergroup_lag_offsets", sel_t), "{{group}} {{topic}}[{{partition}}]")],
        "short", axis_label="offsets")


def lag_seconds_panel(sel_t: str) -> g.TimeSeries:
    return timeseries(
        "Lag per partition (seconds)",
        "Age of the oldest record the group has not consumed yet, per partition; 0 when caught up. "
        "Gaps mean the exporter could not tell (e.g. no timestamp for the record at the committed offset).",
        [(per_partition("kafka_consumergroup_lag_seconds", sel_t), "{{group}} {{topic}}[{{partition}}]")],
        "s", thresholds=steps(("green", None), ("red", 300)))


def stalled_panel(sel_t: str) -> g.TimeSeries:
    return timeseries(
        "Stalled time per partition",
        "How long the committed offset has not moved while the partition has lag; 0 otherwise. "
        "A line climbing steadily is a stuck consumer (stalled, livelocked or stopped).",
        [(per_partition("kafka_consumergroup_stalled_seconds", sel_t), "{{group}} {{topic}}[{{partition}}]")],
        "s")


def produce_consume_panel(sel_t: str, consumed: str = "consumed") -> g.TimeSeries:
    produced = on_group_partitions(f"deriv(kafka_partition_high_watermark_offset{{{CT}}}[$__rate_interval])",
                                   sel_t)
    return timeseries(
        "Produce vs consume rate",
        "Per topic of the group: records produced per second (slope of the high watermark over the "
        "group's partitions) against records " + consumed + " per second (slope of the committed "
        "offset). Consumption below production means lag is growing; a negative consume rate is a rewind.",
        [(f"sum by (cluster, group, topic) (\n  {produced}\n)", "produced {{group}} {{topic}}"),
         (f"sum by (cluster, group, topic) (\n  max by ({PARTITION_LABELS}) "
          f"(deriv(kafka_consumergroup_committed_offset{{{sel_t}}}[$__rate_interval]))\n)",
          consumed + " {{group}} {{topic}}")],
        "short", axis_label="records/s")


def lag_velocity_panel(sel_t: str) -> g.TimeSeries:
    return timeseries(
        "Lag velocity",
        "Slope of the lag in offsets per topic (deriv over the rate interval): above 0 the group is "
        "falling behind, below 0 it is catching up.",
        [(f"sum by (cluster, group, topic) (\n  max by ({PARTITION_LABELS}) "
          f"(deriv(kafka_consumergroup_lag_offsets{{{sel_t}}}[$__rate_interval]))\n)",
          "{{group}} {{topic}}")],
        "short", axis_label="offsets/s")


def retention_panel(sel_t: str) -> g.TimeSeries:
    return timeseries(
        "Retention headroom (committed - log start)",
        "Records between the log start offset and the committed offset, per partition. Near 0 the "
        "group is about to lose unread data to retention.",
        [(per_partition("kafka_consumergroup_committed_offset", sel_t) + "\n"
          f"  - on(cluster, topic, partition) group_left()\n"
          f"  max by (cluster, topic, partition) (kafka_partition_log_start_offset{{{CT}}})",
          "{{group}} {{topic}}[{{partition}}]")],
        "short", axis_label="offsets")


def status_stat(sel_g: str) -> g.Stat:
    return stat(
        "Status",
        "Current status of the group (worst of its partitions): ok, lagging, rewind, stalled, "
        "livelocked, stopped or error. The reasons (partition, numbers, owning member) are on "
        "lagwatch's status page and /api/v1.",
        [(status_code(sel_g), "{{group}}")], "none", mappings=STATUS_MAPPINGS,
        thresholds=steps(("text", None)))


STATUS_TIMELINE_HELP = (
    "Status of each group over time: ok, lagging, rewind, stalled, livelocked (alive but not "
    "polling), stopped (lag and nobody owns the partitions) or error (could not be read). "
    "The human-readable reasons are on lagwatch's status page and /api/v1."
)

"""Every PromQL query of the lagwatch dashboards, with Grafana's variables substituted.

The queries are read back from the generated dashboard JSON (the committed
``dashboards/*.json``, or dashboards passed in), so no panel or variable can be
missed. This module needs neither grafanalib nor Grafana.

    from dashboards.queries import all_queries
    for q in all_queries({"cluster": "local", "__rate_interval": "1m"}):
        run(q.expr, instant=q.instant)

Panel targets give the PromQL as written. Query variables
(``label_values(<selector>, <label>)``) give their selector as ``expr``, and
the label whose values fill the drop-down as ``label``. The datasource
variable has no PromQL and is not listed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dashboards import FILES

HERE = Path(__file__).resolve().parent

#: Values used for variables the caller does not give: every cluster/group/topic
#: (what "All" selects) and fixed intervals for Grafana's built-in ones.
DEFAULT_VALUES: dict[str, str] = {
    "cluster": ".*",
    "type": ".*",
    "group": ".*",
    "topic": ".*",
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "1h",
}

# Families that exist only after some event or with some setup: a query on them can
# legitimately return nothing in a healthy deployment.
_OPTIONAL_FAMILIES = {
    "lagwatch_errors_total": "only after a sampling error",
    "lagwatch_reports_dropped_total": "only after a report was rejected",
    "lagwatch_reports_received_total": "only once reports are read from the reports topic",
    "lagwatch_shards": "only with state.replicas",
    "lagwatch_shards_owned": "only with state.replicas",
    "lagwatch_state_records_dropped_total": "only after a state record was refused",
    "kafka_consumergroup_position_offset": "only from instrumented consumers or the Spark listener",
    "kafka_consumergroup_member_last_poll_age_seconds": "only from instrumented consumers",
    "kafka_consumergroup_catchup_seconds": "only while a group with a backlog consumes faster than "
                                           "it is produced to",
    "kafka_consumergroup_redelivery_exposure_records": "only from instrumented consumers or the "
                                                       "Spark listener",
}

_VAR_RE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)|\[\[(\w+)\]\]")
_LABEL_VALUES_RE = re.compile(r"^\s*label_values\((?P<selector>.+),\s*(?P<label>\w+)\s*\)\s*$", re.S)
_REGEX_META = set("$^*{}[]'+?.()|")


@dataclass(frozen=True)
class Query:
    dashboard: str  # dashboard uid
    kind: str  # "panel" or "variable"
    panel_id: int | None  # None for variables
    title: str  # panel title, or variable name
    ref: str  # target refId, or variable name
    raw: str  # as written in the dashboard, variables not substituted
    expr: str  # PromQL with the variables substituted
    instant: bool  # Grafana runs it as an instant query (stats, tables); else as a range query
    label: str | None = None  # variables: the label whose values fill the drop-down
    optional: str = ""  # why it may legitimately return no data; "" if it should return data


def _escape_value(v: str) -> str:
    """Escape one value of a multi-value selection the way Grafana's Prometheus datasource does.

    The result goes inside a double-quoted PromQL string used as a regex, so
    regex metacharacters get a backslash that is itself escaped for PromQL.
    """
    out = []
    for ch in v:
        if ch == "\\":
            out.append("\\\\\\\\")
        elif ch in _REGEX_META:
            out.append("\\\\" + ch)
        elif ch == '"':
            out.append('\\"')
        else:
            out.append(ch)
    return "".join(out)


def _format(value: str | Sequence[str]) -> str:
    if isinstance(value, str):
        return value  # inserted verbatim: the caller gives a regex (".*") or a plain name
    vals = [_escape_value(v) for v in value]
    if not vals:
        raise ValueError("a variable needs at least one value")
    return vals[0] if len(vals) == 1 else "(" + "|".join(vals) + ")"


def substitute(text: str, values: Mapping[str, str | Sequence[str]] | None = None) -> str:
    """Replace $var, ${var}, ${var:fmt} and [[var]] with values (DEFAULT_VALUES fill the gaps).

    A str value is inserted as is; a list of values is regex-escaped and joined
    as ``(a|b)``, as Grafana does for a multi-value selection. An unknown
    variable raises KeyError, so a query cannot silently keep a ``$``.
    """
    vals: dict[str, str | Sequence[str]] = {**DEFAULT_VALUES, **(values or {})}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3) or m.group(4)
        if name not in vals:
            raise KeyError(f"no value for Grafana variable ${name} in {text!r}")
        return _format(vals[name])

    return _VAR_RE.sub(repl, text)


def _optional(raw: str) -> str:
    reasons = [why for fam, why in _OPTIONAL_FAMILIES.items() if re.search(rf"\b{fam}\b", raw)]
    if 'status=~"' in raw:
        reasons.append("only while some group has one of the selected statuses")
    if 'type="spark"' in raw or "kafka_spark_query_" in raw:
        reasons.append("only with Spark queries reported by the lagwatch listener")
    return "; ".join(reasons)


def dashboard_queries(dash: Mapping, values: Mapping[str, str | Sequence[str]] | None = None) -> list[Query]:
    """All queries of one dashboard (a dict as in the JSON file), variables substituted. Pure."""
    uid = dash["uid"]
    out: list[Query] = []
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "datasource":
            continue
        if var.get("type") != "query":
            raise ValueError(f"{uid}: variable {var.get('name')!r} of unsupported type {var.get('type')!r}")
        q = var["query"]
        raw = q["query"] if isinstance(q, dict) else q
        m = _LABEL_VALUES_RE.match(raw)
        if not m:
            raise ValueError(f"{uid}: variable {var['name']!r}: expected label_values(selector, label), "
                             f"got {raw!r}")
        sel = m.group("selector").strip()
        out.append(Query(uid, "variable", None, var["name"], var["name"], raw, substitute(sel, values),
                         instant=False, label=m.group("label"), optional=_optional(sel)))
    for panel in _panels(dash.get("panels", [])):
        for t in panel.get("targets", []):
            if t.get("hide"):
                continue
            raw = t["expr"]
            out.append(Query(uid, "panel", panel["id"], panel.get("title", ""), t.get("refId", ""), raw,
                             substitute(raw, values), instant=bool(t.get("instant")) and not t.get("range"),
                             optional=_optional(raw)))
    return out


def _panels(panels: list) -> list:
    out = []
    for p in panels:
        out.append(p)
        out.extend(_panels(p.get("panels", [])))  # collapsed rows keep their panels inside
    return out


def load_dashboards(directory: Path | str | None = None) -> dict[str, dict]:
    """The generated dashboards, uid -> dict, read from ``directory`` (default: this package)."""
    d = Path(directory) if directory is not None else HERE
    out = {}
    for uid, name in FILES.items():
        dash = json.loads((d / name).read_text(encoding="utf-8"))
        if dash.get("uid") != uid:
            raise ValueError(f"{d / name}: uid {dash.get('uid')!r}, expected {uid!r}")
        out[uid] = dash
    return out


def all_queries(values: Mapping[str, str | Sequence[str]] | None = None,
                dashboards: Mapping[str, Mapping] | None = None) -> list[Query]:
    """Every panel and variable query of every dashboard, variables substituted.

    ``values`` maps variable names to values (see ``substitute``); missing ones
    come from DEFAULT_VALUES (every cluster/group/topic, 1m rate interval).
    ``dashboards`` defaults to the committed JSON files next to this module.
    """
    dashes = dashboards if dashboards is not None else load_dashboards()
    out: list[Query] = []
    for uid in sorted(dashes):
        out.extend(dashboard_queries(dashes[uid], values))
    return out

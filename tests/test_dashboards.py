"""The Grafana dashboards: committed JSON up to date, structurally sound, every query parses.

No Kafka and no Grafana needed: (a) regenerates and compares, (b) lints the
JSON the way grafana/dashboard-linter would for the rules we care about (and
proves each rule catches a broken copy), (c) writes every PromQL expression,
variables substituted, as recording rules and runs ``promtool check rules``.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards import FILES
from dashboards import generate as gen
from dashboards.queries import all_queries, dashboard_queries, load_dashboards, substitute
from exporter.contracts.view import STATUSES
from exporter.expose.metrics import FAMILIES

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

ROOT = Path(__file__).resolve().parent.parent
DASH_DIR = ROOT / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
ALLOWED_TYPES = {"timeseries", "stat", "table", "state-timeline"}
FAMILY_NAMES = {f.name for f in FAMILIES}
BUILTIN_VARS = {"__rate_interval", "__interval", "__range"}
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.fixture(scope="module")
def dashes() -> dict[str, dict]:
    return load_dashboards(DASH_DIR)


# --------------------------------------------------------------------------- (a) up to date


def test_committed_json_is_what_the_generator_writes() -> None:
    fresh = gen.rendered()
    assert sorted(fresh) == sorted(FILES.values())
    for name, text in fresh.items():
        committed = (DASH_DIR / name).read_text(encoding="utf-8")
        assert committed == text, f"dashboards/{name} is stale: run `make dashboards`"
        assert json.loads(text)["uid"] == next(u for u, n in FILES.items() if n == name)


def test_generation_is_deterministic() -> None:
    assert gen.rendered() == gen.rendered()


def test_check_flag_detects_a_stale_file(tmp_path: Path) -> None:
    for name in FILES.values():
        shutil.copy(DASH_DIR / name, tmp_path / name)
    assert gen.main(["--check", "--out", str(tmp_path)]) == 0
    victim = tmp_path / FILES["lagwatch-group"]
    victim.write_text(victim.read_text().replace("Partition offsets", "Partition offset"))
    assert gen.main(["--check", "--out", str(tmp_path)]) == 1
    (tmp_path / FILES["lagwatch-spark"]).unlink()
    assert gen.main(["--check", "--out", str(tmp_path)]) == 1
    # without --check it repairs the directory
    assert gen.main(["--out", str(tmp_path)]) == 0
    assert gen.main(["--check", "--out", str(tmp_path)]) == 0


def test_check_flag_from_the_command_line() -> None:
    r = subprocess.run([sys.executable, "-m", "dashboards.generate", "--check"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- (b) structure

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
             "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (no full parser; enough for our queries)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # label lists
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range and subquery selectors
    names = set()
    for m in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", s):
        tok = m.group(0)
        if tok.lower() in _KEYWORDS or re.match(r"\s*\(", s[m.end():]):
            continue  # keyword, or a function / aggregation call
        names.add(tok)
    return names


def test_metric_name_extraction() -> None:
    expr = ('sum by (cluster) (rate(foo_total{a="b", c=~"x|y"}[5m]))\n'
            '  / on(cluster) group_left(z) (bar > 0) and baz == 1e3')
    assert metric_names(expr) == {"foo_total", "bar", "baz"}
    assert metric_names("topk(10, up{x=\"{\"})") == {"up"}


def _panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def _overlaps(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def _var_refs(text: str) -> set[str]:
    return {a or b or c for a, b, c in re.findall(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", text)}


def problems(dash: dict) -> list[str]:
    """Everything wrong with a dashboard; [] for a good one."""
    out: list[str] = []
    uid = dash.get("uid")
    if uid not in FILES:
        out.append(f"uid {uid!r} is not one of the fixed uids")
    panels = _panels(dash)
    ids = [p.get("id") for p in panels]
    if len(set(ids)) != len(ids) or not all(isinstance(i, int) and i > 0 for i in ids):
        out.append(f"panel ids not unique positive ints: {ids}")

    variables = dash["templating"]["list"]
    names = [v["name"] for v in variables]
    defined = set(names) | BUILTIN_VARS

    for p in panels:
        where = f"panel {p.get('id')} {p.get('title')!r}"
        if p.get("type") not in ALLOWED_TYPES:
            out.append(f"{where}: panel type {p.get('type')!r} not allowed")
        if not p.get("title") or not p.get("description"):
            out.append(f"{where}: needs a title and a description")
        if p.get("datasource") != DS:
            out.append(f"{where}: datasource {p.get('datasource')!r} is not the $datasource variable")
        targets = p.get("targets") or []
        if not targets:
            out.append(f"{where}: no targets")
        for t in targets:
            if t.get("datasource") != DS:
                out.append(f"{where} target {t.get('refId')}: datasource is not the $datasource variable")
            expr = t.get("expr", "")
            if not expr.strip():
                out.append(f"{where} target {t.get('refId')}: empty expr")
            if re.search(r"\bvector\s*\(", expr) or re.search(r"\bor\s+on\b.*\b0\b", expr):
                out.append(f"{where}: fills missing data with a constant: {expr!r}")
            used = metric_names(expr)
            if not used:
                out.append(f"{where}: no metric found in {expr!r}")
            for m in sorted(used - FAMILY_NAMES):
                out.append(f"{where}: metric {m!r} is not in exporter.expose.metrics.FAMILIES")
            for v in sorted(_var_refs(expr) - defined):
                out.append(f"{where}: uses undefined variable ${v}")
            if "$cluster" not in expr:
                out.append(f"{where}: query ignores the cluster variable: {expr!r}")
            if p.get("type") == "table" and not (t.get("instant") and t.get("format") == "table"):
                out.append(f"{where}: table targets must be instant queries in table format")
        defaults = p.get("fieldConfig", {}).get("defaults", {})
        if p.get("type") in ("timeseries", "stat", "table") and not defaults.get("unit"):
            out.append(f"{where}: no unit")
        if p.get("type") == "timeseries" and defaults.get("custom", {}).get("spanNulls") is not False:
            out.append(f"{where}: spanNulls must be false (missing data stays missing)")
        if str(defaults.get("noValue", "")).strip() in ("0", "0.0"):
            out.append(f"{where}: shows missing data as 0")
        if "null as zero" in json.dumps(p):
            out.append(f"{where}: null as zero")
        gp = p.get("gridPos") or {}
        if not (isinstance(gp.get("x"), int) and isinstance(gp.get("y"), int) and gp.get("w", 0) >= 1
                and gp.get("h", 0) >= 1 and gp["x"] >= 0 and gp["y"] >= 0 and gp["x"] + gp["w"] <= 24):
            out.append(f"{where}: gridPos {gp} outside the 24-column grid")
    for i, a in enumerate(panels):
        for b in panels[i + 1:]:
            if a.get("gridPos") and b.get("gridPos") and _overlaps(a["gridPos"], b["gridPos"]):
                out.append(f"panels {a.get('id')} and {b.get('id')} overlap")

    # Variables: datasource -> cluster (lagwatch_up) -> [type ->] group (kafka_consumergroup_info)
    # [-> topic]; the Spark dashboard has no type (its groups are all spark).
    if (names[:2] != ["datasource", "cluster"] or names[2:] not in (
            ["group"], ["group", "topic"], ["type", "group"], ["type", "group", "topic"])):
        out.append(f"variables must be datasource, cluster, [type,] group[, topic]; got {names}")
        return out
    by_name = {v["name"]: v for v in variables}
    ds = by_name["datasource"]
    if ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        out.append("datasource variable must be of type datasource for prometheus")
    chain = {
        "cluster": (r"^label_values\(lagwatch_up\s*(\{\})?,\s*cluster\)$", set()),
        "type": (r"^label_values\(kafka_consumergroup_info\{.*\},\s*type\)$", {"cluster"}),
        "group": (r"^label_values\(kafka_consumergroup_info\{.*\},\s*group\)$", {"cluster"}),
        "topic": (r"^label_values\(kafka_consumergroup_\w+\{.*\},\s*topic\)$", {"cluster", "group"}),
    }
    for name, (pattern, needs) in chain.items():
        v = by_name.get(name)
        if v is None:
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") != "query" or not re.match(pattern, q or ""):
            out.append(f"variable {name}: query {q!r} does not match {pattern}")
        if v.get("datasource") != DS:
            out.append(f"variable {name}: datasource is not the $datasource variable")
        if not needs <= _var_refs(q or ""):
            out.append(f"variable {name}: not chained to {sorted(needs)}")
        if not (v.get("multi") and v.get("includeAll")):
            out.append(f"variable {name}: must be multi-select with All")
        selector = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", q or "")
        for m in sorted(metric_names(selector) - FAMILY_NAMES):
            out.append(f"variable {name}: metric {m!r} is not in exporter.expose.metrics.FAMILIES")
    return out


@pytest.mark.parametrize("uid", sorted(FILES))
def test_dashboard_structure(dashes: dict[str, dict], uid: str) -> None:
    assert problems(dashes[uid]) == []


def test_dashboard_contents(dashes: dict[str, dict]) -> None:
    types = {uid: {p["type"] for p in _panels(d)} for uid, d in dashes.items()}
    assert types["lagwatch-overview"] >= {"stat", "timeseries", "table"}
    assert types["lagwatch-group"] >= {"stat", "timeseries", "table", "state-timeline"}
    assert types["lagwatch-spark"] >= {"stat", "timeseries", "table", "state-timeline"}
    exprs = {uid: "\n".join(t["expr"] for p in _panels(d) for t in p["targets"]) for uid, d in dashes.items()}
    # the drill-downs show every offset of a partition side by side, and deriv-based rates
    for uid in ("lagwatch-group", "lagwatch-spark"):
        for fam in ("kafka_consumergroup_committed_offset", "kafka_consumergroup_position_offset",
                    "kafka_partition_high_watermark_offset", "kafka_partition_last_stable_offset",
                    "kafka_partition_log_end_offset", "kafka_partition_log_start_offset",
                    "kafka_consumergroup_lag_offsets", "kafka_consumergroup_lag_seconds",
                    "kafka_consumergroup_stalled_seconds", "kafka_consumergroup_status"):
            assert fam in exprs[uid], (uid, fam)
        assert "deriv(kafka_consumergroup_lag_offsets" in exprs[uid]
    assert all(f.name in exprs["lagwatch-spark"] for f in FAMILIES if f.name.startswith("kafka_spark_query_"))
    for fam in ("lagwatch_up", "lagwatch_sample_duration_seconds", "lagwatch_data_age_seconds",
                "lagwatch_errors_total", "kafka_consumergroup_max_lag_seconds"):
        assert fam in exprs["lagwatch-overview"], fam
    assert "topk(" in exprs["lagwatch-overview"]
    spark_group = next(v for v in dashes["lagwatch-spark"]["templating"]["list"] if v["name"] == "group")
    assert 'type="spark"' in spark_group["query"]
    # every status has a named, coloured value mapping in the status panels
    for d in dashes.values():
        for p in _panels(d):
            if "kafka_consumergroup_status" in json.dumps(p.get("targets")) and p["type"] == "state-timeline":
                opts = p["fieldConfig"]["defaults"]["mappings"][0]["options"]
                assert [opts[str(i)]["text"] for i in range(len(STATUSES))] == list(STATUSES)


def _break(dash: dict, how: str) -> dict:
    d = copy.deepcopy(dash)
    ps = d["panels"]
    if how == "graph":
        ps[0]["type"] = "graph"
    elif how == "datasource":
        ps[1]["datasource"] = {"type": "prometheus", "uid": "prom-1"}
    elif how == "target-datasource":
        ps[1]["targets"][0]["datasource"] = None
    elif how == "unit":
        ps[0]["fieldConfig"]["defaults"]["unit"] = ""
    elif how == "overlap":
        ps[1]["gridPos"] = dict(ps[0]["gridPos"])
    elif how == "width":
        ps[-1]["gridPos"]["x"] = 20
    elif how == "ids":
        ps[1]["id"] = ps[0]["id"]
    elif how == "metric":
        ps[0]["targets"][0]["expr"] = 'sum(kafka_consumergroup_lag{cluster=~"$cluster"})'
    elif how == "zero":
        ps[0]["targets"][0]["expr"] += " or vector(0)"
    elif how == "description":
        ps[0]["description"] = ""
    elif how == "variable-order":
        d["templating"]["list"].reverse()
    elif how == "variable-source":
        d["templating"]["list"][2]["query"] = \
            'label_values(kafka_consumergroup_lag_offsets{cluster=~"$cluster"}, group)'
    elif how == "variable-chain":
        d["templating"]["list"][2]["query"] = "label_values(kafka_consumergroup_info, group)"
    elif how == "undefined-variable":
        ps[0]["targets"][0]["expr"] = ps[0]["targets"][0]["expr"].replace("$cluster", "$cluster_name")
    return d


@pytest.mark.parametrize("how, expected", [
    ("graph", "not allowed"), ("datasource", "datasource"), ("target-datasource", "datasource"),
    ("unit", "no unit"), ("overlap", "overlap"), ("width", "24-column"), ("ids", "ids"),
    ("metric", "not in exporter.expose.metrics.FAMILIES"), ("zero", "constant"),
    ("description", "description"),
    ("variable-order", "variables must be"), ("variable-source", "does not match"),
    ("variable-chain", "not chained"), ("undefined-variable", "undefined variable"),
])
def test_structure_checks_catch_a_broken_dashboard(dashes: dict[str, dict], how: str, expected: str) -> None:
    found = problems(_break(dashes["lagwatch-group"], how))
    assert any(expected in p for p in found), found


# --------------------------------------------------------------------------- queries


def test_queries_cover_every_target_and_variable(dashes: dict[str, dict]) -> None:
    qs = all_queries()
    n_targets = sum(len(p["targets"]) for d in dashes.values() for p in _panels(d))
    n_vars = sum(1 for d in dashes.values() for v in d["templating"]["list"] if v["type"] == "query")
    assert len([q for q in qs if q.kind == "panel"]) == n_targets
    assert len([q for q in qs if q.kind == "variable"]) == n_vars
    for q in qs:
        assert "$" not in q.expr and "[[" not in q.expr, q
    assert {(q.title, q.label) for q in qs if q.kind == "variable"} == {
        ("cluster", "cluster"), ("type", "type"), ("group", "group"), ("topic", "topic")}
    stat_or_table = {(uid, p["id"]) for uid, d in dashes.items() for p in _panels(d)
                     if p["type"] in ("stat", "table")}
    for q in qs:
        if q.kind == "panel":
            assert q.instant == ((q.dashboard, q.panel_id) in stat_or_table), q


def test_substitution() -> None:
    assert substitute('x{c=~"$cluster", g=~"${group}", t=~"[[topic]]"}[$__rate_interval]',
                      {"cluster": "c1", "group": ["a.b", "c"], "topic": ["t"]}) == \
        'x{c=~"c1", g=~"(a\\\\.b|c)", t=~"t"}[1m]'
    assert substitute('x{c=~"${cluster:regex}"}') == 'x{c=~".*"}'
    with pytest.raises(KeyError):
        substitute('x{c=~"$nope"}')
    # a specific cluster/group narrows every query that has the variable
    one = dashboard_queries(load_dashboards(DASH_DIR)["lagwatch-group"], {"cluster": "c1", "group": ["g-1"]})
    assert all('cluster=~"c1"' in q.expr for q in one if q.title != "cluster")  # cluster var: lagwatch_up
    assert all('group=~"g-1"' in q.expr for q in one if q.title not in ("cluster", "type", "group"))
    # a type narrows the group drop-down and the overview's per-group panels
    over = dashboard_queries(load_dashboards(DASH_DIR)["lagwatch-overview"], {"type": ["share"]})
    assert 'type=~"share"' in next(q.expr for q in over if q.title == "group")
    assert {q.title for q in over if 'type=~"share"' in q.expr} >= {
        "Groups by status", "Groups by type", "Stuck groups: livelocked, stalled, stopped"}


# --------------------------------------------------------------------------- (c) promtool


def _promtool_check(exprs: list[str], tmp_path: Path) -> None:
    rules = {"groups": [{"name": "lagwatch-dashboard-queries", "rules": [
        {"record": f"lagwatch_dashboard:query_{i:03d}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-queries.rules.yml"
    path.write_text(json.dumps(rules, indent=1))  # JSON is YAML
    r = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    output = r.stdout + r.stderr
    assert r.returncode == 0, output
    m = re.search(r"SUCCESS: (\d+) rules found", output)
    assert m, output
    assert int(m.group(1)) == len(exprs), output


@pytest.mark.parametrize("values", [
    None,  # "All" everywhere
    {"cluster": "local", "group": ["orders.consumer", "payments"], "topic": ["orders"],
     "__rate_interval": "2m"},
], ids=["all", "specific"])
def test_every_query_parses_with_promtool(tmp_path: Path, values: dict | None) -> None:
    if not Path(PROMTOOL).exists():
        pytest.fail("promtool not found (Debian package prometheus)")
    exprs = [q.expr for q in all_queries(values)]
    assert len(exprs) > 50
    _promtool_check(exprs, tmp_path)


def test_promtool_check_rejects_a_broken_query(tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        _promtool_check(["sum by (cluster (lagwatch_up)"], tmp_path)

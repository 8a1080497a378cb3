"""Prometheus alert rules, their runbook and the Alertmanager example (alerts/).

Runs the real tools (Debian's promtool 2.42 and amtool 0.25, see
tools/install-system-packages) and checks the rules against the metric
contract in exporter.expose.metrics.FAMILIES. A real Alertmanager is in
tests/test_alertmanager_live.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.contracts.view import STATUSES
from exporter.expose.metrics import FAMILIES

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "alerts"
RULES = ALERTS / "lagwatch.rules.yml"
RUNBOOK = ALERTS / "runbook.md"
AM_CONFIG = ALERTS / "alertmanager.yml"
TEST_FILES = sorted((ALERTS / "tests").glob("*.yml"))
RUNBOOK_BASE = "https://github.com/lagwatch/lagwatch/blob/main/alerts/runbook.md"

FAMILY_LABELS = {f.name: set(f.labels) for f in FAMILIES}
TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series
GROUP_TYPES = {"classic", "consumer", "spark"}
SEVERITIES = {"critical", "warning", "info"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                   "unless", "bool", "offset"}


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: run tools/install-system-packages"
    return path


def run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


def load_rules(path: Path = RULES) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def alert_rules() -> list[dict[str, Any]]:
    return [r for r in load_rules() if "alert" in r]


# -- PromQL helpers (enough for our own rules, not a general parser) ------------

def strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def selectors(expr: str) -> list[tuple[str, dict[str, tuple[str, str]]]]:
    """(metric name, {label: (operator, value)}) of every `name{...}` selector."""
    out = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr):
        matchers = {lm.group(1): (lm.group(2), lm.group(3)) for lm in re.finditer(
            r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', m.group(2))}
        out.append((m.group(1), matchers))
    return out


def metric_names(expr: str) -> set[str]:
    e = strip_strings(expr)
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range durations
    # grouping clauses: `max by (a) (x)` becomes `max (x)`, a call
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word in PROMQL_KEYWORDS:
            continue  # a function or aggregation, or a keyword
        names.add(word)
    return names


def grouping_labels(expr: str) -> set[str]:
    labels = set()
    for m in re.finditer(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)",
                         strip_strings(expr)):
        labels |= {x.strip() for x in m.group(2).split(",") if x.strip()}
    return labels


def github_anchor(heading: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def runbook_anchors() -> set[str]:
    return {github_anchor(m.group(1))
            for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", RUNBOOK.read_text(), re.M)}


# -- the real tools ----------------------------------------------------------------

def test_promtool_check_rules() -> None:
    res = run(tool("promtool"), "check", "rules", str(RULES.relative_to(ROOT)))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    m = re.search(r"SUCCESS: (\d+) rules found", out)
    assert m, out
    assert int(m.group(1)) == len(load_rules()) >= 15
    assert "FAILED" not in out and "duplicate" not in out.lower(), out


def test_promtool_unit_tests_pass() -> None:
    assert len(TEST_FILES) >= 4
    res = run(tool("promtool"), "test", "rules", *(str(p.relative_to(ROOT)) for p in TEST_FILES))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "FAILED" not in out, out
    for p in TEST_FILES:  # every file was read and passed
        assert re.search(rf"Unit Testing:\s+{re.escape(str(p.relative_to(ROOT)))}\s+SUCCESS", out), out


@pytest.mark.parametrize("alert, before, after", [
    # a threshold the warning test sits on
    ("KafkaConsumerGroupLagHigh", "kafka_consumergroup_max_lag_seconds) > 600\n",
     "kafka_consumergroup_max_lag_seconds) > 800\n"),
    # dropping the short window keeps the critical alert firing after recovery
    ("KafkaConsumerGroupLagCritical",
     "max_over_time(kafka_consumergroup_max_lag_seconds[5m])) > 1800",
     "max_over_time(kafka_consumergroup_max_lag_seconds[1h])) > 1800"),
    # dropping the "unless ...stalled" clause makes lag growth fire for a stuck group
    ("KafkaConsumerGroupLagGrowing", 'status=~"stalled|livelocked|stopped|error"', 'status="none"'),
    # without the estimate, a group caught up within the window pages anyway
    ("KafkaConsumerGroupLagHigh", "kafka_consumergroup_catchup_seconds) < 600\n",
     "kafka_consumergroup_catchup_seconds) < 0\n"),
    ("KafkaConsumerGroupLagCritical", "kafka_consumergroup_catchup_seconds) < 300\n        labels:\n"
     "          severity: critical\n        annotations:\n          summary: Kafka consumer group has",
     "kafka_consumergroup_catchup_seconds) < 0\n        labels:\n"
     "          severity: critical\n        annotations:\n          summary: Kafka consumer group has"),
    # a gauge of what is below the log start now would fire long after, and miss a loss the
    # group moved past
    ("KafkaConsumerGroupRecordsLost", "(increase(kafka_consumergroup_records_lost_total[15m])) > 0",
     "(kafka_consumergroup_records_lost_total) > 0"),
    # without the gauge a loss older than lagwatch's first sample never fires
    ("KafkaConsumerGroupRecordsLost",
     "          or\n          max by (cluster, group) "
     "(kafka_consumergroup_group_records_below_log_start) > 0\n", "\n"),
    # the gauge without its threshold fires for every group, at 0
    ("KafkaConsumerGroupRecordsLost", "(kafka_consumergroup_group_records_below_log_start) > 0",
     "(kafka_consumergroup_group_records_below_log_start) >= 0"),
    # without the increase() clause an exporter restart (the counter back to 0) is a storm
    ("KafkaConsumerGroupRebalanceStorm",
     "            and increase(kafka_consumergroup_rebalances_total[10m]) > 5\n", ""),
    # without the sustained clause an autoscaler's or a rolling deploy's settled bursts
    # are a storm
    ("KafkaConsumerGroupRebalanceStorm",
     "              )[6m:1m]\n            ) > 0\n", "              )[6m:1m]\n            ) >= 0\n"),
    # without the "unless ...unsubscribed" clause a topic the group left pages
    ("KafkaConsumerGroupNearRetention",
     "          unless on (cluster, group, topic)\n"
     "          max by (cluster, group, topic) (kafka_consumergroup_topic_unsubscribed) == 1\n", ""),
    # without the lower bound the abandoned topic's alert fires forever once records are lost
    ("KafkaConsumerGroupAbandonedTopicNearRetention", ">= 0 < 0.1", "< 0.1"),
    # counting the replicas' shards per instance, no replica ever lacks any
    ("KafkaConsumerLagShardsUnowned", "- sum by (job, cluster) (lagwatch_shards_owned)",
     "- max by (job, cluster) (lagwatch_shards_owned)"),
    # the exporter-down alert must carry the cluster of the dead instance
    ("KafkaConsumerLagExporterDown", "max by (cluster, job, instance) (last_over_time",
     "max by (job, instance) (last_over_time"),
])
def test_promtool_unit_tests_catch_a_broken_rule(tmp_path: Path, alert: str, before: str,
                                                 after: str) -> None:
    """The unit tests are not vacuous: a plausible mistake in a rule makes them fail."""
    text = RULES.read_text()
    assert text.count(before) >= 1, before
    (tmp_path / "alerts" / "tests").mkdir(parents=True)
    (tmp_path / "alerts" / RULES.name).write_text(text.replace(before, after, 1))
    # only the files that test this alert: a failure naming it can only come from them
    mine = [p for p in TEST_FILES if f"alertname: {alert}\n" in p.read_text()]
    assert mine, alert
    for p in mine:
        shutil.copy(p, tmp_path / "alerts" / "tests" / p.name)
    files = [f"alerts/tests/{p.name}" for p in mine]
    res = run(tool("promtool"), "test", "rules", *files, cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert f"alertname: {alert}," in out, out


def test_amtool_check_config() -> None:
    res = run(tool("amtool"), "check-config", str(AM_CONFIG.relative_to(ROOT)))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "SUCCESS" in out, out
    assert re.search(r"- 2 inhibit rules", out), out


@pytest.mark.parametrize("labels, receiver", [
    (["alertname=KafkaConsumerGroupLivelocked", "severity=critical", "cluster=prod", "group=g"],
     "kafka-pager"),
    (["alertname=KafkaConsumerGroupLagHigh", "severity=warning", "cluster=prod", "group=g"],
     "kafka-tickets"),
    (["alertname=KafkaConsumerGroupRewind", "severity=info", "cluster=prod", "group=g"], "kafka-info"),
])
def test_alertmanager_routes_by_severity(labels: list[str], receiver: str) -> None:
    res = run(tool("amtool"), "config", "routes", "test", f"--config.file={AM_CONFIG}", *labels)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == receiver, res.stdout + res.stderr


# -- static checks of the rules ---------------------------------------------------

def test_every_alert_has_labels_and_annotations() -> None:
    alerts = alert_rules()
    names = [r["alert"] for r in alerts]
    assert len(names) == len(set(names)), "duplicate alert names"
    for r in alerts:
        name = r["alert"]
        assert re.fullmatch(r"KafkaConsumer(?:[A-Z][a-z0-9]+)+", name), name
        assert r["labels"]["severity"] in SEVERITIES, name
        ann = r["annotations"]
        assert set(ann) >= {"summary", "description", "runbook_url"}, name
        assert ann["summary"].endswith(".") and "{{" not in ann["summary"], name
        assert "{{" in ann["description"] and "$labels" in ann["description"], name
        assert ann["runbook_url"] == f"{RUNBOOK_BASE}#{name.lower()}", name


def test_expected_alerts_and_severities() -> None:
    sev = {r["alert"]: r["labels"]["severity"] for r in alert_rules()}
    assert sev["KafkaConsumerGroupLivelocked"] == "critical"
    assert sev["KafkaConsumerGroupLagCritical"] == "critical"
    assert sev["KafkaConsumerGroupLagHigh"] == "warning"
    assert sev["KafkaConsumerGroupLagGrowing"] == "warning"
    assert sev["KafkaConsumerGroupRewind"] == "info"
    assert sev["KafkaConsumerGroupRecordsLost"] == "critical"
    assert sev["KafkaConsumerGroupRebalanceStorm"] == "warning"  # a storm is a ticket, not a page
    # a topic the group left is a ticket, never a page
    assert sev["KafkaConsumerGroupAbandonedTopicNearRetention"] == "warning"
    for name in ("KafkaConsumerGroupStalled", "KafkaConsumerGroupStoppedWithLag",
                 "KafkaConsumerGroupNearRetention", "KafkaConsumerSparkQueryLagHigh",
                 "KafkaConsumerSparkQueryLivelocked",
                 "KafkaConsumerLagExporterDown", "KafkaConsumerLagClusterUnreachable",
                 "KafkaConsumerLagDataStale", "KafkaConsumerLagShardsUnowned"):
        assert name in sev, name
    exprs = {r["alert"]: r["expr"] for r in alert_rules()}
    crit = exprs["KafkaConsumerGroupLagCritical"]
    assert "avg_over_time(kafka_consumergroup_max_lag_seconds[1h])" in crit
    assert "max_over_time(kafka_consumergroup_max_lag_seconds[5m])" in crit
    assert "deriv(kafka_consumergroup_max_lag_seconds[15m])" in exprs["KafkaConsumerGroupLagGrowing"]
    assert 'absent(up{job="lagwatch"})' in exprs["KafkaConsumerLagExporterDown"]


def test_runbook_urls_point_at_runbook_headings() -> None:
    anchors = runbook_anchors()
    text = RUNBOOK.read_text()
    assert text.index("## Installing the rules") < text.index("## KafkaConsumer")
    assert RUNBOOK_BASE in text.split("## Installing the rules")[0]  # the intro says what to edit
    for r in alert_rules():
        url = r["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == RUNBOOK_BASE and anchor in anchors, (r["alert"], url)
        assert f"\n## {r['alert']}\n" in text, r["alert"]
    for link in re.findall(r"\]\(#([^)]+)\)", text):  # the runbook's own cross references
        assert link in anchors, link


def test_runbook_sections_say_how_to_confirm() -> None:
    sections = re.split(r"^## ", RUNBOOK.read_text(), flags=re.M)
    by_name = {s.split("\n", 1)[0].strip(): s for s in sections}
    for r in alert_rules():
        s = by_name[r["alert"]]
        for part in ("**Meaning.**", "**Confirm.**", "**Act.**"):
            assert part in s, (r["alert"], part)
        assert "```promql" in s or "PromQL" in s or "promql" in s, r["alert"]
    intro = by_name["Installing the rules"]
    assert "rule_files" in intro and "alertmanager.yml" in intro and 'job="lagwatch"' in intro
    assert "/api/v1/clusters/CLUSTER/groups/GROUP" in RUNBOOK.read_text()
    assert "kafka-consumer-groups" in RUNBOOK.read_text()


def test_promql_helpers() -> None:
    e = ('max by (cluster, group) (avg_over_time(x_seconds{a="b"}[1h])) > 0.1 '
         'and on (cluster) y unless z{s=~"p|q"} == 1 or absent(up{job="j"})')
    assert metric_names(e) == {"x_seconds", "y", "z", "up"}
    assert grouping_labels(e) == {"cluster", "group"}
    assert selectors(e)[1] == ("z", {"s": ("=~", "p|q")})
    assert github_anchor("KafkaConsumerGroupLagHigh") == "kafkaconsumergrouplaghigh"
    assert github_anchor("Installing the rules") == "installing-the-rules"


def test_exprs_use_only_the_metric_contract() -> None:
    for r in load_rules():
        expr = r["expr"]
        names = metric_names(expr)
        assert names, (r.get("alert"), expr)
        unknown = names - set(FAMILY_LABELS) - {"up"}
        assert not unknown, (r.get("alert"), unknown)
        # label names in matchers and in by/on clauses exist on the families used
        known = set().union(*(FAMILY_LABELS.get(n, set()) for n in names)) | TARGET_LABELS
        assert grouping_labels(expr) <= known, (r.get("alert"), grouping_labels(expr) - known)
        for name, matchers in selectors(expr):
            allowed = FAMILY_LABELS.get(name, set()) | TARGET_LABELS
            assert set(matchers) <= allowed, (r.get("alert"), name, matchers)
            if "status" in matchers:
                op, val = matchers["status"]
                assert set(val.split("|")) <= set(STATUSES), (r.get("alert"), val)
            if "type" in matchers:
                assert set(matchers["type"][1].split("|")) <= GROUP_TYPES, r.get("alert")


def test_keep_firing_for_and_for_are_durations() -> None:
    for r in alert_rules():
        for key in ("for", "keep_firing_for"):
            if key in r:
                assert re.fullmatch(r"\d+[smh]", str(r[key])), (r["alert"], key, r[key])
    assert sum("keep_firing_for" in r for r in alert_rules()) >= 5


def _alert_tests() -> list[tuple[Path, dict[str, Any], dict[str, Any]]]:
    out = []
    for p in TEST_FILES:
        doc = yaml.safe_load(p.read_text())
        assert doc["rule_files"] == ["../lagwatch.rules.yml"], p
        for group in doc["tests"]:
            assert "interval" in group, f"{p.name}: promtool 2.42 needs interval on every test group"
            for t in group.get("alert_rule_test", []):
                out.append((p, group, t))
    return out


def test_every_alert_has_a_firing_and_a_silent_test_case() -> None:
    names = {r["alert"] for r in alert_rules()}
    firing: set[str] = set()
    silent: set[str] = set()
    for p, _group, t in _alert_tests():
        name = t["alertname"]
        # a misspelt alertname would make `exp_alerts: []` pass vacuously
        assert name in names, f"{p.name}: unknown alertname {name}"
        if t.get("exp_alerts"):
            firing.add(name)
            for a in t["exp_alerts"]:
                assert a["exp_labels"].get("severity"), (p.name, name)
                assert set(a["exp_annotations"]) == {"summary", "description", "runbook_url"}, name
        else:
            silent.add(name)
    assert names - firing == set(), f"alerts without a firing test: {sorted(names - firing)}"
    assert names - silent == set(), f"alerts without a not-firing test: {sorted(names - silent)}"


def test_test_series_use_only_the_metric_contract() -> None:
    for p in TEST_FILES:
        for group in yaml.safe_load(p.read_text())["tests"]:
            for s in group["input_series"]:
                m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}", s["series"])
                assert m, s["series"]
                name = m.group(1)
                labels = set(re.findall(r'([a-zA-Z_]\w*)="', m.group(2)))
                assert name in FAMILY_LABELS or name == "up", (p.name, name)
                if name in FAMILY_LABELS:
                    # realistic series: every contract label present, plus job/instance
                    assert labels == FAMILY_LABELS[name] | TARGET_LABELS, (p.name, s["series"])

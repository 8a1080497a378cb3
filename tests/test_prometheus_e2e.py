"""End to end: a real Prometheus scrapes the real exporter while real consumers run.

Debian's Prometheus 2.42 (started here on loopback, scrape and evaluation
interval 1 s, job ``lagwatch``) scrapes one exporter process started with
``--compat kafka_exporter`` (interval 1 s, stall/livelock after 8 s) and loads
the shipped rule file unchanged, plus a test-only copy of the livelock rule
built from the real rule's expression with ``for: 0s``. Against the session
broker run a healthy consumer, a slow (lagging) one, an instrumented one that
wedges (livelocked), and a Spark Structured Streaming query simulated by
the reports its listener publishes (documented v1 format; no real Spark here,
tests/test_spark.py covers the listener itself).

Then, from Prometheus's HTTP API:

* every panel and variable query of every dashboard, with the variables set
  to All (``.*``) and to one specific cluster/group/topic, returns data with
  no NaN/Inf; queries documented as possibly empty (``Query.optional``) must
  return data too when this scenario provides what they need, else they must
  at least execute;
* the livelock alert is pending/firing for the livelocked group (the real rule
  pending, its ``for: 0s`` copy firing), every rule evaluates without error,
  and no alert was ever pending or firing for the healthy group, nor for a group
  that moved to a new topic while its old one keeps receiving records, nor for an
  assign()-mode client committing outside group membership (tests/test_membership.py);
* the two queries of Grafana dashboard 7589 return data, and kafka_exporter's
  ``kafka_consumergroup_lag`` equals lagwatch's ``kafka_consumergroup_lag_offsets``.

With ``--compat kafka_exporter`` the shared family ``kafka_consumergroup_members``
carries both ``group`` and ``consumergroup`` (test_compat_keeps_lagwatch_members_family).
"""

from __future__ import annotations

import contextlib
import copy
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition

from dashboards.queries import Query, dashboard_queries, load_dashboards
from devenv.kafka import KafkaCluster
from lagwatch_client.wire import (
    DEFAULT_REPORTS_TOPIC,
    VERSION,
    encode,
    ensure_reports_topic,
    report_key,
)
from tests.conftest import (
    ROOT_DIR,
    STALL_AFTER,
    commit_offsets,
    create_topic,
    exporter_config,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess
from tests.support.prometheus_proc import PrometheusProcess, PromQLError, finite, promtool
from tests.support.scenarios import Scenario, Workload, spawn
from tests.test_exporter_core import PollingConsumer
from tests.test_membership import CheckpointingClient, SteadyProducer

RULES = ROOT_DIR / "alerts" / "lagwatch.rules.yml"
LIVELOCK = "KafkaConsumerGroupLivelocked"
FAST_LABEL = ("e2e_copy", "for-0s")
SCRAPE = 1.0  # seconds; scrape and rule evaluation interval
RATE_INTERVAL = "4s"  # $__rate_interval: at least 4 scrape intervals, as Grafana computes it
CLUSTER = "test"  # the cluster name exporter_config() gives

# Known exporter bug (see test_compat_keeps_lagwatch_members_family): with --compat kafka_exporter,
# kafka_exporter's kafka_consumergroup_members{consumergroup} replaces lagwatch's own
# kafka_consumergroup_members{group} (same family name), so queries on it lose the group label.

# The two queries of Grafana dashboard 7589 (danielqsj/kafka_exporter's kafka_exporter_overview.json).
Q7589_LAG = 'sum(kafka_consumergroup_lag{instance="$instance",topic=~"$topic"}) by (consumergroup, topic)'
Q7589_RATE = "sum(delta(kafka_consumergroup_current_offset[5m])/5) by (consumergroup, topic)"


# -- a Spark query, simulated by its listener's reports ----------------------------------------

class SparkDriver(threading.Thread):
    """Publishes what lagwatch's Spark listener publishes for a running query, once per second.

    Every "batch" ends at the high watermark seen one tick earlier, so the
    query is slightly behind and keeps up, like a healthy micro-batch query.
    """

    def __init__(self, kafka: KafkaCluster, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = kafka.bootstrap_servers
        self.group, self.topic = group, topic
        self.query_id, self.run_id = str(uuid.uuid4()), str(uuid.uuid4())
        self.stop_flag = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def _report(self, event: str, batch: int, end: int, latest: int) -> dict[str, Any]:
        now = time.time()
        return {"v": VERSION, "kind": "spark", "cluster": CLUSTER, "group": self.group,
                "query_id": self.query_id, "run_id": self.run_id, "name": self.group,
                "sent_at": now, "event": event, "batch_id": batch,
                "batch_started": None if event == "terminated" else now, "last_progress": now,
                "batch_duration_ms": 180.0, "input_rows_per_second": 10.0,
                "processed_rows_per_second": 12.5, "interval": SCRAPE,
                "end_offsets": {self.topic: {"0": end}}, "latest_offsets": {self.topic: {"0": latest}}}

    def run(self) -> None:
        conf = {"bootstrap.servers": self.bootstrap}
        try:
            ensure_reports_topic(conf, DEFAULT_REPORTS_TOPIC)
            producer = Producer(conf)
            watermarks = Consumer({**conf, "group.id": f"{self.group}-watermarks"})  # never joins
            key = report_key("spark", self.group, self.query_id)
            batch, end = 0, 0
            try:
                while True:
                    _low, high = watermarks.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=5)
                    stopping = self.stop_flag.is_set()
                    report = self._report("terminated" if stopping else "progress", batch, end, high)
                    producer.produce(DEFAULT_REPORTS_TOPIC, key=key, value=encode(report))
                    producer.poll(0)
                    self.sent += 1
                    if stopping:
                        break
                    batch, end = batch + 1, high
                    self.stop_flag.wait(SCRAPE)
            finally:
                producer.flush(10)
                watermarks.close()
        except BaseException as e:  # noqa: BLE001 - reported by the test that needs the query
            self.error = e


# -- the stack -------------------------------------------------------------------------------

@dataclass
class Stack:
    prom: PrometheusProcess
    exporter: ExporterProcess
    sc: dict[str, Scenario]  # healthy, slow, livelocked, spark
    started: float  # when Prometheus started scraping
    instance: str  # the exporter's scrape target `instance` label
    models: dict[str, str]  # membership models (docs/statuses.md): role -> group id


def fast_livelock_rules() -> dict[str, Any]:
    """A test-only rule group: the real livelock rule, expression untouched, with ``for: 0s``."""
    real = yaml.safe_load(RULES.read_text())
    rule = next(r for g in real["groups"] for r in g["rules"] if r.get("alert") == LIVELOCK)
    fast = copy.deepcopy(rule)
    fast["for"] = "0s"
    fast["labels"] = {**fast.get("labels", {}), FAST_LABEL[0]: FAST_LABEL[1]}
    assert fast["expr"] == rule["expr"] and "livelocked" in fast["expr"]
    return {"groups": [{"name": "lagwatch-e2e-fast-livelock", "rules": [fast]}]}


def _stop_proc(p: subprocess.Popen | None) -> None:
    if p is None or p.poll() is not None:
        return
    p.terminate()
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


def _stop_exporter(exp: ExporterProcess) -> None:
    exp.stop()
    with contextlib.suppress(OSError):
        Path(exp.log.name).unlink()


def _stop_thread(t: threading.Thread, flag: threading.Event) -> None:
    flag.set()
    t.join(20)


@pytest.fixture(scope="module")
def stack(kafka: KafkaCluster) -> Iterator[Stack]:
    work = Path(tempfile.mkdtemp(prefix="lagwatch-prom-e2e-"))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, work, True)  # registered first: runs last
        rates = {"healthy": 20, "slow": 20, "livelocked": 10, "spark": 10}
        sc = {n: Scenario(n, unique(f"e2e-{n}"), create_topic(kafka, unique(f"e2e-{n}"), partitions=1), r)
              for n, r in rates.items()}

        cfg = exporter_config(work, kafka.bootstrap_servers, compat=["kafka_exporter"])
        exp = ExporterProcess(None, config=cfg)
        cleanup.callback(_stop_exporter, exp)
        exp.wait_ready()
        wait_for(lambda: "\nkafka_brokers{" in exp.get("/metrics")[1].decode(), 30,
                 "kafka_exporter's families on /metrics (--compat is on)")

        rules_dir = work / "rules"
        rules_dir.mkdir()
        real = Path(shutil.copy(RULES, rules_dir / RULES.name))
        fast = rules_dir / "e2e-fast-livelock.rules.yml"
        fast.write_text(yaml.safe_dump(fast_livelock_rules(), sort_keys=False))
        promtool("check", "rules", str(real), str(fast))
        target = f"127.0.0.1:{exp.port}"
        prom = PrometheusProcess(work / "prometheus", targets={"lagwatch": [target]},
                                 rule_files=[real, fast], scrape_interval=f"{SCRAPE:g}s",
                                 evaluation_interval=f"{SCRAPE:g}s")
        cleanup.callback(prom.stop)
        prom.wait_ready()
        started = time.time()

        work_thread = Workload(kafka, list(sc.values()))
        cleanup.callback(_stop_thread, work_thread, work_thread.stop_flag)
        work_thread.start()
        for s in sc.values():
            cleanup.callback(lambda s=s: _stop_proc(s.proc))
        spawn(kafka, sc["healthy"], "healthy")
        spawn(kafka, sc["slow"], "slow", "--delay", "0.25")
        spawn(kafka, sc["livelocked"], "blocked", "--after", "15", "--client-id", "e2e-wedged")
        spark = SparkDriver(kafka, sc["spark"].group, sc["spark"].topic)
        cleanup.callback(_stop_thread, spark, spark.stop_flag)
        spark.start()
        models = _membership_models(kafka, cleanup)

        def scraped() -> str | None:
            t = [t for t in prom.targets() if t["labels"].get("job") == "lagwatch"]
            return t[0]["labels"]["instance"] if t and t[0]["health"] == "up" else None
        instance = wait_for(scraped, 30, "Prometheus to scrape the exporter")
        assert instance == target

        def status(group: str, st: str) -> list:
            return prom.query(f'kafka_consumergroup_status{{group="{group}", status="{st}"}} == 1')
        for name, st in (("livelocked", "livelocked"), ("slow", "lagging"), ("healthy", "ok")):
            wait_for(lambda name=name, st=st: status(sc[name].group, st), 90,
                     f"Prometheus to see the {name} group {st}")
        wait_for(lambda: spark.error or prom.query(
            f'kafka_consumergroup_info{{group="{sc["spark"].group}", type="spark"}}'), 30,
            "Prometheus to see the Spark query")
        assert spark.error is None, spark.error
        yield Stack(prom, exp, sc, started, instance, models)


def _membership_models(kafka: KafkaCluster, cleanup: contextlib.ExitStack) -> dict[str, str]:
    """A healthy group that moved to a new topic while its old one keeps receiving records,
    and an assign()-mode client committing every 3 s (Flink's Kafka source), both steadily
    fed: healthy, so no alert may ever be pending for them."""
    old, new, moved = unique("e2e-orders-v1"), unique("e2e-orders-v2"), unique("e2e-moved")
    src, job = unique("e2e-flink-src"), unique("e2e-flink-job")
    for t in (old, new, src):
        create_topic(kafka, t, partitions=1)
    commit_offsets(kafka.bootstrap_servers, moved, old, {0: 0})
    for topic in (old, src):
        producer = SteadyProducer(kafka.bootstrap_servers, topic)
        cleanup.callback(producer.stop)
        producer.start()
    member = PollingConsumer(kafka.bootstrap_servers, moved, new, {0: 0})
    cleanup.callback(member.stop)
    member.start()
    client = CheckpointingClient(kafka.bootstrap_servers, job, src, every=3)
    cleanup.callback(client.stop)
    client.start()
    return {"moved": moved, "outside": job}


# -- (2) alerts ------------------------------------------------------------------------------

def _alerts_for(prom: PrometheusProcess, group: str) -> list[dict[str, Any]]:
    return [a for a in prom.alerts() if a["labels"].get("group") == group
            and a["state"] in ("pending", "firing")]


def test_livelock_alert_fires_and_healthy_group_raises_nothing(stack: Stack) -> None:
    prom, sc = stack.prom, stack.sc
    lv = sc["livelocked"].group

    def livelock_alerts() -> dict[str, str] | None:
        got = {a["labels"].get(FAST_LABEL[0], "real"): a["state"]
               for a in _alerts_for(prom, lv) if a["labels"]["alertname"] == LIVELOCK}
        return got if len(got) == 2 else None
    states = wait_for(livelock_alerts, 30, f"{LIVELOCK} pending/firing for {lv} in /api/v1/alerts")
    assert states[FAST_LABEL[1]] == "firing", states  # for: 0s: firing at its first true evaluation
    assert states["real"] in ("pending", "firing"), states  # the shipped rule (for: 2m)
    fired = next(a for a in _alerts_for(prom, lv) if a["labels"].get(FAST_LABEL[0]))
    assert fired["labels"]["cluster"] == CLUSTER and fired["labels"]["severity"] == "critical", fired
    assert f"Consumer group {lv} on cluster {CLUSTER} is livelocked" in fired["annotations"]["description"]

    # The healthy group has been watched for longer than every threshold by now.
    ready = sc["healthy"].event("READY")
    wait_for(lambda: time.time() > ready + STALL_AFTER + 4, STALL_AFTER + 30, "a long healthy run")
    assert _alerts_for(prom, sc["healthy"].group) == []
    # ALERTS keeps a sample for every evaluation an alert was pending or firing.
    now = time.time()
    groups = {**{name: sc[name].group for name in ("healthy", "spark")}, **stack.models}
    for name, group in groups.items():
        hist = prom.query_range(f'ALERTS{{group="{group}"}}', stack.started, now)
        assert hist == [], f"{name} group raised alerts: {[h['metric'] for h in hist]}"
    # ...while the group that moved still holds its old topic's offset, with lag
    moved_lag = _present(prom, f'kafka_consumergroup_lag_offsets{{group="{stack.models["moved"]}"}} > 0')
    left = _present(prom, f'kafka_consumergroup_topic_unsubscribed{{group="{stack.models["moved"]}"}}')
    assert moved_lag and [r["metric"]["topic"] for r in left] == [moved_lag[0]["metric"]["topic"]], left
    slow_ll = prom.query_range(f'ALERTS{{alertname="{LIVELOCK}", group="{sc["slow"].group}"}}',
                               stack.started, now)
    assert slow_ll == [], "a lagging (but consuming) group must not be called livelocked"
    # Every rule of the shipped file evaluates without error against real data.
    rules = prom.rules()
    shipped = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert len(rules) == len(shipped) + 1, [r["name"] for r in rules]
    bad = [(r["name"], r.get("lastError")) for r in rules if r.get("health") == "err" or r.get("lastError")]
    assert bad == [], bad


# -- (1) dashboards --------------------------------------------------------------------------

ALL = {"cluster": ".*", "type": ".*", "group": ".*", "topic": ".*"}


def _one(s: Scenario, type_: str = "classic") -> dict[str, list[str]]:
    """One specific cluster/type/group/topic, as Grafana formats a single selected value."""
    return {"cluster": [CLUSTER], "type": [type_], "group": [s.group], "topic": [s.topic]}


def _provided(reason: str, sel: str, q: Query) -> bool:
    """Does this scenario provide what an optional query needs, for this selection?"""
    if reason.startswith("only once reports are read"):
        return True  # the instrumented consumer and the Spark query report every second
    if reason.startswith("only from instrumented consumers"):
        return sel in ("all", "livelocked")  # the wedged consumer is instrumented
    if reason.startswith("only while some group has one of the selected statuses"):
        return sel in ("all", "livelocked") and re.search(r'status=~"[^"]*livelocked', q.raw) is not None
    if reason.startswith("only with Spark queries"):
        return sel in ("all", "spark")
    return False  # e.g. "only after a sampling error": nothing to expect


def _expects_data(q: Query, sel: str) -> bool:
    return all(_provided(r.strip(), sel, q) for r in q.optional.split(";")) if q.optional else True


def _bad_values(result: list[dict[str, Any]]) -> list[tuple[dict, str]]:
    out = []
    for s in result:
        for _t, v in s.get("values", [s["value"]] if "value" in s else []):
            if not finite(v):
                out.append((s["metric"], v))
    return out


def test_every_dashboard_query_returns_data(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    prom, sc = stack.prom, stack.sc
    consumer_sels = [("all", ALL), ("healthy", _one(sc["healthy"])), ("livelocked", _one(sc["livelocked"]))]
    selections = {"lagwatch-overview": consumer_sels, "lagwatch-group": consumer_sels,
                  "lagwatch-spark": [("all", ALL), ("spark", _one(sc["spark"], "spark"))]}
    dashes = load_dashboards()
    assert set(dashes) == set(selections)
    # What the variables must offer (the drop-downs are built from these queries).
    consumer_groups = {sc[n].group for n in ("healthy", "slow", "livelocked")}
    must_offer = {(uid, "cluster"): {CLUSTER} for uid in selections}
    must_offer |= {(uid, "type"): {"classic", "spark"} for uid in selections}
    must_offer |= {(uid, "group"): consumer_groups | {sc["spark"].group} for uid in selections}
    must_offer |= {(uid, "topic"): {s.topic for s in sc.values()} for uid in selections}
    must_offer[("lagwatch-spark", "group")] = {sc["spark"].group}
    failures: list[str] = []
    empty_ok: list[str] = []
    counted = 0
    deadline = time.monotonic() + 60  # shared budget for waiting on data that is still arriving

    def run(q: Query) -> list[Any]:
        now = time.time()
        if q.kind == "variable":
            assert q.label
            return prom.label_values(q.label, q.expr, stack.started, now)
        if q.instant:
            return prom.query(q.expr, at=now)
        return prom.query_range(q.expr, stack.started, now, step=SCRAPE)

    for uid, sels in selections.items():
        for sel, values in sels:
            span = f"{int(time.time() - stack.started) + 1}s"
            vals = {**values, "__rate_interval": RATE_INTERVAL, "__interval": f"{SCRAPE:g}s", "__range": span}
            for q in dashboard_queries(dashes[uid], vals):
                counted += 1
                where = f"{uid} [{sel}] {q.kind} {q.title!r} {q.ref}"
                expect = _expects_data(q, sel)
                try:
                    result = run(q)
                    if expect and not result and time.monotonic() < deadline:
                        result = wait_for(lambda q=q: run(q), max(1.0, deadline - time.monotonic()),
                                          f"data for {where}", interval=SCRAPE)
                except PromQLError as e:
                    failures.append(f"{where}: query error: {e}\n    {q.expr}")
                    continue
                except AssertionError:
                    result = []
                if not result:
                    if expect:
                        failures.append(f"{where}: no data\n    {q.expr}")
                    else:
                        empty_ok.append(f"{where}: empty ({q.optional})")
                    continue
                if q.kind == "variable":
                    label = q.label or ""
                    want = {values[label][0]} if sel != "all" else must_offer.get((uid, label), set())
                    missing = want - set(result)
                    if missing:
                        failures.append(f"{where}: drop-down lacks {sorted(missing)}; got {result}")
                    if uid == "lagwatch-spark" and label == "group" and set(result) & consumer_groups:
                        failures.append(f"{where}: Spark drop-down offers consumer groups {result}")
                    continue
                bad = _bad_values(result)
                if bad:
                    failures.append(f"{where}: NaN/Inf values {bad[:3]}\n    {q.expr}")
                outer = re.search(r"\bby \(([^)]*)\)", q.raw)  # the outermost aggregation comes first
                per_group = outer is not None and "group" in re.split(r"\s*,\s*", outer.group(1))
                if per_group and any("group" not in r["metric"] for r in result):
                    failures.append(
                        f"{where}: series without a group label\n    {q.expr}")
                if sel != "all":  # the selection really restricts what the panel shows
                    outside = [r["metric"] for r in result
                               if r["metric"].get("group", values["group"][0]) != values["group"][0]
                               or r["metric"].get("cluster", CLUSTER) != CLUSTER]
                    if outside:
                        failures.append(f"{where}: series outside the selection {outside[:3]}")
    with capsys.disabled():
        print(f"\n{counted} dashboard queries run; {len(empty_ok)} legitimately empty:")
        for line in empty_ok:
            print("  " + line)
    assert counted >= 150, counted
    assert not failures, "\n".join(failures)


# -- (3) kafka_exporter compatibility --------------------------------------------------------

def _present(prom: PrometheusProcess, expr: str, timeout: float = 10) -> list[dict[str, Any]]:
    """An instant query's result, asked again while it is empty (``[]`` if it stays so): a
    scrape that outlasts its 1 s timeout on a loaded machine marks every series of the
    target stale until the next one."""
    try:
        return wait_for(lambda: prom.query(expr), timeout, f"data for {expr}")
    except AssertionError:
        return []


def _by(result: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float]:
    out = {}
    for s in result:
        k = tuple(s["metric"].get(label, "") for label in labels)
        assert k not in out, f"duplicate series for {k}"
        out[k] = float(s["value"][1])
    return out


def test_kafka_exporter_compat_dashboard_7589_queries(stack: Stack) -> None:
    prom, sc = stack.prom, stack.sc
    groups = {sc[n].group: sc[n].topic for n in ("healthy", "slow", "livelocked")}
    lag_q = Q7589_LAG.replace("$instance", stack.instance).replace("$topic", ".*")
    assert "$" not in lag_q

    def panel(expr: str) -> dict[tuple[str, str], float] | None:
        # Grafana's graph panels run range queries; the last point is what the legend shows.
        res = prom.query_range(expr, stack.started, time.time(), step=SCRAPE)
        assert not _bad_values(res), _bad_values(res)
        got = {(s["metric"]["consumergroup"], s["metric"]["topic"]): float(s["values"][-1][1]) for s in res}
        return got if all((g, t) in got for g, t in groups.items()) else None

    lag = wait_for(lambda: panel(lag_q), 20, f"7589 lag panel data: {lag_q}")
    rate = wait_for(lambda: panel(Q7589_RATE), 20, f"7589 consume-rate panel data: {Q7589_RATE}")
    assert lag[(sc["slow"].group, sc["slow"].topic)] > 0, lag  # 20/s produced, 4/s consumed
    assert lag[(sc["livelocked"].group, sc["livelocked"].topic)] > 0, lag
    assert rate[(sc["healthy"].group, sc["healthy"].topic)] > 0, rate
    assert all(k[0] != sc["spark"].group for k in lag), "Spark queries have no kafka_exporter series"

    # Same scrape, same meaning: read both families at one instant, one whose scrape held
    # every group (a scrape that outlasts its 1 s timeout on a loaded machine marks every
    # series stale until the next one).
    sel = "|".join(groups)
    expected = {(g, tp, "0") for g, tp in groups.items()}

    def lag_at() -> tuple[float, dict[tuple[str, ...], float]] | None:
        at = time.time() - 2 * SCRAPE
        got = _by(prom.query(f'kafka_consumergroup_lag_offsets{{cluster="{CLUSTER}", group=~"{sel}"}}',
                             at=at), "group", "topic", "partition")
        return (at, got) if set(got) == expected else None
    try:
        t, ours = wait_for(lag_at, 20, "an instant whose scrape holds every group's lag")
    except AssertionError as e:  # a product fault or the machine's: the scrapes say which
        now = time.time()
        seen = {q: [v for r in prom.query_range(q, now - 60, now) for _t, v in r["values"]]
                for q in ('up{job="lagwatch"}', 'scrape_duration_seconds{job="lagwatch"}')}
        raise AssertionError(f"{e}; the last 60 s of {seen}") from None
    theirs = _by(prom.query(f'kafka_consumergroup_lag{{cluster="{CLUSTER}", consumergroup=~"{sel}"}}', at=t),
                 "consumergroup", "topic", "partition")
    assert theirs == ours
    # ... and kafka_exporter's definition: lag = partition current (HW) offset - group current offset.
    hw = _by(prom.query(f'kafka_topic_partition_current_offset{{cluster="{CLUSTER}"}}', at=t),
             "topic", "partition")
    committed = _by(prom.query(f'kafka_consumergroup_current_offset{{consumergroup=~"{sel}"}}', at=t),
                    "consumergroup", "topic", "partition")
    for (g, tp, p), v in theirs.items():
        assert v == hw[(tp, p)] - committed[(g, tp, p)], (g, tp, p, v, hw[(tp, p)], committed[(g, tp, p)])
    members = _by(prom.query(f'kafka_consumergroup_members{{consumergroup=~"{sel}"}}', at=t), "consumergroup")
    assert members == {(g,): 1.0 for g in groups}, members


def test_compat_keeps_lagwatch_members_family(stack: Stack) -> None:
    prom, sc = stack.prom, stack.sc
    for name in ("healthy", "livelocked", "spark"):
        got = _present(prom, f'kafka_consumergroup_members{{cluster="{CLUSTER}", group="{sc[name].group}"}}')
        assert [float(s["value"][1]) for s in got] == [1.0], (name, got)
    # ... while kafka_exporter's series stay (test_kafka_exporter_compat_dashboard_7589_queries).

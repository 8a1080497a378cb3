"""Shared fixtures: one real broker for the session, a 3-broker cluster on demand."""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from devenv.kafka import KafkaCluster
from devenv.kafka import commit_offsets as commit_offsets  # re-exported to the test modules
from tests.support.dists import PROJECTS, Dist, build
from tests.support.exporter_proc import ExporterProcess, parse_metrics
from tests.support.recorded import record_dir

ROOT_DIR = Path(__file__).resolve().parent.parent
KAFKA_VERSION = os.environ.get("LAGWATCH_TEST_KAFKA_VERSION", "4.4.0")

# Every JVM the tests start (brokers, Spark, Java clients, Kafka's tools) compiles with C1
# only: the suite's JVMs live seconds to minutes and do little, and C2's compiler threads
# took about half of a broker's CPU over its first 40 s (8.3 against 4.4 CPU seconds),
# on a machine whose two cores the suite keeps busy. The benchmarks keep the full JIT.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


# Waits are hang guards, not timing assertions (those count exporter cycles): each waits
# several times what it names, which costs nothing when the condition comes in time.
HANG_GUARD = 3


def wait_for(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``cond`` until it returns something truthy; fail naming ``what`` after
    ``HANG_GUARD`` times ``timeout`` seconds."""
    timeout *= HANG_GUARD
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 - reported if the deadline passes
            last = e
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


BROKER_FIXTURES = frozenset({"kafka", "kafka3", "exporter"})

# The files that take 35 s or more in `make test`, longest first (from its --durations=0,
# per file, on an idle 2-core machine). `make test` gives each xdist worker a whole file at a
# time, the next one in collection order when it is done (--dist loadfile
# --no-loadscope-reorder; xdist's own order, by number of tests, runs these few-test files
# last, where one alone makes the tail): so they start first, then the files that need the
# container image (its build, begun at collection, has had the long files' time), and the
# many short files fill in around them to the end.
LONG_FILES = (
    "test_spark.py", "test_group_types.py", "test_faults.py", "test_spark_connect.py",
    "test_rebalances_live.py", "test_membership.py", "test_oauth.py", "test_exporter_core.py",
    "test_state_restart.py", "test_jvm_interceptor.py", "test_records_lost.py", "test_worker.py",
    "test_evaluator_simulated.py", "test_catchup.py", "test_replicas.py", "test_rest.py",
    "test_security.py", "test_columns.py", "test_partition_lines.py", "test_hostile_names.py",
    "test_release.py", "test_demo.py", "test_scenarios.py",
)


def _run_order(item: pytest.Item) -> tuple[int, int]:
    name = item.path.name
    if name in LONG_FILES:
        return 0, LONG_FILES.index(name)
    return (1 if item.get_closest_marker("image") is not None else 2), 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test-unit` must stay broker-free and fast: a unit test asking for a broker is
    a mistake in the test, reported at collection. The LONG_FILES run first, longest first;
    then the tests that need the container image, so that its build (started in the
    background once collected) overlaps the long files; then the rest in collection order.

    `make test` runs four pytest-xdist workers on two cores with ``--dist loadfile``
    (most tests wait on thresholds, brokers and JVMs, not on the CPU): each
    file stays on one worker with its module-scoped workload and its own broker, and
    every test of the 3-broker cluster is in tests/test_faults.py."""
    for item in items:
        if item.get_closest_marker("unit") and BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            raise pytest.UsageError(f"{item.nodeid} is marked unit but uses a broker fixture")
    items.sort(key=_run_order)  # stable


def pytest_collection_finish(session: pytest.Session) -> None:
    # Under xdist every worker collects everything: the first one builds.
    first = os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    if (first and not session.config.option.collectonly
            and any(i.get_closest_marker("image") for i in session.items)):
        from tests.support.image_build import prebuild

        prebuild()


def exporter_cycles(exp: ExporterProcess) -> int:
    """lagwatch_cycles_total over every cluster the exporter watches."""
    code, body, _ = exp.get("/metrics")
    assert code == 200, body
    return int(sum(v for (name, _lab), v in parse_metrics(body.decode()).items()
                   if name == "lagwatch_cycles_total"))


def cycles_until(exp: ExporterProcess, cond: Callable[[], Any], timeout: float, what: str) -> int:
    """Exporter cycles from now until ``cond`` holds (``timeout`` seconds as a hang guard).
    A lower bound: counted to the cycle after the last poll that did not see it, so a test
    process starved on a busy machine can only make it smaller."""
    start = last = exporter_cycles(exp)

    def check() -> bool:
        nonlocal last
        n = exporter_cycles(exp)
        if cond():
            return True
        last = n
        return False

    wait_for(check, timeout, what)
    return last + 1 - start


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(brokers_count=1, version=KAFKA_VERSION)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka3() -> Iterator[KafkaCluster]:
    """Three brokers; created only when a test asks for it. Its stop is checked too: no
    broker left running, its directory gone (tests/test_harness.py checks the start)."""
    cluster = KafkaCluster(brokers_count=3, version=KAFKA_VERSION)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
    assert not any(b.alive() for b in cluster.brokers), "a broker outlived the cluster's stop"
    assert cluster.root is not None and not cluster.root.exists(), "the cluster's directory is left"


def admin_for(cluster: KafkaCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def groups_on_two_brokers(cluster: KafkaCluster, topic: str, prefix: str, committed: int,
                          tries: int = 60) -> tuple[int, str, int, str]:
    """(broker, a group it coordinates, another broker, a group that one coordinates), both
    brokers other than the controller: new groups committing ``committed`` on partition 0 of
    ``topic`` until two such brokers are found (a broker may then be paused without pausing
    the controller)."""
    admin = admin_for(cluster)
    controller = admin.describe_cluster(request_timeout=10).result().controller.id
    by_coordinator: dict[int, str] = {}
    for _ in range(tries):
        group = unique(prefix)
        commit_offsets(cluster.bootstrap_servers, group, topic, {0: committed})
        coord = admin.describe_consumer_groups([group], request_timeout=10)[group].result().coordinator.id
        by_coordinator.setdefault(coord, group)
        if len([c for c in by_coordinator if c != controller]) >= 2:
            break
    first, second = sorted(c for c in by_coordinator if c != controller)[:2]
    return first, by_coordinator[first], second, by_coordinator[second]


def create_topic(cluster: KafkaCluster, name: str, partitions: int = 3, rf: int = 1,
                 config: dict[str, str] | None = None) -> str:
    admin = admin_for(cluster)  # must outlive the future
    fut = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config or {})]
    )
    fut[name].result(30)
    return name


def produce(cluster: KafkaCluster, topic: str, counts: dict[int, int], **conf: Any) -> None:
    """Produce ``counts[p]`` records to each partition ``p`` and wait for delivery."""
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5, **conf})
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err.str())

    for part, n in counts.items():
        for i in range(n):
            p.produce(topic, value=f"v{i}".encode(), partition=part, on_delivery=delivered)
            if i % 1000 == 0:
                p.poll(0)
    left = p.flush(30)
    assert left == 0, f"{left} records not delivered"
    assert not failed, f"{len(failed)} records refused: {failed[0]}"


# Thresholds every shared-exporter test can rely on (seconds).
INTERVAL = 1.0
STALL_AFTER = 8.0
LIVELOCK_AFTER = 8.0
WINDOW = 60.0


def cycles(seconds: float, interval: float = INTERVAL) -> int:
    """The exporter cycles a threshold of ``seconds`` spans at most: the judgement's clocks
    run on sample times, and the runner never samples sooner than an interval after the
    last sample, so a busy machine only makes this fewer."""
    return math.ceil(seconds / interval)


def exporter_config(tmp_path: Any, bootstrap: str, **extra: Any) -> str:
    """A YAML config with test-sized thresholds; returns its path."""
    import yaml

    cfg = {
        "interval": INTERVAL,
        "request_timeout": 5,
        "thresholds": {"stall_after": STALL_AFTER, "livelock_after": LIVELOCK_AFTER,
                       "window": WINDOW, "lag_seconds": 3600, "report_stale_after": 10,
                       "report_expiry": 120},
        "clusters": [{"name": "test", "bootstrap_servers": bootstrap}],
    }
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k] = {**cfg[k], **v}
        else:
            cfg[k] = v
    path = f"{tmp_path}/lagwatch-{uuid.uuid4().hex[:6]}.yml"
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


@pytest.fixture(scope="session")
def exporter(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExporterProcess]:
    """One real exporter process watching the session broker, cluster name "test"."""
    cfg = exporter_config(tmp_path_factory.mktemp("exporter"), kafka.bootstrap_servers)
    proc = ExporterProcess(None, config=cfg, record=record_dir())
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dist]:
    """sdist and wheel of `lagwatch` and `lagwatch-client`, built once (tests/support/dists.py)."""
    return {name: build(path, tmp_path_factory.mktemp(name)) for name, path in PROJECTS.items()}

"""A broker down when lagwatch starts: lagwatch serves, says so, and recovers by itself
once the broker is back (docs/reliability.md). The test starts a broker of its own and
stops it, so it is not in tests/test_faults.py, whose worker starts the 3-broker cluster."""

from __future__ import annotations

from typing import Any

from devenv.kafka import KafkaCluster
from tests.conftest import commit_offsets, create_topic, exporter_config, produce, unique, wait_for
from tests.support.exporter_proc import ExporterProcess, group_offsets, value


def test_broker_down_at_start_then_recovers(tmp_path: Any) -> None:
    cluster = KafkaCluster(brokers_count=1)
    cluster.start()
    try:
        topic = create_topic(cluster, unique("down"), partitions=1)
        produce(cluster, topic, {0: 12})
        group = unique("down")
        commit_offsets(cluster.bootstrap_servers, group, topic, {0: 5})
        broker = cluster.brokers[0]
        cluster.stop_broker(broker)
        cfg = exporter_config(tmp_path, cluster.bootstrap_servers, request_timeout=2)
        with ExporterProcess(None, config=cfg) as exp:
            exp.wait_listening()
            wait_for(lambda: value(exp.metrics(), "lagwatch_up", cluster="test") == 0, 20,
                     "lagwatch_up 0 while the broker is down")
            assert exp.get("/readyz")[0] == 503
            assert exp.get("/healthz")[0] == 200
            wait_for(lambda: "cannot sample" in exp.output(), 10, "a clear log line")
            cluster.restart_broker(broker)
            wait_for(lambda: value(exp.metrics(), "lagwatch_up", cluster="test") == 1, 90,
                     "recovery once the broker is back (with backoff capped at 60 s)")
            # the group coordinator may need a cycle more than the metadata to load
            wait_for(lambda: group_offsets(exp.metrics(), group, "kafka_consumergroup_lag_offsets")
                     == {(topic, 0): 7.0}, 20, "the group's lag after recovery")
            assert exp.get("/readyz")[0] == 200
            assert exp.proc.poll() is None
    finally:
        cluster.stop()

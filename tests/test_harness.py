"""The harness itself: a real broker answers, and Kafka's own tool agrees with what we wrote."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from devenv.groups_tool import describe_group, parse_describe
from devenv.kafka import KafkaCluster
from tests.conftest import create_topic, produce, unique
from tests.support.exporter_proc import parse_metrics
from tests.support.scenarios import Recorder

GOLDEN = Path(__file__).parent / "golden"


def test_committed_offsets_match_kafka_consumer_groups(kafka: KafkaCluster) -> None:
    topic = create_topic(kafka, unique("harness"), partitions=3)
    produce(kafka, topic, {0: 50, 1: 20, 2: 7})
    group = unique("g")
    c = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 40), TopicPartition(topic, 1, 20),
                          TopicPartition(topic, 2, 1)], asynchronous=False)
    finally:
        c.close()
    rows = {r.partition: r for r in describe_group(kafka, group) if r.topic == topic}
    assert {p: r.current_offset for p, r in rows.items()} == {0: 40, 1: 20, 2: 1}
    assert {p: r.log_end_offset for p, r in rows.items()} == {0: 50, 1: 20, 2: 7}
    assert {p: r.lag for p, r in rows.items()} == {0: 10, 1: 0, 2: 6}
    assert all(r.consumer_id is None for r in rows.values())  # nobody is a member


def test_parse_describe_handles_dashes_and_repeated_headers() -> None:
    text = (
        "\nGROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID\n"
        "g1 t 0 - 12 - - - -\n"
        "g1 t 1 5 12 7 rdkafka-abc /127.0.0.1 c1\n"
    )
    rows = parse_describe(text)
    assert rows[0].current_offset is None and rows[0].log_end_offset == 12
    assert rows[1].lag == 7 and rows[1].host == "/127.0.0.1" and rows[1].client_id == "c1"


def test_a_broker_whose_handle_was_lost_stops_with_its_cluster() -> None:
    """A signal handler that raises inside ``Popen`` after the fork (Ctrl-C in the demo while
    Kafka starts) leaves the broker JVM without a handle; the cluster's stop still ends it."""
    cluster = KafkaCluster(brokers_count=1).start()
    b = cluster.brokers[0]
    assert b.proc is not None
    pid, b.proc = b.proc.pid, None  # what the interrupted Popen leaves
    cluster.stop()
    assert not Path(f"/proc/{pid}").exists(), "the broker JVM outlived its cluster's stop"


def test_the_recorders_filtered_parse_equals_the_whole_parse() -> None:
    """The scenario Recorder parses only the names it reads; on both golden expositions its
    samples are exactly the whole parse's samples of those names, and some of each."""
    for golden in ("metrics-plain.prom", "metrics-kafka_exporter.prom"):
        text = (GOLDEN / golden).read_text()
        whole = parse_metrics(text)
        names = {n for n, _lab in whole}
        for only in (Recorder.READS, frozenset(n for n in names if n.startswith("kafka_"))):
            wanted = {k: v for k, v in whole.items() if k[0] in only}
            assert wanted, (golden, sorted(only))
            assert parse_metrics(text, only) == wanted, golden


def test_the_filtered_parse_splits_lines_where_the_exposition_does() -> None:
    """Only "\n" ends a line of the text format; a group name may hold the other
    characters str.splitlines breaks at, raw in its label value (the exposition escapes
    only the backslash, the quote and the newline)."""
    names = ["cr\rname", "ls\u2028name", "nel\x85name", "fs\x1cname", "ff\x0cname"]
    text = "# TYPE kafka_consumergroup_status gauge\n" + "".join(
        f'kafka_consumergroup_status{{group="{n}",status="ok"}} 1\n' for n in names) + \
        "# TYPE other gauge\nother 2\n"
    whole = parse_metrics(text)
    assert len(whole) == len(names) + 1
    assert parse_metrics(text, Recorder.READS) == {k: v for k, v in whole.items() if k[0] != "other"}

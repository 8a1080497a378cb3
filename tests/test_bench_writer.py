"""bench/commits.py, the live benchmark's commits built once a round, against a real broker:
what it commits is what Kafka then holds, and a commit Kafka refuses is counted failed."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from bench.commits import PIPELINE, Committer
from devenv.kafka import KafkaCluster
from tests.conftest import create_topic, unique


def _committed(kafka: KafkaCluster, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def test_every_group_holds_the_round_offset_and_refusals_are_counted(kafka: KafkaCluster) -> None:
    topic = create_topic(kafka, unique("bench-writer"), partitions=3)
    # more groups than one pipeline of one connection: answers read across batches
    gids = [unique(f"bench-writer-g{i}") for i in range(PIPELINE * 4 + 7)]
    c = Committer(kafka.bootstrap_servers, gids, topic, 3)
    try:
        assert c.commit(5) == []
        assert c.commit(9) == []
    finally:
        c.close()
    for g in (gids[0], gids[PIPELINE + 1], gids[-1]):
        assert _committed(kafka, g) == {0: 9, 1: 9, 2: 9}
    missing = Committer(kafka.bootstrap_servers, gids[:3], unique("bench-writer-none"), 2)
    try:  # a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION for each group
        assert sorted(missing.commit(1)) == sorted(gids[:3])
    finally:
        missing.close()

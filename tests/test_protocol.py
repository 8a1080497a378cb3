"""exporter/kafka/broker_requests.py: librdkafka properties mapped (or refused at start), responses of
the requests librdkafka cannot send parsed from real message shapes, and the message
definitions we ship equal to the ones inside Kafka's own client jar.

The requests themselves run against real brokers elsewhere: the log end offset over
SASL_SSL/SCRAM (test_security.py) and with a paused follower (test_exporter_core.py),
streams and share groups (test_group_types.py).
"""

from __future__ import annotations

import ssl
import zipfile
from pathlib import Path

import pytest
from kafka.protocol.admin import DescribeGroupsResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from devenv.jars import CLIENTS_KAFKA_VERSION, kafka_libs
from devenv.kafka import KafkaCluster
from exporter.contracts.snapshot import GroupType, KafkaGroupState
from exporter.kafka import messages as kafka_messages
from exporter.kafka.broker_requests import (
    DEBUGGING_REPLICA_ID,
    BrokerRequests,
    Unsupported,
    kafka_python_config,
    parse_classic,
    parse_described,
    parse_share_offsets,
)
from exporter.kafka.messages import (
    ConsumerGroupDescribeResponse,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeResponse,
    StreamsGroupDescribeResponse,
)
from tests.conftest import create_topic, produce, unique

SECRET = "s3cr3t-Passw0rd"


@pytest.mark.unit
@pytest.mark.parametrize("props, expect", [
    ({}, {"security_protocol": "PLAINTEXT"}),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
      "sasl.username": "lagwatch", "sasl.password": SECRET},
     {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
      "sasl_plain_username": "lagwatch", "sasl_plain_password": SECRET}),
    ({"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
      "sasl.password": SECRET}, {"sasl_mechanism": "PLAIN"}),
    ({"security.protocol": "SSL", "ssl.ca.location": "probe"},
     {"security_protocol": "SSL", "ssl_check_hostname": True}),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"},
     {"ssl_check_hostname": False}),
    ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"},
     {"ssl_check_hostname": False}),
])
def test_librdkafka_properties_are_mapped(props: dict[str, str], expect: dict) -> None:
    conf = kafka_python_config(props, "b1:9092,b2:9092", 5.0, "lagwatch-prod")
    assert conf["bootstrap_servers"] == ["b1:9092", "b2:9092"] and conf["client_id"] == "lagwatch-prod"
    assert conf["request_timeout_ms"] == 5000
    for k, v in expect.items():
        assert conf[k] == v, k
    if "ssl_context" in conf:
        ctx: ssl.SSLContext = conf["ssl_context"]
        verify = props.get("enable.ssl.certificate.verification", "true") != "false"
        assert ctx.verify_mode == (ssl.CERT_REQUIRED if verify else ssl.CERT_NONE)


@pytest.mark.unit
@pytest.mark.parametrize("props, named", [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/etc/k.p12",
      "ssl.keystore.password": SECRET}, "ssl.keystore.location"),
    ({"security.protocol": "SSL", "ssl.key.pem": "-----BEGIN PRIVATE KEY-----"}, "ssl.key.pem"),
    ({"security.protocol": "SSL", "ssl.engine.location": "/usr/lib/engine.so"}, "ssl.engine.location"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "TLS settings"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/nonexistent/c.pem",
      "ssl.key.password": SECRET}, "TLS settings"),
    ({"security.protocol": "kerberos"}, "security.protocol"),
])
def test_what_cannot_be_honoured_is_refused_at_start_by_name(props: dict[str, str], named: str) -> None:
    with pytest.raises(Unsupported) as e:
        kafka_python_config(props, "b:9092", 5.0, "lagwatch")
    assert named in str(e.value) and SECRET not in str(e.value)


@pytest.mark.unit
def test_ca_given_as_pem_text_is_honoured(tmp_path: Path) -> None:
    # The system's own CA bundle, as PEM text: the same certificates librdkafka would trust.
    bundle = ssl.get_default_verify_paths().cafile
    assert bundle and Path(bundle).exists(), "the system CA bundle (ca-certificates) is missing"
    conf = kafka_python_config({"security.protocol": "SSL", "ssl.ca.pem": Path(bundle).read_text()},
                               "b:9092", 5.0, "lagwatch")
    assert conf["ssl_context"].cert_store_stats()["x509_ca"] > 0


@pytest.mark.unit
@pytest.mark.parametrize("broker, ours", [
    ("Stable", "stable"), ("NotReady", "not_ready"), ("Empty", "empty"),
    ("PreparingRebalance", "preparing_rebalance"), ("preparingrebalance", "preparing_rebalance"),
    ("CompletingRebalance", "completing_rebalance"), ("Assigning", "assigning"), (None, "unknown"),
    ("SomethingNew", "unknown"),
])
def test_state_names(broker: str | None, ours: str) -> None:
    """One normaliser, one spelling: the listing's and the describes' states alike."""
    assert KafkaGroupState(broker) == ours


def _roundtrip(msg: object, cls: type, version: int) -> object:
    """Encode and decode with kafka-python's codec: what the broker's bytes turn into."""
    return cls.decode(msg.encode(version=version), version=version)  # type: ignore[attr-defined]


@pytest.mark.unit
def test_streams_member_owns_the_partitions_of_its_active_tasks_source_topics() -> None:
    g = StreamsGroupDescribeResponse.DescribedGroup
    sub = g.Topology.Subtopology
    member = g.Member
    tasks = member.Assignment.TaskIds
    res = StreamsGroupDescribeResponse(throttle_time_ms=0, groups=[g(
        error_code=0, error_message=None, group_id="wordcount", group_state="Stable", group_epoch=7,
        assignment_epoch=7, authorized_operations=-2147483648,
        topology=g.Topology(epoch=0, subtopologies=[
            sub(subtopology_id="0", source_topics=["words"], repartition_sink_topics=["wc-repart"],
                state_changelog_topics=[], repartition_source_topics=[]),
            sub(subtopology_id="1", source_topics=[], repartition_sink_topics=[],
                state_changelog_topics=[], repartition_source_topics=[
                    sub.TopicInfo(name="wc-repart", partitions=2, replication_factor=1, topic_configs=[])]),
        ]),
        members=[member(
            member_id="m-1", member_epoch=7, instance_id=None, rack_id=None,
            client_id="wc-1-StreamThread-1-consumer", client_host="/10.0.0.8", topology_epoch=0,
            process_id="proc-a", user_endpoint=None, client_tags=[], task_offsets=[], task_end_offsets=[],
            assignment=member.Assignment(
                active_tasks=[tasks(subtopology_id="0", partitions=[0, 2]),
                              tasks(subtopology_id="1", partitions=[1])],
                standby_tasks=[tasks(subtopology_id="0", partitions=[1])], warmup_tasks=[]),
            target_assignment=member.Assignment(
                active_tasks=[tasks(subtopology_id="0", partitions=[0, 1, 2])], standby_tasks=[],
                warmup_tasks=[]),
            is_classic=False)])])
    (d,) = parse_described(GroupType.STREAMS, 3, _roundtrip(res, StreamsGroupDescribeResponse, 0))
    assert (d.group_id, d.state, d.group_epoch, d.coordinator, d.error) == ("wordcount", "stable", 7, 3, None)
    (m,) = d.members
    # standby tasks read changelogs, not the source topics: not ownership
    assert m.assignment == (("wc-repart", 1), ("words", 0), ("words", 2))
    assert (m.member_id, m.member_epoch, m.process_id, m.host) == ("m-1", 7, "proc-a", "/10.0.0.8")
    # where the coordinator is moving it: task 0_1 comes, the repartition task goes
    assert m.target == (("words", 0), ("words", 1), ("words", 2))


@pytest.mark.unit
def test_share_group_members_and_offsets() -> None:
    g = ShareGroupDescribeResponse.DescribedGroup
    tps = g.Member.Assignment.TopicPartitions
    res = ShareGroupDescribeResponse(throttle_time_ms=0, groups=[
        g(error_code=0, error_message=None, group_id="jobs", group_state="Stable", group_epoch=5,
          assignment_epoch=5, assignor_name="simple", authorized_operations=-2147483648, members=[
              g.Member(member_id="q-1", rack_id=None, member_epoch=5, client_id="worker-1",
                       client_host="/10.0.0.9", subscribed_topic_names=["jobs"],
                       assignment=g.Member.Assignment(topic_partitions=[
                           tps(topic_id="5f3b8a52-1c1e-4c0d-9d3e-0b4b1d5f7a10", topic_name="jobs",
                               partitions=[1, 0])]))]),
        g(error_code=69, error_message="Group gone not found.", group_id="gone", group_state="",
          group_epoch=-1, assignment_epoch=-1, assignor_name="", authorized_operations=-2147483648,
          members=[]),
    ])
    ok, gone = parse_described(GroupType.SHARE, 1, _roundtrip(res, ShareGroupDescribeResponse, 1))
    assert ok.members[0].assignment == (("jobs", 0), ("jobs", 1)) and ok.members[0].member_epoch == 5
    assert gone.error is not None and "GroupIdNotFound" in gone.error and gone.error_code == 69

    o = DescribeShareGroupOffsetsResponse
    grp, top, part = (o.DescribeShareGroupOffsetsResponseGroup,
                      o.DescribeShareGroupOffsetsResponseGroup.DescribeShareGroupOffsetsResponseTopic,
                      o.DescribeShareGroupOffsetsResponseGroup.DescribeShareGroupOffsetsResponseTopic
                      .DescribeShareGroupOffsetsResponsePartition)
    res = o(throttle_time_ms=0, groups=[grp(group_id="jobs", error_code=0, error_message=None, topics=[
        top(topic_name="jobs", topic_id="5f3b8a52-1c1e-4c0d-9d3e-0b4b1d5f7a10", partitions=[
            part(partition_index=0, start_offset=120, leader_epoch=0, lag=30, error_code=0,
                 error_message=None),
            part(partition_index=1, start_offset=-1, leader_epoch=0, lag=-1, error_code=0,
                 error_message=None),  # nothing consumed yet: no state
        ])])])
    got = parse_share_offsets(_roundtrip(res, o, 1))["jobs"]
    assert (got.start, got.lag, got.error) == ({("jobs", 0): 120}, {("jobs", 0): 30}, None)
    # v0 (Kafka 4.0/4.1) has no lag: the start offset alone, the lag from the HW
    got = parse_share_offsets(_roundtrip(res, o, 0))["jobs"]
    assert (got.start, got.lag) == ({("jobs", 0): 120}, {})


@pytest.mark.unit
def test_kip848_member_subscriptions_known_by_name_unknown_by_regex() -> None:
    g = ConsumerGroupDescribeResponse.DescribedGroup
    assignment = g.Member.Assignment(topic_partitions=[])

    def member(mid: str, names: list[str], regex: str | None) -> object:
        return g.Member(member_id=mid, instance_id=None, rack_id=None, member_epoch=3, client_id="c",
                        client_host="/10.0.0.7", subscribed_topic_names=names, subscribed_topic_regex=regex,
                        assignment=assignment, target_assignment=assignment, member_type=-1)
    res = ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=[g(
        error_code=0, error_message=None, group_id="orders", group_state="Stable", group_epoch=3,
        assignment_epoch=3, assignor_name="uniform", authorized_operations=-2147483648,
        members=[member("m-1", ["orders-v2", "audit"], None), member("m-2", [], "orders-.*")])])
    (d,) = parse_described("consumer", 1, _roundtrip(res, ConsumerGroupDescribeResponse, 1))
    assert [m.subscribed for m in d.members] == [("audit", "orders-v2"), ()]


@pytest.mark.unit
def test_streams_members_subscribe_to_the_topology_source_topics() -> None:
    g = StreamsGroupDescribeResponse.DescribedGroup
    sub = g.Topology.Subtopology
    member = g.Member
    none = member.Assignment(active_tasks=[], standby_tasks=[], warmup_tasks=[])
    res = StreamsGroupDescribeResponse(throttle_time_ms=0, groups=[g(
        error_code=0, error_message=None, group_id="wordcount", group_state="Stable", group_epoch=7,
        assignment_epoch=7, authorized_operations=-2147483648,
        topology=g.Topology(epoch=0, subtopologies=[
            sub(subtopology_id="0", source_topics=["words"], repartition_sink_topics=["wc-repart"],
                state_changelog_topics=[], repartition_source_topics=[]),
            sub(subtopology_id="1", source_topics=[], repartition_sink_topics=[],
                state_changelog_topics=[], repartition_source_topics=[
                    sub.TopicInfo(name="wc-repart", partitions=2, replication_factor=1, topic_configs=[])]),
        ]),
        members=[member(
            member_id="m-1", member_epoch=7, instance_id=None, rack_id=None,
            client_id="wc-1-StreamThread-1-consumer", client_host="/10.0.0.8", topology_epoch=0,
            process_id="proc-a", user_endpoint=None, client_tags=[], task_offsets=[], task_end_offsets=[],
            assignment=none, target_assignment=none, is_classic=False)])])
    (d,) = parse_described(GroupType.STREAMS, 3, _roundtrip(res, StreamsGroupDescribeResponse, 0))
    # a member with no task yet still subscribes to every source topic, repartition ones included
    assert d.members[0].subscribed == ("wc-repart", "words")


@pytest.mark.unit
def test_classic_member_subscriptions_from_their_metadata() -> None:
    g = DescribeGroupsResponse.DescribedGroup
    m = g.DescribedGroupMember

    def sub(*topics: str) -> bytes:
        meta = ConsumerProtocolSubscription(version=3, topics=list(topics), user_data=None,
                                            owned_partitions=[], generation_id=4, rack_id=None)
        return meta.encode(version=3)
    res = DescribeGroupsResponse(throttle_time_ms=0, groups=[
        g(error_code=0, error_message=None, group_id="orders", group_state="Stable", protocol_type="consumer",
          protocol_data="range", authorized_operations=set(), members=[
              m(member_id="m-1", group_instance_id=None, client_id="c1", client_host="/10.0.0.5",
                member_metadata=sub("orders-v2", "audit"), member_assignment=b""),
              m(member_id="m-2", group_instance_id=None, client_id="c2", client_host="/10.0.0.6",
                member_metadata=b"\x00", member_assignment=b"")]),  # unreadable: unknown
        g(error_code=0, error_message=None, group_id="connect-cluster", group_state="Stable",
          protocol_type="connect", protocol_data="sessioned", authorized_operations=set(), members=[
              m(member_id="w-1", group_instance_id=None, client_id="w", client_host="/10.0.0.7",
                member_metadata=b"\x00\x01", member_assignment=b"")]),
    ])
    orders, connect = parse_classic(2, _roundtrip(res, DescribeGroupsResponse, 5))
    assert [(m.member_id, m.subscribed) for m in orders.members] == [
        ("m-1", ("audit", "orders-v2")), ("m-2", ())]
    assert [m.subscribed for m in connect.members] == [()]  # not the consumer protocol


def test_shipped_message_definitions_are_kafkas_own() -> None:
    """exporter/kafka/messages/*.json equal the kafka-clients jar's (the jars `make setup`
    fetches from Maven Central)."""
    jar = next(kafka_libs(CLIENTS_KAFKA_VERSION).glob("kafka-clients-*.jar"))
    shipped = sorted(Path(kafka_messages.__file__).parent.glob("*.json"))
    assert len(shipped) == 8
    with zipfile.ZipFile(jar) as z:
        for f in shipped:
            assert z.read(f"common/message/{f.name}") == f.read_bytes(), f.name


def test_a_broker_kafka_python_does_not_know_yet_fails_alone(kafka: KafkaCluster) -> None:
    """librdkafka's metadata can name a broker (restarted, or new) that kafka-python's, refreshed
    every 5 minutes, does not know yet: that broker's request fails, the others answer, and
    a metadata refresh is asked for at once."""
    topic = create_topic(kafka, unique("unknown-broker"), partitions=1)
    produce(kafka, topic, {0: 7})
    req = BrokerRequests({}, kafka.bootstrap_servers, 10.0, "lagwatch-test")
    try:
        req._connected()
        req._connected().cluster._need_update = False
        leos, failures = req.list_offsets({1: [(topic, 0)], 4242: [(topic, 0)]},
                                          replica_id=DEBUGGING_REPLICA_ID)
        assert leos == {(topic, 0): 7}
        assert len(failures) == 1 and failures[0].startswith("broker 4242:"), failures
        assert req._connected().cluster._need_update
    finally:
        req.close()

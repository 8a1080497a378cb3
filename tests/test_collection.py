"""Collection per broker and per coordinator (issue 25): the requests a cycle sends do not
grow with the number of groups, one group's error never costs another its offsets, and
brokers without OffsetFetch v8 (before Kafka 3.0, KIP-709) are read one group at a time
with the same values."""

from __future__ import annotations

import dataclasses
import io
import pickle
import re
import struct

import pytest
from kafka.protocol.consumer import ListOffsetsResponse, OffsetFetchRequest, OffsetFetchResponse

from devenv.kafka import KafkaCluster
from exporter.config import ClusterConfig, Filters
from exporter.contracts.errors import ErrorRecord, ErrorStage
from exporter.contracts.snapshot import GroupSample
from exporter.kafka import broker_requests, offset_fetch
from exporter.kafka import sampler as sampler_module
from exporter.kafka.broker_requests import (
    MAX_ELEMENTS,
    UNKNOWN_WEIGHT,
    BrokerRequests,
    _chunks,
    _list_offsets_request,
    _offsets_of,
    _partition_chunks,
    kafka_python_config,
    parse_offset_fetch,
)
from exporter.kafka.offset_fetch import LEAN_VERSIONS
from exporter.kafka.sampler import Sampler
from tests.conftest import commit_offsets, create_topic, produce, unique

NOT_COORDINATOR = 16


@pytest.mark.unit
def test_batches_stay_under_the_element_limit() -> None:
    weight = {f"g{i:03d}": 60_000 for i in range(10)}
    chunks = _chunks(sorted(weight), weight)
    assert sorted(g for c in chunks for g in c) == sorted(weight)
    assert all(sum(weight[g] for g in c) <= MAX_ELEMENTS for c in chunks)
    assert len(chunks) == 3  # 4 + 4 + 2 groups of 60,000 under 250,000
    # a group larger than the limit alone still gets its request
    assert _chunks(["huge", "small"], {"huge": 2 * MAX_ELEMENTS, "small": 1}) == [["huge"], ["small"]]
    # groups never read before count as UNKNOWN_WEIGHT each: 2,000 of them are one request
    assert len(_chunks([f"g{i}" for i in range(2000)], {})) == 2000 * UNKNOWN_WEIGHT // MAX_ELEMENTS + 1


@pytest.mark.unit
def test_list_offsets_requests_stay_under_the_element_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ListOffsets (one per leader) is split so that its topics plus partitions stay
    within MAX_ELEMENTS: Kafka 4.4 rejects a decoded array over 1,000,000 elements."""
    assert MAX_ELEMENTS < 1_000_000
    # 100,000 partitions on one leader (2,000 groups x 50 partitions): still one request
    assert len(_partition_chunks([("t", p) for p in range(100_000)])) == 1
    assert [len(c) for c in _partition_chunks([("t", p) for p in range(300_000)])] == [
        MAX_ELEMENTS - 1, 300_000 - MAX_ELEMENTS + 1]
    monkeypatch.setattr(broker_requests, "MAX_ELEMENTS", 10)
    tps = [(t, p) for t in ("a", "b", "c") for p in range(7)]
    chunks = _partition_chunks(tps)
    assert sorted(tp for c in chunks for tp in c) == sorted(tps)
    assert len(chunks) == 3
    for c in chunks:
        req = _list_offsets_request(c, -1, -1, 0)
        assert len(req.topics) + sum(len(t.partitions) for t in req.topics) <= 10


@pytest.mark.unit
def test_partitions_a_leader_refuses_are_failures_not_silence() -> None:
    """A ListOffsets answered with a partition error (a leader that moved, a topic deleted
    meanwhile) leaves that partition unknown and says so, once per leader and error."""
    topic = ListOffsetsResponse.ListOffsetsTopicResponse
    part = topic.ListOffsetsPartitionResponse
    res = ListOffsetsResponse(throttle_time_ms=0, topics=[topic(name="t", partitions=[
        part(partition_index=p, error_code=code, timestamp=-1, offset=off, leader_epoch=-1)
        for p, code, off in ((0, 0, 40), (1, 6, -1), (2, 6, -1), (3, 3, -1), (4, 0, -1))])])
    res = ListOffsetsResponse.decode(res.encode(version=4), version=4)
    got, failures = _offsets_of([(1, None)], [res])
    assert got == {("t", 0): 40}  # -1 without an error: unknown, not a failure
    assert failures == ["broker 1: UnknownTopicOrPartitionError (3) for 1 partition",
                        "broker 1: NotLeaderForPartitionError (6) for 2 partitions"]


@pytest.mark.unit
def test_one_groups_error_never_costs_another_its_offsets() -> None:
    res_cls = OffsetFetchResponse
    group = res_cls.OffsetFetchResponseGroup
    topic = group.OffsetFetchResponseTopics
    part = topic.OffsetFetchResponsePartitions
    res = res_cls(throttle_time_ms=0, groups=[
        group(group_id="moved", topics=[], error_code=NOT_COORDINATOR),
        group(group_id="orders", error_code=0, topics=[topic(name="t", partitions=[
            part(partition_index=0, committed_offset=42, committed_leader_epoch=-1, metadata="",
                 error_code=0),
            part(partition_index=1, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                 error_code=0),
        ])])])
    res = res_cls.decode(res.encode(version=9), version=9)  # what the broker's bytes turn into
    got = parse_offset_fetch(res, ["moved", "orders"])
    assert got["orders"].offsets == {("t", 0): 42} and got["orders"].error is None
    assert got["moved"].offsets == {} and got["moved"].error_code == NOT_COORDINATOR
    assert "NotCoordinator" in (got["moved"].error or "")
    # the moved group's coordinator is looked up again next time; the other's is kept
    req = BrokerRequests({}, "127.0.0.1:1", 1.0, "t")
    req.learn_coordinators({"moved": 1, "orders": 1})
    req._forget_moved("moved", NOT_COORDINATOR)
    req._forget_moved("orders", 0)
    assert req.coordinators == {"orders": 1}


def _offset_fetch_answer(version: int) -> tuple[bytes, list[str]]:
    """An OffsetFetch answer as a broker sends it (kafka-python encodes it), with what
    varies in the layout: long names and arrays (multi-byte lengths), metadata present,
    empty and null, errors of a partition and of a group, and no offset (-1); a topic
    whose every partition has the common layout (read at once), and one whose last
    partition has metadata (read one at a time)."""
    group = OffsetFetchResponse.OffsetFetchResponseGroup
    topic = group.OffsetFetchResponseTopics
    part = topic.OffsetFetchResponsePartitions
    long_name = "g" * 300
    groups = [
        group(group_id="moved", topics=[], error_code=NOT_COORDINATOR),
        group(group_id=long_name, error_code=0, topics=[
            topic(name="big", partitions=[
                part(partition_index=p, committed_offset=10**12 + p, committed_leader_epoch=p % 3,
                     metadata=("m" * p if p % 3 == 0 else None if p % 3 == 1 else ""),
                     error_code=0) for p in range(200)]),
            topic(name="t", partitions=[
                part(partition_index=0, committed_offset=-1, committed_leader_epoch=-1,
                     metadata="", error_code=0),
                part(partition_index=1, committed_offset=7, committed_leader_epoch=-1,
                     metadata="", error_code=3)])]),
        group(group_id="plain", error_code=0, topics=[
            topic(name="even", partitions=[
                part(partition_index=p, committed_offset=-1 if p == 7 else 2**40 + p,
                     committed_leader_epoch=-1, metadata=None if p % 2 else "",
                     error_code=3 if p == 9 else 0) for p in range(20)]),
            topic(name="odd", partitions=[
                part(partition_index=p, committed_offset=p, committed_leader_epoch=-1,
                     metadata="" if p < 19 else "\x01" * 20, error_code=0) for p in range(20)])]),
        group(group_id="orders", error_code=0, topics=[topic(name="big", partitions=[
            part(partition_index=5, committed_offset=42, committed_leader_epoch=-1, metadata="x",
                 error_code=0)])]),
    ]
    res = OffsetFetchResponse(throttle_time_ms=5, groups=groups)
    return bytes(res.encode(version=version)), ["moved", long_name, "orders", "plain"]


@pytest.mark.unit
@pytest.mark.parametrize("version", LEAN_VERSIONS)
def test_offset_fetch_decoded_as_kafka_python_decodes_it(version: int) -> None:
    """The exporter's OffsetFetch decoder (exporter/kafka/offset_fetch.py) keeps what
    kafka-python's decode then the parse keep, group by group, partition by partition."""
    body, ids = _offset_fetch_answer(version)
    theirs = parse_offset_fetch(OffsetFetchResponse.decode(body, version=version), ids)
    decoded = offset_fetch.decode(body, version)
    assert decoded.throttle_time_ms == 5  # kafka-python's connection honours it (KIP-219)
    ours = parse_offset_fetch(decoded, ids)
    assert ours == theirs
    assert len(ours[ids[1]].offsets) == 200  # the 200 of "big"; "t" has none to keep
    # 18 of "even" (one without an offset, one with an error) and the 20 of "odd"
    assert len(ours["plain"].offsets) == 38
    assert ours["plain"].offsets[("even", 8)] == 2**40 + 8 and ("even", 9) not in ours["plain"].offsets
    assert ours["orders"].offsets == {("big", 5): 42}
    assert ours["moved"].error_code == NOT_COORDINATOR and not ours["moved"].offsets
    # a truncated answer fails as kafka-python's own decode failures do (ValueError or
    # struct.error, which it turns into the request's KafkaProtocolError)
    for cut in (3, 40, len(body) // 2, len(body) - 1):
        with pytest.raises((ValueError, struct.error)):
            offset_fetch._Decoder(version).decode(io.BytesIO(body[:cut]))
    # one key object per partition, shared by the groups that commit there
    key = next(k for k in ours[ids[1]].offsets if k == ("big", 5))
    assert next(iter(ours["orders"].offsets)) is key


@pytest.mark.unit
def test_a_group_keyed_as_the_snapshot_is_kept_and_any_other_re_keyed() -> None:
    """Answers decoded here take the worker's keys (offset_fetch.key_of), which the
    snapshot's partitions share: such a group of watched topics is kept as it is; a group
    with an unwatched topic, or keys of its own, is copied with the snapshot's keys only."""
    body, ids = _offset_fetch_answer(LEAN_VERSIONS[-1])
    offset_fetch.keep_keys([])
    decoded = offset_fetch.decode(body, LEAN_VERSIONS[-1])
    canon = {k: k for k in (offset_fetch.key_of(("big", p)) for p in range(200))}
    assert set(decoded.groups[ids[1]][1]) <= set(canon)

    def sample(committed: dict) -> GroupSample:
        return GroupSample(group_id="g", type="classic", state="empty", committed=committed)
    ours = sample(dict(decoded.groups[ids[1]][1]))
    assert sampler_module._only_topics(ours, {"big"}, canon) is ours
    own_keys = sample({("big", 5): 7})  # equal keys, other objects
    kept = sampler_module._only_topics(own_keys, {"big"}, canon)
    assert kept.committed == {("big", 5): 7} and next(iter(kept.committed)) is canon[("big", 5)]
    other_topic = sample({**ours.committed, ("gone", 0): 3})
    assert sampler_module._only_topics(other_topic, {"big"}, canon).committed == ours.committed
    offset_fetch.keep_keys([canon[("big", 5)]])  # a cycle's partitions: the others' keys go
    assert offset_fetch.key_of(("big", 6)) is not canon[("big", 6)]
    assert offset_fetch.key_of(("big", 5)) is canon[("big", 5)]


@pytest.mark.unit
def test_offset_fetch_decoder_skips_tagged_fields() -> None:
    """Tagged fields (KIP-482) a newer broker may add are skipped by their size."""
    r = offset_fetch._Reader(bytes([2, 0, 3, 9, 9, 9, 1, 1, 7, 0x55]))
    r.skip_tags()  # two fields: tag 0 of 3 bytes, tag 1 of 1 byte
    assert r.pos == 9 and r.data[r.pos] == 0x55
    r = offset_fetch._Reader(bytes([0xAC, 0x02]))
    assert r.uvarint() == 300 and r.pos == 2


@pytest.mark.unit
def test_only_the_exporters_offset_fetch_answers_use_its_decoder() -> None:
    """v8-v9 answers to the exporter's request go to its decoder; older versions and
    every other client's OffsetFetch stay kafka-python's."""
    def answer_type(req: object, version: int) -> object:
        req.API_VERSION = version  # type: ignore[attr-defined]
        req.with_header(correlation_id=1, client_id="t")  # type: ignore[attr-defined]
        return req.header.get_response_class()  # type: ignore[attr-defined]

    group = [OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None)]
    mine = offset_fetch.LeanOffsetFetchRequest(groups=group, require_stable=False)
    assert isinstance(answer_type(mine, 9), offset_fetch._Decoder)
    assert answer_type(offset_fetch.LeanOffsetFetchRequest(group_id="g", topics=None), 7) is \
        OffsetFetchResponse[7]
    assert answer_type(OffsetFetchRequest(groups=group, require_stable=False), 9) is \
        OffsetFetchResponse[9]


def _cycle(kafka: KafkaCluster, groups: list[str], **cap: int) -> tuple[dict, int]:
    only = Filters(group_allow=re.compile(f"^({'|'.join(map(re.escape, groups))})$"))
    s = Sampler(ClusterConfig(name="t", bootstrap_servers=kafka.bootstrap_servers, client={},
                              filters=only), **cap)
    try:
        s.sample()  # connects; the second cycle is the steady state
        assert s.broker_requests is not None
        before = s.broker_requests.requests
        snap = s.sample()
        assert snap.ok and not snap.errors, snap.errors
        return {g: snap.groups[g].committed for g in groups}, s.broker_requests.requests - before
    finally:
        s.close()


def test_requests_per_cycle_do_not_grow_with_groups_and_pre_kip709_brokers_match(
        kafka: KafkaCluster) -> None:
    topic = create_topic(kafka, unique("per-coord"), partitions=2)
    produce(kafka, topic, {0: 30, 1: 30})
    groups = sorted(unique("per-coord") for _ in range(12))
    for i, g in enumerate(groups):
        commit_offsets(kafka.bootstrap_servers, g, topic, {0: i, 1: 2 * i + 1})
    expected = {g: {(topic, 0): i, (topic, 1): 2 * i + 1} for i, g in enumerate(groups)}
    few, few_requests = _cycle(kafka, groups[:2])
    many, many_requests = _cycle(kafka, groups)
    assert many == expected and few == {g: expected[g] for g in groups[:2]}
    # metadata, ListGroups, OffsetFetch, 4 x ListOffsets on one broker; no DescribeGroups:
    # the groups commit from outside group membership, and the listing says they are Empty
    assert many_requests == few_requests == 7
    # A broker before Kafka 3.0 (OffsetFetch capped at v7): one OffsetFetch per group,
    # the same values.
    old, old_requests = _cycle(kafka, groups, offset_fetch_max_version=7)
    assert old == expected
    assert old_requests == 7 - 1 + len(groups)


@pytest.mark.unit
def test_error_records_are_typed_and_cross_the_worker_pipe() -> None:
    e = pickle.loads(pickle.dumps(ErrorRecord(stage="describe_group", group="orders",
                                              message="orders: NotCoordinator", code=16)))
    assert e == ErrorRecord(stage=ErrorStage.DESCRIBE_GROUP, group="orders",
                            message="orders: NotCoordinator", code=16)
    assert e.stage is ErrorStage.DESCRIBE_GROUP and str(e) == "describe_group: orders: NotCoordinator"
    with pytest.raises(ValueError):
        ErrorRecord(stage="descibe_group", message="a typo is no new label value")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.group = "billing"  # type: ignore[misc]


@pytest.mark.unit
def test_a_full_batch_fits_what_kafka_python_accepts() -> None:
    """kafka-python refuses an answer over receive_message_max_bytes (1,000,000 by default):
    a batched OffsetFetch of MAX_ELEMENTS partitions (about 20 bytes each) must fit."""
    conf = kafka_python_config({}, "b:9092", 5.0, "lagwatch")
    assert conf["receive_message_max_bytes"] >= 20 * MAX_ELEMENTS

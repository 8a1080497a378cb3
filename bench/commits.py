"""The live fleet's commits at a small cost in CPU: OffsetCommit requests built once a round.

The benchmark's writer stands in for consumers that run on other machines, yet it runs on
the machine it measures. Committing through ``confluent_kafka``'s Admin client costs a
Python call, 50 ``TopicPartition`` objects and a future per group (about 0.3 ms of CPU a
group: half a core at 2,000 groups every 2 s, more than a core at 10,000); Java's Admin
client costs more (its single sender thread rescans every pending call). Every group of the
live shape commits the same offsets, so one request body serves all of them: kafka-python
encodes it once a round (OffsetCommit v7, generation -1: a commit outside any group
generation, as the Admin API's), each group's request is that body behind its own header
and group id, and a success is recognised by its bytes (the answer of a request whose every
partition succeeded is the same for every group). A few connections per coordinator keep
requests in flight, their answers read in order (Kafka answers a connection's requests in
the order it sent them).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka.admin import AdminClient
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

API_KEY = 8  # OffsetCommit
VERSION = 7  # the last before flexible versions: plain int16-length strings
CLIENT_ID = b"lagwatch-bench-live"
CONNECTIONS = 4  # per coordinator
PIPELINE = 100  # requests sent before their answers are read, per connection


class Committer:
    """Commits every group's partitions of one topic at one offset, a round at a time."""

    def __init__(self, bootstrap: str, gids: Sequence[str], topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self._ids = {g: struct.pack(">h", len(g.encode())) + g.encode() for g in gids}
        by_node: dict[tuple[str, int], list[str]] = {}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for i in range(0, len(gids), 500):
            for gid, fut in admin.describe_consumer_groups(list(gids[i:i + 500])).items():
                c = fut.result(60).coordinator
                by_node.setdefault((c.host, c.port), []).append(gid)
        # each coordinator's groups dealt over its connections
        self._lanes = [(socket.create_connection(node, 30), gs[k::CONNECTIONS])
                       for node, gs in by_node.items() for k in range(CONNECTIONS) if gs[k::CONNECTIONS]]
        self._pool = ThreadPoolExecutor(len(self._lanes))
        self._ok = self._success()  # the same answer every round

    def close(self) -> None:
        self._pool.shutdown()
        for s, _ in self._lanes:
            s.close()

    def commit(self, offset: int) -> list[str]:
        """Every group committed at ``offset`` on every partition; the groups that failed."""
        body = self._body(offset)
        failed: list[str] = []
        for lane_failed in self._pool.map(lambda lane: self._lane(*lane, body, self._ok), self._lanes):
            failed += lane_failed
        return failed

    def _lane(self, sock: socket.socket, gids: list[str], body: bytes, ok: bytes) -> list[str]:
        failed = []
        reader = sock.makefile("rb")
        for i in range(0, len(gids), PIPELINE):
            batch = gids[i:i + PIPELINE]
            frames = []
            for corr, g in enumerate(batch):
                head = struct.pack(">hhih", API_KEY, VERSION, corr, len(CLIENT_ID)) + CLIENT_ID
                msg = head + self._ids[g] + body
                frames.append(struct.pack(">i", len(msg)) + msg)
            sock.sendall(b"".join(frames))
            for corr, g in enumerate(batch):
                size = struct.unpack(">i", reader.read(4))[0]
                answer = reader.read(size)
                if struct.unpack(">i", answer[:4])[0] != corr:
                    raise RuntimeError(f"OffsetCommit answers out of order on {sock.getpeername()}")
                if answer[4:] != ok and _errors(answer[4:]):
                    failed.append(g)
        return failed

    def _body(self, offset: int) -> bytes:
        """The request body after the group id, the same for every group."""
        t = OffsetCommitRequest.OffsetCommitRequestTopic
        p = t.OffsetCommitRequestPartition
        req = OffsetCommitRequest(
            group_id="", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=[t(name=self.topic, partitions=[
                p(partition_index=i, committed_offset=offset, committed_leader_epoch=-1,
                  committed_metadata=None) for i in range(self.partitions)])])
        return bytes(req.encode(version=VERSION))[2:]  # without the empty group id's length

    def _success(self) -> bytes:
        """The answer's body when every partition is committed and nothing throttled."""
        t = OffsetCommitResponse.OffsetCommitResponseTopic
        p = t.OffsetCommitResponsePartition
        return bytes(OffsetCommitResponse(throttle_time_ms=0, topics=[t(name=self.topic, partitions=[
            p(partition_index=i, error_code=0) for i in range(self.partitions)])]).encode(version=VERSION))


def _errors(body: bytes) -> bool:
    """Does an answer other than the all-success one carry an error?"""
    res = OffsetCommitResponse.decode(body, version=VERSION)
    return any(p.error_code for t in res.topics for p in t.partitions)

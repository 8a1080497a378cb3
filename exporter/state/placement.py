"""Where a group's state lives, and so which replica judges it (Kafka-free: the main
process and the worker both place groups).

A group's ``__consumer_offsets`` partition ``P`` is Kafka's own placement of its
coordinator (``abs(javaHashCode(group id)) mod offsets.topic.num.partitions``; KIP-848's
group coordinator and the classic one share it). Its state record lands in partition
``P mod N`` of the state topic (``N`` its partitions), and with replicas that partition is
the shard whose owner samples, judges and serves the group (docs/design.md#replicas): a
shard is a set of whole coordinator partitions, so each replica's batched OffsetFetch
still goes one request per coordinator.
"""

from __future__ import annotations

from exporter.contracts.worker import Shards


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units, 32-bit signed)."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, offsets_partitions: int) -> int:
    """The group's ``__consumer_offsets`` partition (Kafka's ``Utils.abs``: MIN_VALUE -> 0)."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % offsets_partitions


def state_partition(name: str, offsets_partitions: int, state_partitions: int) -> int:
    return offsets_partition(name, offsets_partitions) % state_partitions


def owns(shards: Shards | None, group: str) -> bool:
    """Does this replica judge ``group``? (No shards: every group is its own.)"""
    if shards is None or shards.refused is not None:
        return True
    if not shards.partitions:  # the state topic not known yet: nothing assigned
        return False
    return shard_of(group, shards.offsets_partitions, shards.partitions) in shards.owned


class ShardOf:
    """``state_partition`` of group ids, remembered (a group's is computed once)."""

    def __init__(self) -> None:
        self._of: dict[str, int] = {}
        self._key = (0, 0)

    def __call__(self, group: str, offsets_partitions: int, state_partitions: int) -> int:
        if self._key != (offsets_partitions, state_partitions):
            self._of, self._key = {}, (offsets_partitions, state_partitions)
        p = self._of.get(group)
        if p is None:
            if len(self._of) > 1_000_000:  # groups come and go: bounded all the same
                self._of.clear()
            p = self._of[group] = state_partition(group, offsets_partitions, state_partitions)
        return p


shard_of = ShardOf()

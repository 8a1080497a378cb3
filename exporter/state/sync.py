"""The runner's side of the state topic (main process, Kafka-free): what to write each
cycle, and the restore before the first judgement after a start.

What is written: a group's record in the cycle its judgement changed (its status, a
partition's status, its state, members or rebalance count: :func:`fingerprint`), in its
first cycle, and every ``state.write_every`` cycles otherwise (staggered by a hash of the
group id, so a cycle rewrites a share of the unchanged groups, not all at once); a deleted group's key a
tombstone. Topic records (offsets and HW history) every ``state.write_every`` cycles. A
group's memory moves every cycle (the clocks of its partitions), but what its next
judgement reads of a state some cycles old is the same: every clock is a time, not a
count, so a restored clock continues from the wall clock (docs/design.md#state).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import zlib
from collections.abc import Iterator

from exporter.config import ClusterConfig
from exporter.contracts.state import SavedGroup, SavedTopic
from exporter.contracts.view import ClusterView, GroupProgress, GroupRebalances, GroupView
from exporter.contracts.worker import Shards, StateLoadReply, StateWriteReply
from exporter.evaluate.evaluator import Evaluator
from exporter.state import codec
from exporter.state.codec import Decoded, DropReason, StateError
from exporter.state.placement import owns, shard_of

log = logging.getLogger("lagwatch.state")

Record = tuple[bytes, bytes | None, str]  # key, value (None: tombstone), the name that places it
LOAD_ATTEMPTS = 3  # cycles that try to read the state topic back before going on without it


def fingerprint(v: GroupView) -> tuple:
    """What, changed, makes a group's record worth writing in its cycle: a counter among
    it (rebalances, records lost) must never be restored below what was served."""
    return fingerprint_of(v, v.progress, v.rebalances)


def fingerprint_of(v: GroupView, progress: GroupProgress | None, rebalances: GroupRebalances | None
                   ) -> tuple:
    """:func:`fingerprint` of a view as the memory keeps it, its figures kept apart."""
    return (v.status, v.state, len(v.members), rebalances.total if rebalances else None,
            progress.records_lost_total if progress else None,
            tuple(v.partitions.status))


class StateSync:
    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self.loaded = False  # the topic was read back (or could not be: nothing to restore)
        self.cluster_id: str | None = None
        self.writable: bool | None = None  # None until the first write
        self.dropped: collections.Counter[str] = collections.Counter({r.value: 0 for r in DropReason})
        self.written = 0  # records written, tombstones included
        self.failed = 0  # records the brokers did not take
        self.restored_groups = 0
        self._groups: dict[str, tuple[tuple, int]] = {}  # group -> (fingerprint, cycle written)
        self._topics: set[str] = set()
        self._topics_at = -1  # the cycle topic records were last written
        self._warned: set[str] = set()
        self._load_failures = 0

    # -- restore ----------------------------------------------------------------------
    def restore(self, ev: Evaluator, reply: StateLoadReply, now: float, shards: Shards | None = None
                ) -> None:
        """Import what the state topic holds of this cluster into the evaluator: at a start,
        or (replicas) for the shards ``shards.restored`` newly assigned to this replica."""
        self.cluster_id = reply.cluster_id or self.cluster_id
        if reply.error is not None:
            self._load_failed(reply.error, shards)
            return
        self.loaded = True
        if ev.last_good is not None:  # a retried read, or shards moved in, after cycles judged
            # without it: the imports fill the last view in place, and the one served must
            # stay as it is
            ev.last_good = dataclasses.replace(ev.last_good, partitions=dict(ev.last_good.partitions),
                                               groups=dict(ev.last_good.groups))
        topics, groups, newest = 0, 0, None
        for d in self._wanted(ev, reply, now, shards):
            try:
                if isinstance(d.state, SavedTopic):
                    ev.import_topic(d.state, d.at)
                    topics += 1
                    self._topics.add(d.name)
                elif isinstance(d.state, SavedGroup):
                    ev.import_group(d.name, d.state)
                    groups += 1
                    self._restored(ev, d, now)
                newest = d.at if newest is None else max(newest, d.at)
            except (ValueError, TypeError, IndexError) as e:  # fits the codec, not the evaluator
                self._drop(DropReason.MALFORMED, f"{d.name}: {e}")
        self.restored_groups += groups
        if groups or topics:
            log.info("cluster %s: restored the judgement of %d group(s) and %d topic(s) from %s%s "
                     "(written up to %.0f s ago)", self.cfg.name, groups, topics, self.cfg.state_topic,
                     "" if shards is None else f" for shard(s) {sorted(shards.restored)}",
                     now - (newest or now))

    def _restored(self, ev: Evaluator, d: Decoded, now: float) -> None:
        """A group read back counts as written when its record is young (under half of
        ``state.max_age``): the first cycle after a restart then writes the groups that
        changed and those whose turn it is, not every group again (encoding a group's
        record costs more CPU than judging it). An old record is written again in that
        cycle, before it ages out of the next restart's reach."""
        rec = ev.groups.get(d.name)
        if rec is None or rec.memory.last_view is None or now - d.at >= self.cfg.state_max_age / 2:
            return
        mem, pm, rm = rec.memory, rec.rates, rec.rebalances
        self._groups[d.name] = (fingerprint_of(mem.last_view, pm.last if pm else None,
                                               rm.last if rm else None), -1)

    def _load_failed(self, error: str, shards: Shards | None) -> None:
        if shards is not None:  # the worker tried LOAD_ATTEMPTS cycles already
            self.loaded = True
            log.warning("cluster %s: cannot read the state topic %s for shard(s) %s, judging their "
                        "groups without it: %s", self.cfg.name, self.cfg.state_topic,
                        sorted(shards.restored), error)
            return
        # Writing before the topic is read would overwrite what is still to be read:
        # the next cycles try again, then go on without it.
        self._load_failures += 1
        self.loaded = self._load_failures >= LOAD_ATTEMPTS
        log.warning("cluster %s: cannot read the state topic %s (attempt %d of %d%s): %s",
                    self.cfg.name, self.cfg.state_topic, self._load_failures, LOAD_ATTEMPTS,
                    ", starting without its state" if self.loaded else "", error)

    def _wanted(self, ev: Evaluator, reply: StateLoadReply, now: float, shards: Shards | None
                ) -> list[Decoded]:
        """The records to import, topics first: every one at a start; with replicas, the
        groups of the shards read back and the topics they read that this replica does not
        know yet (a topic's HW history it keeps itself is newer)."""
        keys = [(key, value, parsed) for key, (value, _ts) in reply.records.items()
                if value is not None and (parsed := codec.parse_key(key, self.cfg.name)) is not None]
        if shards is None:
            got = list(self._decoded(reply.cluster_id, keys, now))
            return sorted(got, key=lambda d: d.kind != codec.TOPIC)
        mine = [k for k in keys if k[2][0] == codec.GROUP
                and shard_of(k[2][1], shards.offsets_partitions, shards.partitions) in shards.restored]
        groups = list(self._decoded(reply.cluster_id, mine, now))
        read = {r[0] for d in groups if isinstance(d.state, SavedGroup) for r in d.state.partitions}
        known = {t for t, _p in ev.hw_history}
        wanted = [k for k in keys if k[2][0] == codec.TOPIC and k[2][1] in read - known]
        return list(self._decoded(reply.cluster_id, wanted, now)) + groups

    def _decoded(self, cluster_id: str | None, keys: list[tuple[bytes, bytes, tuple[str, str]]],
                 now: float) -> Iterator[Decoded]:
        for _key, value, (kind, name) in keys:
            try:
                yield codec.decode(kind, name, value, cluster_id, now, self.cfg.state_max_age)
            except StateError as e:
                self._drop(e.reason, f"{name}: {e}")

    def _drop(self, reason: DropReason, detail: str) -> None:
        self.dropped[reason.value] += 1
        if reason.value not in self._warned:  # one line per reason, the counter has the rest
            self._warned.add(reason.value)
            log.warning("cluster %s: state record(s) dropped from %s (%s; "
                        "lagwatch_state_records_dropped_total counts them): %s",
                        self.cfg.name, self.cfg.state_topic, reason.value, detail)

    # -- write ------------------------------------------------------------------------
    def records(self, ev: Evaluator, view: ClusterView, cycle: int, now: float,
                shards: Shards | None = None, everything: bool = False) -> list[Record]:
        """This cycle's records: changed or due groups (all with ``everything``, and those
        of the shards being revoked), tombstones of deleted ones, topics when due. Nothing
        before the topic was read back (it would overwrite what the restore has still to
        read) or once writing was refused."""
        if not self.loaded or self.writable is False or self.cluster_id is None:
            return []
        every = self.cfg.state_write_every
        out: list[Record] = []
        cid, name = self.cluster_id, self.cfg.name
        live = set(ev.state_groups())
        handed = (lambda g: shard_of(g, shards.offsets_partitions, shards.partitions) in shards.revoking
                  ) if shards is not None and shards.revoking else None
        for gid in live:
            v = view.groups.get(gid)
            fp = fingerprint(v) if v is not None else None
            was = self._groups.get(gid)
            if (was is not None and was[0] == fp and (cycle + zlib.crc32(gid.encode())) % every
                    and not everything and not (handed and handed(gid))):
                continue  # unchanged, and not its turn: each cycle rewrites 1/every of them
            s = ev.export_group(gid)
            if s is not None:
                out.append((codec.key_of(name, codec.GROUP, gid), codec.encode(s, cid, now), gid))
                self._groups[gid] = (fp, cycle)
        for gid in [g for g in self._groups if g not in live]:
            if owns(shards, gid):  # deleted; a group moved to another replica is only forgotten
                out.append((codec.key_of(name, codec.GROUP, gid), None, gid))
            del self._groups[gid]
        if self._topics_at < 0 or cycle - self._topics_at >= every or everything:
            self._topics_at = cycle
            states = ev.export_topics()
            out += [(codec.key_of(name, codec.TOPIC, t.topic), codec.encode(t, cid, now), t.topic)
                    for t in states]
            # With replicas a topic this one does not read any more may be another's: not deleted.
            gone = self._topics - {t.topic for t in states} if shards is None else set()
            out += [(codec.key_of(name, codec.TOPIC, t), None, t) for t in sorted(gone)]
            self._topics = {t.topic for t in states}
        return out

    def wrote(self, reply: StateWriteReply) -> None:
        """A write's outcome: counted; a refusal said once, and writing stops."""
        if reply.cluster_id is not None:
            self.cluster_id = reply.cluster_id
        self.written += reply.written
        self.failed += reply.failed
        if reply.denied is not None:
            self.writable = False
            log.warning("cluster %s: lagwatch may not write its state topic %s, so a restart "
                        "starts every clock again (lagwatch_state_writable 0; docs/security.md "
                        "lists the ACLs): %s", self.cfg.name, self.cfg.state_topic, reply.denied)
            return
        if reply.error is not None:
            self._groups.clear()  # unknown what arrived: everything again next cycle
            self._topics_at = -1
            if "write" not in self._warned:
                self._warned.add("write")
                log.warning("cluster %s: writing the state topic %s failed (retried each cycle): %s",
                            self.cfg.name, self.cfg.state_topic, reply.error)
            return
        self.writable = True

"""One read-only sampling cycle of one cluster -> :class:`Snapshot`.

Every per-cycle request goes through kafka-python's request layer
(exporter/kafka/broker_requests.py), per broker or per coordinator, never per group:
metadata from one broker (every broker when it is slow), ListGroups to every broker (each lists
the groups it coordinates, so the listing says where to ask), then per coordinator one
OffsetFetch v8+ for all its groups (KIP-709), one DescribeGroups for its classic groups
and one Consumer-/Streams-/ShareGroupDescribe and DescribeShareGroupOffsets per type,
and per partition leader one ListOffsets per offset kind. librdkafka's admin client
sends none of them: its admin OffsetFetch dereferences a NULL handle when answered
NOT_COORDINATOR (confluentinc/librdkafka#5040) and its coordinator requests can abort
on a late response (confluentinc/librdkafka#4605). It stays for what only it says well:
why the brokers refuse our credentials, and metadata when kafka-python gets none.
Nothing here joins a group, commits or alters offsets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from functools import partial
from operator import is_, itemgetter
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from kafka.errors import GroupIdNotFoundError

from exporter.config import ClusterConfig
from exporter.contracts.errors import ErrorRecord, ErrorStage
from exporter.contracts.sampling import ListedGroup, SamplerMemory
from exporter.contracts.snapshot import (
    COMMITTING_TYPES,
    TP,
    GroupSample,
    GroupType,
    KafkaGroupState,
    Member,
    PartitionOffsets,
    Snapshot,
)
from exporter.contracts.worker import Shards
from exporter.kafka import tokens
from exporter.kafka.broker_requests import (
    REQUEST_FAILED,
    BrokerRequests,
    Committed,
    DescribedGroup,
    ShareOffsets,
    Unsupported,
)
from exporter.kafka.oauth_props import CONSUMED, token_spec
from exporter.kafka.offset_fetch import keep_keys, key_of
from exporter.kafka.tokens import TokenSource
from exporter.state.placement import owns

_TOPIC = itemgetter(0)  # of a (topic, partition) key
log = logging.getLogger("lagwatch.sampler")
A = TypeVar("A", Committed, DescribedGroup, ShareOffsets)  # a group's answer to one request
# Errors that explain a metadata timeout: librdkafka reports them only through error_cb.
_CREDENTIAL_ERRORS = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL)
CREDENTIAL_GRACE = 1.0  # seconds a metadata request may still answer after a credential error
# The error code with which a coordinator says a group does not exist (deleted), in the
# answer of a KIP-848 / streams / share describe; a classic group is "dead" instead.
GROUP_ID_NOT_FOUND = GroupIdNotFoundError.errno


def cluster_tokens(cfg: ClusterConfig) -> TokenSource | None:
    """The worker's OAUTHBEARER token source of this cluster (exporter/kafka/tokens.py),
    shared by its librdkafka and kafka-python clients; None without OAUTHBEARER."""
    spec = token_spec(cfg.client, cfg.oauthbearer_token_file, cfg.aws_msk_iam)
    return tokens.for_cluster(cfg.name, spec, cfg.request_timeout)


def tokens_ready(cfg: ClusterConfig) -> bool:
    """Can a librdkafka client of this cluster be created now? Not with OAUTHBEARER while
    the token source holds no token: confluent-kafka >= 2.13 would wait 10 s for one, then
    raise."""
    source = cluster_tokens(cfg)
    return source is None or source.error() is None


def client_config(cfg: ClusterConfig, **overrides: Any) -> dict[str, Any]:
    """librdkafka configuration for any client lagwatch creates for this cluster. With a
    token source, librdkafka gets its tokens through ``oauth_cb`` and none of the
    properties the source reads (librdkafka would otherwise fetch tokens of its own)."""
    conf: dict[str, Any] = {
        "bootstrap.servers": cfg.bootstrap_servers,
        "client.id": f"lagwatch-{cfg.name}",
        "logger": logging.getLogger(f"lagwatch.librdkafka.{cfg.name}"),
        "socket.connection.setup.timeout.ms": int(cfg.request_timeout * 1000),
        # A hung broker (SIGSTOP, GC pause) keeps its TCP connection up; without this its
        # requests wait 60 s and metadata keeps being routed to it.
        "socket.timeout.ms": max(100, int(cfg.request_timeout * 1000)),
        "reconnect.backoff.max.ms": 10000,
    }
    conf.update(cfg.client)
    source = cluster_tokens(cfg)
    if source is not None:
        conf = {k: v for k, v in conf.items() if k not in CONSUMED}
        conf["oauth_cb"] = source.oauth_cb
    conf.update(overrides)
    return conf


def _err_text(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args:
        err = e.args[0]
        return getattr(err, "str", lambda: str(err))()
    return str(e) or type(e).__name__


# The group types a listing holds, in the order their describes are sent.
_DESCRIBED_TYPES = (GroupType.CLASSIC, GroupType.CONSUMER, GroupType.STREAMS, GroupType.SHARE)

# Cycles a listed group may be missing from ListGroups before it is taken as gone.
LISTING_GRACE_CYCLES = 3


class Sampler:
    def __init__(self, cfg: ClusterConfig, **offset_fetch_cap: int) -> None:
        self.cfg = cfg
        self._stats_lock = threading.Lock()
        self._stats_tx = 0
        self._credential_error: str | None = None
        self._metadata_call: Future | None = None
        self.tokens = cluster_tokens(cfg)
        self._admin: AdminClient | None = None
        # Kept by the runner in the main process and handed in with each cycle (a worker
        # that crashes forgets nothing); see exporter/contracts/sampling.py.
        self.memory = SamplerMemory()
        # With replicas, this replica's shards (exporter/state/coordination.py): only their
        # groups are read; None: every group.
        self.shards: Shards | None = None
        self._unsupported = ""
        self._new_types: bool | None = None  # streams/share APIs, known at the first listing
        self.broker_requests: BrokerRequests | None
        try:
            self.broker_requests = BrokerRequests(cfg.client, cfg.bootstrap_servers, cfg.request_timeout,
                                        f"lagwatch-{cfg.name}", tokens=self.tokens, **offset_fetch_cap)
        except Unsupported as e:
            log.error("cluster %s: cannot be sampled: unsupported %s", cfg.name, e)
            self._unsupported = str(e)
            self.broker_requests = None

    @property
    def admin(self) -> AdminClient:
        """librdkafka's admin client, created at first use. With OAUTHBEARER that is once
        the token source holds a token (sample() checks first): confluent-kafka >= 2.13
        waits 10 s for a token when the client is created and then raises."""
        if self._admin is None:
            self._admin = AdminClient(client_config(
                self.cfg, **{"statistics.interval.ms": 1000, "stats_cb": self._on_stats,
                             "error_cb": self._on_error}))
        return self._admin

    def _poll_admin(self) -> None:
        """Deliver the admin client's callbacks. Without a token to wait for, the client is
        made here if it is not yet: its error_cb is what names refused credentials."""
        if self._admin is None and self.tokens is None:
            self._admin = self.admin
        if self._admin is not None:
            self._admin.poll(0)

    # librdkafka statistics carry the real number of requests sent per broker.
    def _on_stats(self, raw: str) -> None:
        try:
            stats = json.loads(raw)
            tx = sum(b.get("tx", 0) for b in stats.get("brokers", {}).values())
        except (ValueError, AttributeError):
            return
        with self._stats_lock:
            self._stats_tx = tx

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in _CREDENTIAL_ERRORS:
            self._credential_error = err.str()  # librdkafka's text names the mechanism, not secrets

    def credential_error(self) -> str | None:
        """Why the cluster's OAUTHBEARER token source holds no token, else the brokers' last
        refusal of our credentials or TLS since metadata last worked. Polls the client:
        error_cb (and librdkafka's log lines) are delivered by polling."""
        self._poll_admin()
        if self.tokens is not None and (why := self.tokens.error()) is not None:
            return f"no OAUTHBEARER token: {why}"
        return self._credential_error

    def _metadata(self, timeout: float) -> tuple[Any, str]:
        """(metadata, "") or (None, why not).

        The request runs in a thread while this one polls for error_cb: a credential error
        with still no answer CREDENTIAL_GRACE seconds later ends the wait at once.
        librdkafka keeps retrying a refused connection until the request times out, so
        waiting for the answer alone would report a wrong password only after two
        timeouts."""
        retried = False
        while True:
            call = self._metadata_call
            if call is None or call.done():  # else the last cycle's request is still running
                call = self._metadata_call = self._start_metadata(timeout)
            refused_at: float | None = None
            while not wait_futures([call], timeout=0.1).done:
                if self.credential_error() is not None:
                    refused_at = refused_at or time.monotonic()
                    if time.monotonic() - refused_at >= min(CREDENTIAL_GRACE, timeout):
                        return None, f"cannot connect: {self._credential_error}"
            try:
                return call.result(), ""
            except KafkaException as e:
                # The request may have gone to one hung broker; librdkafka picks another
                # for the retry, so one paused broker does not blind the whole cycle.
                if retried or self.credential_error() is not None:
                    msg = _err_text(e)  # "authentication failed" beats "transport failure":
                    return None, f"{msg} ({self._credential_error})" if self._credential_error else msg
                retried = True

    def _start_metadata(self, timeout: float) -> Future:
        fut: Future = Future()

        def run() -> None:
            try:
                md = self.admin.list_topics(timeout=timeout)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting cycle
                fut.set_exception(e)
            else:
                self._credential_error = None  # a broker answered: the credentials work
                fut.set_result(md)

        threading.Thread(target=run, name=f"metadata-{self.cfg.name}", daemon=True).start()
        return fut

    @property
    def requests_total(self) -> int:
        """Kafka requests sent so far for sampling (kafka-python's, counted as sent, plus
        librdkafka's admin client's statistics)."""
        self._poll_admin()
        with self._stats_lock:
            return self._stats_tx + (self.broker_requests.requests if self.broker_requests else 0)

    def close(self) -> None:
        if self.broker_requests:
            self.broker_requests.close()

    # -- the cycle -----------------------------------------------------------
    def sample(self, spark_topics: Iterable[str] = ()) -> Snapshot:
        t0 = time.monotonic()
        taken_at = time.time()
        errors: list[ErrorRecord] = []

        def failed(stage: ErrorStage, why: str, brokers: int = 0) -> Snapshot:
            return Snapshot(cluster=self.cfg.name, taken_at=taken_at, duration=time.monotonic() - t0,
                            partitions={}, groups={}, errors=(ErrorRecord(stage=stage, message=why),),
                            ok=False, brokers=brokers)

        if self.broker_requests is None:
            return failed(ErrorStage.METADATA, f"unsupported client settings: {self._unsupported}")
        if self.tokens is not None and (why := self.tokens.error()) is not None:
            # no client can log in: say why instead of waiting out connection timeouts
            return failed(ErrorStage.METADATA, f"no OAUTHBEARER token: {why}")
        self.broker_requests.begin_cycle()
        self.broker_requests.coordinators = self.memory.coordinators
        md, refused = self._cluster_metadata()
        if md is None:
            return failed(ErrorStage.METADATA, refused)
        listed, unlisted, empty = self._list_groups(md, errors)
        if listed is None:
            return failed(ErrorStage.LIST_GROUPS, unlisted, len(md.brokers))
        groups = self._drop_gone(self._read_groups(listed, empty, errors), errors)
        topics = self._topics_of(groups, set(spark_topics), md)
        partitions = self._partition_offsets(md, topics, errors)
        # Drop committed offsets of filtered or deleted topics so their series vanish.
        canon: dict[TP, TP] = {tp: tp for tp in partitions}
        groups = {gid: _only_topics(g, topics, canon) for gid, g in groups.items()}
        keep_keys(partitions)
        return Snapshot(cluster=self.cfg.name, taken_at=taken_at, duration=time.monotonic() - t0,
                        partitions=partitions, groups=groups, errors=tuple(errors), ok=True,
                        brokers=len(md.brokers))

    def _cluster_metadata(self) -> tuple[Any, str]:
        """Metadata from one broker (kafka-python asks the others too when it does not
        answer within METADATA_HEDGE). Until kafka-python has connected once, librdkafka
        asks first: it names a credential or TLS refusal within CREDENTIAL_GRACE, where
        kafka-python's bootstrap waits out its whole timeout. librdkafka's answer also
        stands in when no broker answers kafka-python."""
        assert self.broker_requests is not None
        if not self.broker_requests.connected:
            md, refused = self._metadata(self.cfg.request_timeout)
            if md is None:
                return None, refused
            return self._kafka_python_metadata() or md, ""
        md = self._kafka_python_metadata()
        return (md, "") if md is not None else self._metadata(self.cfg.request_timeout)

    def _kafka_python_metadata(self) -> BrokerMetadata | None:
        assert self.broker_requests is not None
        try:
            res = self.broker_requests.metadata()
        except Exception as e:  # noqa: BLE001 - librdkafka's answer stands in
            log.debug("cluster %s: metadata through kafka-python: %s", self.cfg.name, _err_text(e))
            return None
        self._credential_error = None  # a broker answered: the credentials work
        with contextlib.suppress(Exception):  # kafka-python sends to the node ids we saw
            self.broker_requests.learn_brokers(res)
        return BrokerMetadata.of(res)

    def _list_groups(self, md: Any, errors: list[ErrorRecord]
                     ) -> tuple[dict[str, ListedGroup] | None, str, frozenset[str]]:
        """Every group of every broker (ListGroups to each, all types), or None and why; and
        the classic groups this listing says are Empty (ListGroups v4+, KIP-518). The groups
        of a broker that did not answer are kept from the last cycle instead of vanishing."""
        assert self.broker_requests is not None
        try:
            got, failures = self.broker_requests.list_groups(sorted(md.brokers))
        except Exception as e:  # noqa: BLE001 - fall back to the last known list of groups
            got, failures = {}, [_err_text(e)]
        self._forget_others()
        listed = {g: lg for g, lg in got.items() if self.cfg.filters.group_ok(g) and self.judges(g)}
        empty = frozenset(g for g, lg in listed.items()
                          if lg.type == GroupType.CLASSIC and lg.state == KafkaGroupState.EMPTY)
        errors.extend(ErrorRecord(stage=ErrorStage.LIST_GROUPS, message=f) for f in failures)
        if self._new_types is None and not failures:
            self._new_types = self.broker_requests.new_group_types()  # from the version answer: no request
            if not self._new_types:
                log.info("cluster %s: the brokers have no streams or share group APIs (before "
                         "Kafka 4.x); those group types cannot exist there and are not listed",
                         self.cfg.name)
        self.broker_requests.learn_coordinators({g: lg.coordinator for g, lg in listed.items()
                                       if lg.coordinator is not None})
        if failures and not got:
            if not self.memory.last_listed:
                return None, "; ".join(failures), frozenset()
            errors.append(ErrorRecord(stage=ErrorStage.LIST_GROUPS,
                                      message="using the groups known last cycle"))
        if failures:
            listed = {**self.memory.last_listed, **listed}
        listed = self._bridge(self.memory.last_listed, listed)
        self.memory.last_listed = listed
        for gid in [g for g in self.memory.coordinators if g not in listed]:
            del self.memory.coordinators[gid]  # a group gone for good (the map is shared)
        return listed, "", empty

    def judges(self, group: str) -> bool:
        """Is ``group`` this replica's to read? Not lagwatch's own coordination group; with
        replicas, only the groups of its shards."""
        if self.cfg.state_replicas and group == self.cfg.coordination_group:
            return False
        return owns(self.shards, group)

    def _forget_others(self) -> None:
        """The groups of shards this replica does not own any more leave its listing memory at
        once (no listing grace: another replica reads them now)."""
        if self.shards is None:
            return
        for gid in [g for g in self.memory.last_listed if not self.judges(g)]:
            del self.memory.last_listed[gid]
            self.memory.absent.pop(gid, None)

    def _topics_of(self, groups: dict[str, GroupSample], spark_topics: set[str], md: Any) -> set[str]:
        topics = {t for g in groups.values() for m in g.members for (t, _) in m.assignment}
        # A group that could not be read this cycle (its coordinator is down) keeps its
        # topics sampled: the partitions' offsets must not vanish with it.
        for gid, g in groups.items():
            committed = set(map(_TOPIC, g.committed))
            topics |= committed
            if g.error is not None:
                topics |= self.memory.group_topics.get(gid, set())
            else:
                self.memory.group_topics[gid] = committed
                self.memory.weight[gid] = len(g.committed) + len(committed) + 1
        for gid in [gid for gid in self.memory.group_topics if gid not in groups]:
            del self.memory.group_topics[gid]
            self.memory.weight.pop(gid, None)
        topics |= spark_topics
        return {t for t in topics if self.cfg.filters.topic_ok(t) and t in md.topics}

    def _drop_gone(self, groups: dict[str, GroupSample], errors: list[ErrorRecord]
                   ) -> dict[str, GroupSample]:
        """Bridged groups that the coordinator says do not exist go at once (deleted)."""
        not_found = {e.group for e in errors if e.code == GROUP_ID_NOT_FOUND}
        gone = {gid for gid in self.memory.absent if gid in groups and (
            groups[gid].state == KafkaGroupState.DEAD or gid in not_found)}
        for gid in gone:
            del groups[gid]
            del self.memory.absent[gid]
        if gone:
            errors[:] = [e for e in errors if e.group not in gone]
        return groups

    def _bridge(self, last: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
        """``now`` plus the groups of ``last`` missing from it for fewer than
        LISTING_GRACE_CYCLES cycles in a row. A broker that restarts, or a coordinator that
        fails over, answers ListGroups without the groups it is still loading (and without
        an error): they would vanish for a cycle or two, their memory with them. A group
        really deleted is kept that long and then goes; its describe says it is dead."""
        out = dict(now)
        for gid in now:
            self.memory.absent.pop(gid, None)
        for gid, lg in last.items():
            if gid not in now:
                missing = self.memory.absent.get(gid, 0) + 1
                if missing < LISTING_GRACE_CYCLES:
                    self.memory.absent[gid] = missing
                    out[gid] = lg
                else:
                    self.memory.absent.pop(gid, None)
        return out

    def _batched(self, stage: ErrorStage, errors: list[ErrorRecord],
                 call: Callable[[list[str]], dict[str, A]], group_ids: list[str],
                 failed: Callable[[str, str], A]) -> dict[str, A]:
        """One of BrokerRequests' batched calls; a failure of the whole call is one error of
        ``stage``, and each of its groups gets the answer of a failed request (``failed``:
        the same shape as its answer, error code REQUEST_FAILED)."""
        if self.broker_requests is None or not group_ids:
            return {}
        try:
            got = call(group_ids)
        except Exception as e:  # noqa: BLE001 - isolated to these groups
            errors.append(ErrorRecord(stage=stage, message=_err_text(e)))
            return {g: failed(g, _err_text(e)) for g in group_ids}
        finally:
            errors.extend(ErrorRecord(stage=stage, message=f) for f in self.broker_requests.take_failures())
        return got

    def _read_groups(self, listed: dict[str, ListedGroup], empty: frozenset[str], errors: list[ErrorRecord]
                     ) -> dict[str, GroupSample]:
        """Each group described and its offsets read. A classic group this cycle's listing
        saw Empty has no member to describe: its describe would say what the listing did, so
        none is sent for it (most groups of a large cluster, idle or committing from outside
        group membership); a group bridged from an earlier listing is described (a deleted
        one answers GROUP_ID_NOT_FOUND, :meth:`_drop_gone`)."""
        x = self.broker_requests
        assert x is not None
        by_type: dict[GroupType, list[str]] = {t: [] for t in _DESCRIBED_TYPES}
        for gid in sorted(listed):
            by_type[listed[gid].type].append(gid)
        describe = {t: x.describe_classic if t == GroupType.CLASSIC else partial(x.describe, t)
                    for t in _DESCRIBED_TYPES}
        asked = {kind: [g for g in gids if g not in empty] for kind, gids in by_type.items()}
        described = {kind: self._batched(ErrorStage.DESCRIBE_GROUP, errors, call, asked[kind],
                                         DescribedGroup.failed)
                     for kind, call in describe.items()}
        described[GroupType.CLASSIC].update((gid, _listed_empty(listed[gid])) for gid in empty)
        # Streams groups commit offsets like consumer groups: OffsetFetch reads them.
        committing = [gid for t in _DESCRIBED_TYPES if t in COMMITTING_TYPES for gid in by_type[t]]
        offs = self._batched(ErrorStage.OFFSET_FETCH, errors,
                             partial(x.offset_fetch, weight=self.memory.weight), committing,
                             Committed.failed)
        share_offs = self._batched(ErrorStage.OFFSET_FETCH, errors, x.share_offsets,
                                   by_type[GroupType.SHARE], ShareOffsets.failed)
        out: dict[str, GroupSample] = {}
        for kind in (GroupType.CLASSIC, GroupType.CONSUMER, GroupType.STREAMS):
            for gid in by_type[kind]:
                out[gid] = _described(gid, kind, listed[gid], described[kind].get(gid),
                                      offs.get(gid), errors)
        for gid in by_type[GroupType.SHARE]:
            out[gid] = _share(gid, described[GroupType.SHARE].get(gid), share_offs.get(gid), errors)
        return out

    def _partition_offsets(self, md: Any, topics: set[str], errors: list[ErrorRecord]
                           ) -> dict[TP, PartitionOffsets]:
        """Per leader one ListOffsets per offset kind, for all its partitions."""
        assert self.broker_requests is not None
        meta: dict[TP, Any] = {key_of((t, p)): pm for t in topics
                               for p, pm in md.topics[t].partitions.items()}
        by_leader: dict[int, list[TP]] = {}
        leaderless = 0
        for tp, pm in meta.items():
            if pm.leader >= 0 and pm.leader in md.brokers:
                by_leader.setdefault(pm.leader, []).append(tp)
            else:
                leaderless += 1
        if leaderless:  # offline (its replicas down) or electing: nothing to ask, unknown
            errors.append(ErrorRecord(stage=ErrorStage.LIST_OFFSETS, message=(
                f"{leaderless} partition{'s' * (leaderless > 1)} without a leader")))
        values: dict[str, dict[TP, int]] = {}
        for name, kwargs in _OFFSET_KINDS:
            try:
                got, failures = self.broker_requests.list_offsets(by_leader, **kwargs)
            except Exception as e:  # noqa: BLE001 - the values stay unknown this cycle
                got, failures = {}, [_err_text(e)]
            if failures:
                errors.append(ErrorRecord(stage=ErrorStage.LEO if name == "leo" else ErrorStage.LIST_OFFSETS,
                                          message=f"{name}: {'; '.join(failures)}"))
            values[name] = got
        return {tp: PartitionOffsets(
            leader=pm.leader, replicas=len(pm.replicas), isr=len(pm.isrs),
            log_start=values["log_start"].get(tp), hw=values["hw"].get(tp),
            lso=values["lso"].get(tp), leo=values["leo"].get(tp)) for tp, pm in meta.items()}


# ListOffsets per offset kind (KIP-79 timestamps -2 earliest / -1 latest; replica_id -2,
# DEBUGGING_REPLICA_ID in exporter/kafka/broker_requests.py, answers with the leader's log
# end offset).
_OFFSET_KINDS: tuple[tuple[str, dict[str, int]], ...] = (
    ("log_start", {"timestamp": -2}),
    ("hw", {"timestamp": -1}),
    ("lso", {"timestamp": -1, "isolation_level": 1}),
    ("leo", {"timestamp": -1, "replica_id": -2}),
)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    leader: int
    replicas: tuple[int, ...]
    isrs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    partitions: dict[int, PartitionMetadata]


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """A MetadataResponse in the shape of librdkafka's ClusterMetadata (brokers by id,
    topics by name, partitions by index), which the librdkafka fallback returns."""

    brokers: dict[int, str]
    topics: dict[str, TopicMetadata]

    @classmethod
    def of(cls, res: Any) -> BrokerMetadata:
        return cls(brokers={b.node_id: f"{b.host}:{b.port}" for b in res.brokers},
                   topics={t.name: TopicMetadata(partitions={
                       p.partition_index: PartitionMetadata(p.leader_id, tuple(p.replica_nodes),
                                                        tuple(p.isr_nodes)) for p in t.partitions})
                           for t in res.topics if t.name})


def _only_topics(g: GroupSample, topics: set[str], canon: dict[TP, TP]) -> GroupSample:
    """The group's offsets of the topics watched, each keyed by the snapshot's own
    (topic, partition) tuple: a key shared by every group pickles once and is one object in
    the main process. OffsetFetch v8-v9 answers are keyed so already
    (:func:`~exporter.kafka.offset_fetch.key_of`): such a group, of watched topics only, is
    kept as it is; other answers carry their own copies, 100k of them in a large cluster."""
    if all(map(is_, map(canon.get, g.committed), g.committed)) and all(
            map(is_, map(canon.get, g.reported_lag), g.reported_lag)):
        return g
    return dataclasses.replace(
        g, committed={canon.get(tp, tp): o for tp, o in g.committed.items() if tp[0] in topics},
        reported_lag={canon.get(tp, tp): o for tp, o in g.reported_lag.items() if tp[0] in topics})


def _listed_empty(lg: ListedGroup) -> DescribedGroup:
    """A classic group the listing saw Empty, as its describe would answer: no members."""
    return DescribedGroup(group_id=lg.group_id, state=KafkaGroupState.EMPTY, group_epoch=-1,
                          coordinator=lg.coordinator, members=(), protocol_type=lg.protocol_type)


def _committed(gid: str, offs: Committed | None, errors: list[ErrorRecord]
               ) -> tuple[dict[TP, int], str | None]:
    if offs is None:
        return {}, "offset fetch: no answer"
    if offs.error is not None:
        if offs.error_code != REQUEST_FAILED:  # a failed request was counted once
            errors.append(_group_error(ErrorStage.OFFSET_FETCH, gid, offs))
        return {}, f"offset fetch: {offs.error}"
    return offs.offsets, None


def _group_error(stage: ErrorStage, gid: str, answer: Committed | DescribedGroup | ShareOffsets
                 ) -> ErrorRecord:
    """A group's own error in a broker's answer, with its Kafka error code."""
    return ErrorRecord(stage=stage, group=gid, message=f"{gid}: {answer.error}", code=answer.error_code)


def _described(gid: str, gtype: GroupType, lst: ListedGroup, d: DescribedGroup | None,
               offs: Committed | None, errors: list[ErrorRecord]) -> GroupSample:
    """A classic, KIP-848 consumer or streams group: its describe plus its committed offsets;
    either failing is the group's error, and what the other read is kept."""
    committed, offs_error = _committed(gid, offs, errors)
    error = _described_error(gid, d, errors)
    if offs_error:
        error = f"{error}; {offs_error}" if error else offs_error
    if d is None or d.error is not None:
        state = lst.state if gtype != GroupType.CLASSIC else KafkaGroupState.UNKNOWN
        return GroupSample(group_id=gid, type=gtype, state=state, committed=committed, error=error)
    g = GroupSample(group_id=gid, type=gtype, state=d.state, members=_members(d),
                    coordinator=d.coordinator, committed=committed, error=error,
                    epoch=None if gtype == GroupType.CLASSIC else d.group_epoch)
    if gtype == GroupType.CLASSIC and any(m.subscribed for m in g.members) and not _left_a_topic(g):
        # The members' subscriptions change a judgement only for a group that left a topic
        # (_left_a_topic); elsewhere a classic group's subscriptions are left unknown.
        g = dataclasses.replace(g, members=tuple(dataclasses.replace(m, subscribed=())
                                                 for m in g.members))
    return g


def _described_error(gid: str, d: DescribedGroup | None,
                     errors: list[ErrorRecord]) -> str | None:
    """The describe's error for this group, counted once (a failed batch was counted)."""
    if d is None:
        return "describe: no answer"
    if d.error is not None:
        if d.error_code != REQUEST_FAILED:  # a failed request was counted once
            errors.append(_group_error(ErrorStage.DESCRIBE_GROUP, gid, d))
        return f"describe: {d.error}"
    return None


def _left_a_topic(g: GroupSample) -> bool:
    """A stable classic group whose members own partitions, with committed offsets on a
    topic of which no member owns a partition."""
    if (g.type != GroupType.CLASSIC or g.state != KafkaGroupState.STABLE or g.error is not None
            or not g.members):
        return False
    held = {t for m in g.members for t, _ in m.assignment}
    return bool(held) and any(t not in held for t, _ in g.committed)


def _members(d: DescribedGroup) -> tuple[Member, ...]:
    return tuple(Member(member_id=m.member_id, client_id=m.client_id, host=m.host,
                        instance_id=m.instance_id, assignment=m.assignment,
                        epoch=m.member_epoch if m.member_epoch >= 0 else None,
                        process_id=m.process_id, target=m.target, subscribed=m.subscribed)
                 for m in d.members)


def _share(gid: str, d: DescribedGroup | None, offs: ShareOffsets | None,
           errors: list[ErrorRecord]) -> GroupSample:
    """A share group: its start offsets stand where a consumer group's committed offsets do."""
    error = _described_error(gid, d, errors)
    if offs is not None and offs.error is not None and offs.error_code != REQUEST_FAILED:
        errors.append(_group_error(ErrorStage.OFFSET_FETCH, gid, offs))
    offs_error = f"offset fetch: {offs.error}" if offs is not None and offs.error else None
    if offs_error:
        error = f"{error}; {offs_error}" if error else offs_error
    start = offs.start if offs is not None else {}
    lag = offs.lag if offs is not None else {}
    if d is None or d.error is not None:
        return GroupSample(group_id=gid, type=GroupType.SHARE, state=KafkaGroupState.UNKNOWN, committed=start,
                           reported_lag=lag, error=error)
    return GroupSample(group_id=gid, type=GroupType.SHARE, state=d.state, members=_members(d),
                       coordinator=d.coordinator, committed=start, reported_lag=lag,
                       epoch=d.group_epoch, error=error)

"""One read-only sampling cycle of one cluster -> :class:`Snapshot`.

Everything goes through confluent-kafka's AdminClient except what librdkafka
cannot send (exporter/kafka/broker_requests.py): the log end offset, and the listing and
description of Kafka Streams (KIP-1071) and share (KIP-932) groups, and the
epochs of KIP-848 groups. Per-group requests are issued all at once (futures),
which measured fast enough that KIP-709 batching is not needed (docs/design.md,
benchmark). Nothing here joins a group, commits or alters offsets.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

from confluent_kafka import (
    OFFSET_INVALID,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from exporter.config import ClusterConfig
from exporter.contracts.snapshot import TP, GroupSample, Member, PartitionOffsets, Snapshot
from exporter.kafka.broker_requests import (
    BrokerRequests,
    DescribedGroup,
    ListedGroup,
    ShareOffsets,
    Unsupported,
)

log = logging.getLogger("lagwatch.sampler")
# Errors that explain a metadata timeout: librdkafka reports them only through error_cb.
_CREDENTIAL_ERRORS = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL)
CREDENTIAL_GRACE = 1.0  # seconds a metadata request may still answer after a credential error


def client_config(cfg: ClusterConfig, **extra: Any) -> dict[str, Any]:
    """librdkafka configuration for any client lagwatch creates for this cluster."""
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
    conf.update(extra)
    return conf


def _err_text(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args:
        err = e.args[0]
        return getattr(err, "str", lambda: str(err))()
    return str(e) or type(e).__name__


def _enum_name(v: Any) -> str:
    name = getattr(v, "name", None) or str(v)
    return name.lower()


_STATE_NAMES = {"preparing_rebalancing": "preparing_rebalance",
                "completing_rebalancing": "completing_rebalance"}


# Cycles a listed group may be missing from ListGroups before it is taken as gone.
LISTING_GRACE_CYCLES = 3


class Sampler:
    def __init__(self, cfg: ClusterConfig) -> None:
        self.cfg = cfg
        self._stats_lock = threading.Lock()
        self._stats_tx = 0
        self._credential_error: str | None = None
        self._metadata_call: Future | None = None
        self.admin = AdminClient(client_config(
            cfg, **{"statistics.interval.ms": 1000, "stats_cb": self._on_stats,
                    "error_cb": self._on_error}))
        self._last_listed: dict[str, Any] = {}
        self._last_listed_new: dict[str, ListedGroup] = {}
        self._absent: dict[str, int] = {}  # listed groups missing from the last listings
        self._group_topics: dict[str, set[str]] = {}
        self.extra: BrokerRequests | None
        try:
            self.extra = BrokerRequests(cfg.client, cfg.bootstrap_servers, cfg.request_timeout,
                                        f"lagwatch-{cfg.name}")
        except Unsupported as e:
            log.warning("cluster %s: log end offsets, streams and share groups and KIP-848 epochs "
                        "disabled: unsupported %s", cfg.name, e)
            self.extra = None
        self._new_types: bool | None = None  # streams/share APIs, known at the first answer

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
        """The brokers' last refusal of our credentials or TLS since metadata last worked.
        Polls the client: error_cb (and librdkafka's log lines) are delivered by polling."""
        self.admin.poll(0)
        return self._credential_error

    def _metadata(self, timeout: float) -> tuple[Any, str]:
        """(metadata, "") or (None, why not).

        librdkafka keeps retrying a refused connection until the request times out, so
        a wrong password used to be reported after two timeouts. The request runs in a
        thread while this one polls for error_cb: a credential error with still no
        answer CREDENTIAL_GRACE seconds later ends the wait at once."""
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
        """Kafka requests sent so far (librdkafka's counters plus the LEO client's)."""
        self.admin.poll(0)
        with self._stats_lock:
            return self._stats_tx + (self.extra.requests if self.extra else 0)

    def close(self) -> None:
        if self.extra:
            self.extra.close()

    # -- the cycle -----------------------------------------------------------
    def sample(self, extra_topics: Iterable[str] = ()) -> Snapshot:
        t0 = time.monotonic()
        taken_at = time.time()
        errors: list[tuple[str, str]] = []
        timeout = self.cfg.request_timeout
        md, refused = self._metadata(timeout)
        if md is None:
            return Snapshot(cluster=self.cfg.name, taken_at=taken_at, duration=time.monotonic() - t0,
                            partitions={}, groups={}, errors=(("metadata", refused),), ok=False)
        flt = self.cfg.filters
        try:
            listing = self.admin.list_consumer_groups(request_timeout=timeout).result()
            errors.extend(("list_groups", _err_text(e)) for e in listing.errors)
            listed = {g.group_id: g for g in listing.valid if flt.group_ok(g.group_id)}
            if listing.errors and self._last_listed:
                # ListGroups goes to every broker: groups of a broker that did not answer
                # are kept from the last cycle instead of vanishing.
                listed = {**self._last_listed, **listed}
            listed = self._bridge(self._last_listed, listed)
            self._last_listed = listed
        except Exception as e:  # noqa: BLE001 - fall back to the last known list of groups
            if not self._last_listed:
                return Snapshot(cluster=self.cfg.name, taken_at=taken_at,
                                duration=time.monotonic() - t0, partitions={}, groups={},
                                errors=(("list_groups", _err_text(e)),), ok=False,
                                brokers=len(md.brokers))
            errors.append(("list_groups", f"{_err_text(e)} (using the groups known last cycle)"))
            listed = self._last_listed
        groups = self._describe_and_fetch(listed, self._list_streams_and_share(md, errors), errors)
        groups = self._drop_gone(groups, errors)

        topics = {t for g in groups.values() for (t, _) in g.committed}
        topics |= {t for g in groups.values() for m in g.members for (t, _) in m.assignment}
        # A group that could not be read this cycle (its coordinator is down) keeps its
        # topics sampled: the partitions' offsets must not vanish with it.
        for gid, g in groups.items():
            if g.error is not None:
                topics |= self._group_topics.get(gid, set())
            else:
                self._group_topics[gid] = {t for (t, _) in g.committed}
        for gid in [gid for gid in self._group_topics if gid not in groups]:
            del self._group_topics[gid]
        topics |= set(extra_topics)
        topics = {t for t in topics if flt.topic_ok(t) and t in md.topics}
        partitions = self._partition_offsets(md, topics, errors)
        # Drop committed offsets of filtered or deleted topics so their series vanish.
        groups = {gid: _only_topics(g, topics) for gid, g in groups.items()}
        return Snapshot(cluster=self.cfg.name, taken_at=taken_at, duration=time.monotonic() - t0,
                        partitions=partitions, groups=groups, errors=tuple(errors), ok=True,
                        brokers=len(md.brokers))

    def _list_streams_and_share(self, md: Any, errors: list[tuple[str, str]]
                                ) -> dict[str, ListedGroup]:
        """Streams and share groups (ListGroups v5), which list_consumer_groups leaves out.
        On brokers without those APIs (Kafka 3.x) one line at start, no error per cycle."""
        if self.extra is None:
            return {}
        try:
            if self._new_types is None:
                self._new_types = self.extra.new_group_types()
                if not self._new_types:
                    log.info("cluster %s: the brokers have no streams or share group APIs (before "
                             "Kafka 4.x); those group types cannot exist there and are not listed",
                             self.cfg.name)
            if not self._new_types:
                return {}
            got, failures = self.extra.list_groups(md.brokers)
        except Exception as e:  # noqa: BLE001 - keep the groups known last cycle
            got, failures = {}, [_err_text(e)]
        errors.extend(("list_groups", f"streams/share groups: {f}") for f in failures)
        got = {g: lg for g, lg in got.items() if self.cfg.filters.group_ok(g)}
        if failures:
            got = {**self._last_listed_new, **got}
        got = self._bridge(self._last_listed_new, got)
        self._last_listed_new = got
        return got

    def _drop_gone(self, groups: dict[str, GroupSample], errors: list[tuple[str, str]]
                   ) -> dict[str, GroupSample]:
        """Bridged groups that the coordinator says no longer exist go at once (deleted)."""
        gone = {gid for gid in self._absent if gid in groups and (
            groups[gid].state == "dead" or any(
                code in (groups[gid].error or "") for code in ("GroupIdNotFound", "GROUP_ID_NOT_FOUND")))}
        for gid in gone:
            del groups[gid]
            del self._absent[gid]
        if gone:
            errors[:] = [e for e in errors if e[1].split(":", 1)[0] not in gone]
        return groups

    def _bridge(self, last: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
        """``now`` plus the groups of ``last`` missing from it for fewer than
        LISTING_GRACE_CYCLES cycles in a row. A broker that restarts, or a coordinator that
        fails over, answers ListGroups without the groups it is still loading (and without
        an error): they would vanish for a cycle or two, their memory with them. A group
        really deleted is kept that long and then goes; its describe says it is dead."""
        out = dict(now)
        for gid in now:
            self._absent.pop(gid, None)
        for gid, lg in last.items():
            if gid not in now:
                missing = self._absent.get(gid, 0) + 1
                if missing < LISTING_GRACE_CYCLES:
                    self._absent[gid] = missing
                    out[gid] = lg
                else:
                    self._absent.pop(gid, None)
        return out

    def _extra(self, stage: str, errors: list[tuple[str, str]], call: Any, *args: Any) -> dict:
        """One of exporter/kafka/broker_requests.py's batched calls; a failure of the whole call is one
        error of ``stage`` and leaves every group of it with that error."""
        if self.extra is None or not args[-1]:
            return {}
        try:
            return call(*args)
        except Exception as e:  # noqa: BLE001 - isolated to these groups
            errors.append((stage, _err_text(e)))
            return {g: e for g in args[-1]}

    def _describe_and_fetch(self, listed: dict[str, Any], new: dict[str, ListedGroup],
                            errors: list[tuple[str, str]]) -> dict[str, GroupSample]:
        timeout = self.cfg.request_timeout
        ids = sorted(g for g in listed if g not in new)
        streams_ids = sorted(g for g, lg in new.items() if lg.type == "streams")
        share_ids = sorted(g for g, lg in new.items() if lg.type == "share")
        kip848_ids = [g for g in ids if _enum_name(getattr(listed[g], "type", "")) == "consumer"]
        desc_f: dict[str, Future] = (
            self.admin.describe_consumer_groups(ids, request_timeout=timeout) if ids else {})
        # Streams groups commit offsets like consumer groups: OffsetFetch reads them.
        off_f = {g: self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(g)], request_timeout=timeout)[g] for g in ids + streams_ids}
        # While librdkafka works in its threads: the requests it cannot send.
        x = self.extra
        epochs = self._extra("describe_group", errors, x and x.describe, "consumer", kip848_ids)
        streams = self._extra("describe_group", errors, x and x.describe, "streams", streams_ids)
        shares = self._extra("describe_group", errors, x and x.describe, "share", share_ids)
        share_offs = self._extra("offset_fetch", errors, x and x.share_offsets, share_ids)
        wait_futures([*desc_f.values(), *off_f.values()], timeout=timeout * 3)
        out: dict[str, GroupSample] = {}
        for gid in ids:
            g = self._classic_or_consumer(gid, listed[gid], desc_f.pop(gid), off_f.pop(gid), errors)
            d = epochs.get(gid)
            if isinstance(d, DescribedGroup) and d.error is None and g.error is None:
                g = _with_epochs(g, d)  # KIP-848 epochs; the rest of the group stays as read
            out[gid] = g
        self._add_subscriptions(out, errors)
        for gid in streams_ids:
            out[gid] = self._streams(gid, streams.get(gid), off_f.pop(gid), errors)
        for gid in share_ids:
            out[gid] = _share(gid, shares.get(gid), share_offs.get(gid), errors)
        return out

    def _add_subscriptions(self, groups: dict[str, GroupSample], errors: list[tuple[str, str]]) -> None:
        """The members' subscriptions of the stable classic groups holding committed offsets
        on a topic of which no member owns a partition (:func:`_left_a_topic`): only there
        does the answer change a judgement, so only they cost a DescribeGroups."""
        ids = sorted(gid for gid, g in groups.items() if _left_a_topic(g))
        x = self.extra
        subs = self._extra("describe_group", errors, x and x.classic_subscriptions, ids)
        for gid in ids:
            of = subs.get(gid)
            if isinstance(of, dict):
                g = groups[gid]
                groups[gid] = dataclasses.replace(g, members=tuple(
                    dataclasses.replace(m, subscribed=of.get(m.member_id, ())) for m in g.members))

    def _classic_or_consumer(self, gid: str, lst: Any, desc: Future, offs: Future,
                             errors: list[tuple[str, str]]) -> GroupSample:
        state = _enum_name(getattr(lst, "state", "unknown"))
        gtype = _enum_name(getattr(lst, "type", "classic"))
        members: tuple[Member, ...] = ()
        coordinator = None
        error = None
        try:
            d = desc.result(0)
            state = _enum_name(d.state)
            gtype = _enum_name(getattr(d, "type", gtype))
            coordinator = d.coordinator.id if d.coordinator is not None else None
            members = tuple(
                Member(member_id=m.member_id, client_id=m.client_id or "", host=m.host or "",
                       instance_id=m.group_instance_id,
                       assignment=tuple((tp.topic, tp.partition)
                                        for tp in (m.assignment.topic_partitions if m.assignment else [])))
                for m in d.members)
        except Exception as e:  # noqa: BLE001 - isolated to this group
            error = f"describe: {_err_text(e)}"
            errors.append(("describe_group", f"{gid}: {_err_text(e)}"))
        committed, offs_error = _committed(gid, offs, errors)
        if offs_error:
            error = f"{error}; {offs_error}" if error else offs_error
        state = _STATE_NAMES.get(state, state)
        gtype = gtype if gtype in ("classic", "consumer") else "classic"
        return GroupSample(group_id=gid, type=gtype, state=state, members=members,
                           coordinator=coordinator, committed=committed, error=error)

    def _streams(self, gid: str, d: DescribedGroup | Exception | None, offs: Future,
                 errors: list[tuple[str, str]]) -> GroupSample:
        committed, offs_error = _committed(gid, offs, errors)
        error = _described_error(gid, d, errors)
        if offs_error:
            error = f"{error}; {offs_error}" if error else offs_error
        if not isinstance(d, DescribedGroup) or d.error is not None:
            return GroupSample(group_id=gid, type="streams", state="unknown", committed=committed,
                               error=error)
        return GroupSample(group_id=gid, type="streams", state=d.state, members=_members(d),
                           coordinator=d.coordinator, committed=committed, epoch=d.group_epoch,
                           error=error)

    def _partition_offsets(self, md: Any, topics: set[str], errors: list[tuple[str, str]]
                           ) -> dict[TP, PartitionOffsets]:
        timeout = self.cfg.request_timeout
        meta: dict[TP, Any] = {}
        for t in topics:
            for p, pm in md.topics[t].partitions.items():
                meta[(t, p)] = pm
        if not meta:
            return {}
        specs = (("log_start", OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED),
                 ("hw", OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED),
                 ("lso", OffsetSpec.latest(), IsolationLevel.READ_COMMITTED))
        futs = {}
        for name, spec, iso in specs:
            req = {TopicPartition(t, p): spec for (t, p) in meta}
            futs[name] = self.admin.list_offsets(req, isolation_level=iso, request_timeout=timeout)
        leo, leo_err = self._leo(md, meta)
        if leo_err:
            errors.append(("leo", leo_err))
        wait_futures([f for d in futs.values() for f in d.values()], timeout=timeout * 2)
        values: dict[str, dict[TP, int]] = {}
        for name, fs in futs.items():
            got: dict[TP, int] = {}
            failed = 0
            for tp, f in fs.items():
                try:
                    got[(tp.topic, tp.partition)] = f.result(0).offset
                except Exception as e:  # noqa: BLE001 - the partition's value stays unknown
                    failed += 1
                    last = _err_text(e)
            if failed:
                errors.append(("list_offsets", f"{name}: {failed} partition(s) failed: {last}"))
            values[name] = got
        out = {}
        for tp, pm in meta.items():
            out[tp] = PartitionOffsets(
                leader=pm.leader, replicas=len(pm.replicas), isr=len(pm.isrs),
                log_start=_valid(values["log_start"].get(tp)), hw=_valid(values["hw"].get(tp)),
                lso=_valid(values["lso"].get(tp)), leo=_valid(leo.get(tp)))
        return out

    def _leo(self, md: Any, meta: dict[TP, Any]) -> tuple[dict[TP, int], str | None]:
        if self.extra is None:
            return {}, None
        by_leader: dict[int, list[TP]] = {}
        for tp, pm in meta.items():
            if pm.leader >= 0 and pm.leader in md.brokers:
                by_leader.setdefault(pm.leader, []).append(tp)
        try:
            out, failures = self.extra.log_end_offsets(by_leader)
        except Exception as e:  # noqa: BLE001 - the LEO stays unknown this cycle
            return {}, _err_text(e)
        return out, "; ".join(failures) or None


def _valid(v: int | None) -> int | None:
    return v if v is not None and v >= 0 else None


def _only_topics(g: GroupSample, topics: set[str]) -> GroupSample:
    if all(t in topics for (t, _) in g.committed):
        return g
    return dataclasses.replace(
        g, committed={tp: o for tp, o in g.committed.items() if tp[0] in topics},
        reported_lag={tp: o for tp, o in g.reported_lag.items() if tp[0] in topics})


def _committed(gid: str, offs: Future, errors: list[tuple[str, str]]) -> tuple[dict[TP, int], str | None]:
    try:
        res = offs.result(0)
    except Exception as e:  # noqa: BLE001 - isolated to this group
        errors.append(("offset_fetch", f"{gid}: {_err_text(e)}"))
        return {}, f"offset fetch: {_err_text(e)}"
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions
            if tp.error is None and tp.offset >= 0 and tp.offset != OFFSET_INVALID}, None


def _described_error(gid: str, d: DescribedGroup | Exception | None,
                     errors: list[tuple[str, str]]) -> str | None:
    """The describe's error for this group, counted once (a failed batch was counted)."""
    if isinstance(d, Exception):
        return f"describe: {_err_text(d)}"
    if d is None:
        return "describe: no answer"
    if d.error is not None:
        errors.append(("describe_group", f"{gid}: {d.error}"))
        return f"describe: {d.error}"
    return None


def _left_a_topic(g: GroupSample) -> bool:
    """A stable classic group whose members own partitions, with committed offsets on a
    topic of which no member owns a partition."""
    if g.type != "classic" or g.state != "stable" or g.error is not None or not g.members:
        return False
    held = {t for m in g.members for t, _ in m.assignment}
    return bool(held) and any(t not in held for t, _ in g.committed)


def _members(d: DescribedGroup) -> tuple[Member, ...]:
    return tuple(Member(member_id=m.member_id, client_id=m.client_id, host=m.host,
                        instance_id=m.instance_id, assignment=m.assignment, epoch=m.member_epoch,
                        process_id=m.process_id, target=m.target, subscribed=m.subscribed)
                 for m in d.members)


def _with_epochs(g: GroupSample, d: DescribedGroup) -> GroupSample:
    """A KIP-848 group as librdkafka described it, plus what only ConsumerGroupDescribe
    returns: the group and member epochs, the members' target assignments and subscribed
    topic names, and the state
    by its KIP-848 name (librdkafka calls ``assigning`` and ``reconciling`` unknown)."""
    of = {m.member_id: m for m in d.members}
    state = d.state if g.state == "unknown" else g.state
    return dataclasses.replace(g, epoch=d.group_epoch, state=state, members=tuple(
        dataclasses.replace(m, epoch=of[m.member_id].member_epoch, target=of[m.member_id].target,
                            subscribed=of[m.member_id].subscribed)
        if m.member_id in of else m for m in g.members))


def _share(gid: str, d: DescribedGroup | Exception | None, offs: ShareOffsets | Exception | None,
           errors: list[tuple[str, str]]) -> GroupSample:
    """A share group: its start offsets stand where a consumer group's committed offsets do."""
    error = _described_error(gid, d, errors)
    if isinstance(offs, ShareOffsets) and offs.error is not None:
        errors.append(("offset_fetch", f"{gid}: {offs.error}"))
    offs_error = (f"offset fetch: {_err_text(offs)}" if isinstance(offs, Exception) else
                  f"offset fetch: {offs.error}" if offs is not None and offs.error else None)
    if offs_error:
        error = f"{error}; {offs_error}" if error else offs_error
    start = offs.start if isinstance(offs, ShareOffsets) else {}
    lag = offs.lag if isinstance(offs, ShareOffsets) else {}
    if not isinstance(d, DescribedGroup) or d.error is not None:
        return GroupSample(group_id=gid, type="share", state="unknown", committed=start,
                           reported_lag=lag, error=error)
    return GroupSample(group_id=gid, type="share", state=d.state, members=_members(d),
                       coordinator=d.coordinator, committed=start, reported_lag=lag,
                       epoch=d.group_epoch, error=error)

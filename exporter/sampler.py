"""One read-only sampling cycle of one cluster -> :class:`Snapshot`.

Everything goes through confluent-kafka's AdminClient except the LEO
(exporter/leo.py). Per-group requests are issued all at once (futures), which
measured fast enough that KIP-709 batching is not needed (README, benchmark).
Nothing here joins a group, commits or alters offsets.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from exporter.config import ClusterConfig
from exporter.leo import LeoReader, LeoUnsupported
from exporter.snapshot import TP, GroupSample, Member, PartitionOffsets, Snapshot

log = logging.getLogger("lagwatch.sampler")
OFFSET_INVALID = -1001
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
        self._group_topics: dict[str, set[str]] = {}
        self.leo: LeoReader | None
        try:
            self.leo = LeoReader(cfg.client, cfg.request_timeout)
        except LeoUnsupported as e:
            log.warning("cluster %s: log end offsets disabled, unsupported %s", cfg.name, e)
            self.leo = None

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
            return self._stats_tx + (self.leo.requests if self.leo else 0)

    def close(self) -> None:
        if self.leo:
            self.leo.close()

    # -- the cycle -----------------------------------------------------------
    def sample(self, extra_topics: Iterable[str] = ()) -> Snapshot:
        t0 = time.monotonic()
        taken_at = time.time()
        errors: list[tuple[str, str]] = []
        timeout = self.cfg.request_timeout
        md, refused = self._metadata(timeout)
        if md is None:
            return Snapshot(self.cfg.name, taken_at, time.monotonic() - t0, {}, {},
                            (("metadata", refused),), ok=False)
        flt = self.cfg.filters
        try:
            listing = self.admin.list_consumer_groups(request_timeout=timeout).result()
            errors.extend(("list_groups", _err_text(e)) for e in listing.errors)
            listed = {g.group_id: g for g in listing.valid if flt.group_ok(g.group_id)}
            if listing.errors and self._last_listed:
                # ListGroups goes to every broker: groups of a broker that did not answer
                # are kept from the last cycle instead of vanishing.
                listed = {**self._last_listed, **listed}
            self._last_listed = listed
        except Exception as e:  # noqa: BLE001 - fall back to the last known list of groups
            if not self._last_listed:
                return Snapshot(self.cfg.name, taken_at, time.monotonic() - t0, {}, {},
                                (("list_groups", _err_text(e)),), ok=False, brokers=len(md.brokers))
            errors.append(("list_groups", f"{_err_text(e)} (using the groups known last cycle)"))
            listed = self._last_listed
        groups = self._describe_and_fetch(listed, errors)

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
        return Snapshot(self.cfg.name, taken_at, time.monotonic() - t0, partitions, groups,
                        tuple(errors), ok=True, brokers=len(md.brokers))

    def _describe_and_fetch(self, listed: dict[str, Any], errors: list[tuple[str, str]]
                            ) -> dict[str, GroupSample]:
        timeout = self.cfg.request_timeout
        ids = sorted(listed)
        desc_f: dict[str, Future] = (
            self.admin.describe_consumer_groups(ids, request_timeout=timeout) if ids else {})
        off_f = {g: self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(g)], request_timeout=timeout)[g] for g in ids}
        wait_futures([*desc_f.values(), *off_f.values()], timeout=timeout * 3)
        out: dict[str, GroupSample] = {}
        for gid in ids:
            lst = listed[gid]
            state = _enum_name(getattr(lst, "state", "unknown"))
            gtype = _enum_name(getattr(lst, "type", "classic"))
            members: tuple[Member, ...] = ()
            coordinator = None
            error = None
            try:
                # pop: drop each result as soon as it is used (100k partitions in flight)
                d = desc_f.pop(gid).result(0)
                state = _enum_name(d.state)
                gtype = _enum_name(getattr(d, "type", gtype))
                coordinator = d.coordinator.id if d.coordinator is not None else None
                members = tuple(
                    Member(m.member_id, m.client_id or "", m.host or "", m.group_instance_id,
                           tuple((tp.topic, tp.partition)
                                 for tp in (m.assignment.topic_partitions if m.assignment else [])))
                    for m in d.members)
            except Exception as e:  # noqa: BLE001 - isolated to this group
                error = f"describe: {_err_text(e)}"
                errors.append(("describe_group", f"{gid}: {_err_text(e)}"))
            committed: dict[TP, int] = {}
            try:
                res = off_f.pop(gid).result(0)
                for tp in res.topic_partitions:
                    if tp.error is None and tp.offset >= 0:
                        committed[(tp.topic, tp.partition)] = tp.offset
            except Exception as e:  # noqa: BLE001 - isolated to this group
                error = f"{error}; " if error else ""
                error += f"offset fetch: {_err_text(e)}"
                errors.append(("offset_fetch", f"{gid}: {_err_text(e)}"))
            state = _STATE_NAMES.get(state, state)
            gtype = gtype if gtype in ("classic", "consumer") else "classic"
            out[gid] = GroupSample(gid, gtype, state, members, coordinator, committed, error)
        return out

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
        if self.leo is None:
            return {}, None
        by_leader: dict[int, list[TP]] = {}
        for tp, pm in meta.items():
            if pm.leader >= 0:
                by_leader.setdefault(pm.leader, []).append(tp)
        out: dict[TP, int] = {}
        failures = []
        for leader, tps in by_leader.items():
            b = md.brokers.get(leader)
            if b is None:
                continue
            try:
                out.update(self.leo.fetch(b.host, b.port, tps))
            except Exception as e:  # noqa: BLE001 - one broker's LEO stays unknown
                failures.append(f"broker {leader}: {_err_text(e)}")
        return out, "; ".join(failures) or None


def _valid(v: int | None) -> int | None:
    return v if v is not None and v >= 0 else None


def _only_topics(g: GroupSample, topics: set[str]) -> GroupSample:
    if all(t in topics for (t, _) in g.committed):
        return g
    committed = {tp: o for tp, o in g.committed.items() if tp[0] in topics}
    return GroupSample(g.group_id, g.type, g.state, g.members, g.coordinator, committed, g.error)

"""The Kafka requests librdkafka cannot send, through kafka-python 3.

confluent-kafka (librdkafka) does everything else, but has no raw-request API and
does not send these:

* ListOffsets with ``replica_id = -2`` (DEBUGGING_REPLICA_ID): the only request
  that returns the leader's log end offset instead of the high watermark
  (librdkafka hard-codes ``-1``);
* ListGroups v5 with a types filter: ``list_consumer_groups`` omits Kafka
  Streams (KIP-1071) and share (KIP-932) groups;
* StreamsGroupDescribe (KIP-1071), ShareGroupDescribe and
  DescribeShareGroupOffsets (KIP-932), and ConsumerGroupDescribe (KIP-848),
  whose group and member epochs reveal a member that keeps rejoining.

kafka-python 3 encodes requests from Kafka's own JSON message definitions
(the four it lacks are in ``exporter/kafka/messages/``) and brings the framing,
version negotiation, TLS and SASL. docs/design.md gives the measured
cost of this choice over the hand-written client it replaced.

Everything here is read-only: list, describe and ListOffsets requests only.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.errors import IncompatibleBrokerVersion, UnknownBrokerIdError, for_code
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest

from exporter.kafka.messages import (
    ConsumerGroupDescribeRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
    StreamsGroupDescribeRequest,
)

log = logging.getLogger("lagwatch.protocol")

TP = tuple[str, int]
DEBUGGING_REPLICA_ID = -2  # ListOffsets from this "replica" answers with the leader's LEO
LATEST = -1
_COORDINATOR_ERRORS = {14, 15, 16}  # load in progress, not available, not coordinator
NEW_GROUP_TYPES = ("streams", "share")


class Unsupported(Exception):
    """The cluster's client properties need something kafka-python cannot be given."""


# -- librdkafka properties -> kafka-python configuration ----------------------------

_SASL_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# librdkafka properties that only librdkafka's own clients need; anything else under
# ssl. or sasl. that kafka-python cannot honour is refused at start (one warning), so a
# cluster never fails its log end offsets every cycle for a setting we silently dropped.
_IGNORED_SECURITY = {"sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
                     "ssl.endpoint.identification.algorithm",
                     "enable.ssl.certificate.verification"}


def kafka_python_config(props: dict[str, str], bootstrap: str, timeout: float,
                        client_id: str) -> dict[str, Any]:
    """kafka-python client settings equivalent to the cluster's librdkafka properties.
    Raises :class:`Unsupported` naming the property that cannot be honoured."""
    proto = props.get("security.protocol", "plaintext").lower()
    if proto not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
        raise Unsupported(f"security.protocol {proto!r}")
    conf: dict[str, Any] = {
        "bootstrap_servers": bootstrap.split(","), "client_id": client_id,
        "security_protocol": proto.upper(),
        "request_timeout_ms": max(1000, int(timeout * 1000)),
        "bootstrap_timeout_ms": max(1000, int(timeout * 1000)),
        "reconnect_backoff_max_ms": 10000,
    }
    used = {"security.protocol"}
    if proto.startswith("sasl"):
        mech = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()
        used |= {"sasl.mechanism", "sasl.mechanisms"}
        if mech in _SASL_PASSWORD_MECHANISMS:
            conf.update(sasl_mechanism=mech, sasl_plain_username=props.get("sasl.username", ""),
                        sasl_plain_password=props.get("sasl.password", ""))
            used |= {"sasl.username", "sasl.password"}
        elif mech == "GSSAPI":
            try:
                import gssapi  # noqa: F401 - kafka-python's GSSAPI needs it
            except ImportError:
                raise Unsupported("sasl.mechanism GSSAPI (pip install gssapi)") from None
            conf.update(sasl_mechanism=mech,
                        sasl_kerberos_service_name=props.get("sasl.kerberos.service.name", "kafka"))
            used |= {"sasl.kerberos.service.name", "sasl.kerberos.principal", "sasl.kerberos.keytab"}
        else:
            raise Unsupported(f"sasl.mechanism {mech} (supported: PLAIN, SCRAM-SHA-256, "
                              "SCRAM-SHA-512, GSSAPI)")
    if proto in ("ssl", "sasl_ssl"):
        conf["ssl_context"] = ssl_context(props)
        conf["ssl_check_hostname"] = conf["ssl_context"].check_hostname
        used |= _SSL_PROPERTIES
    for key in props:
        if key.startswith(("ssl.", "sasl.", "ssl_")) and key not in used | _IGNORED_SECURITY:
            raise Unsupported(f"{key} (not available to the Python client)")
    return conf


_SSL_PROPERTIES = {"ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
                   "ssl.key.location", "ssl.key.password", "ssl.cipher.suites", "ssl.crl.location"}


def ssl_context(props: dict[str, str]) -> ssl.SSLContext:
    """A TLS context from librdkafka's ssl.* properties (the file-based ones: PEM strings
    for the client key, keystores and engines are refused by the caller)."""
    ca = props.get("ssl.ca.location")
    try:
        if ca in (None, "probe"):  # librdkafka's "probe": the system's CA store
            ctx = ssl.create_default_context()
        elif os.path.isdir(ca):
            ctx = ssl.create_default_context(capath=ca)
        else:
            ctx = ssl.create_default_context(cafile=ca)
        if props.get("ssl.ca.pem"):
            ctx.load_verify_locations(cadata=props["ssl.ca.pem"])
        if props.get("ssl.crl.location"):
            ctx.load_verify_locations(props["ssl.crl.location"])
            ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        if props.get("ssl.cipher.suites"):
            ctx.set_ciphers(props["ssl.cipher.suites"])
        if props.get("ssl.certificate.location"):
            ctx.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location"),
                                props.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as e:  # never echo the key password: only the error
        raise Unsupported(f"TLS settings: {e.strerror or e}") from None
    if props.get("enable.ssl.certificate.verification", "true").lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif props.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        ctx.check_hostname = False
    return ctx


# -- what the describes return ---------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class ListedGroup:
    group_id: str
    type: str  # streams | share (what ListGroups v5 says)
    state: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedMember:
    member_id: str
    member_epoch: int
    client_id: str
    host: str
    instance_id: str | None = None
    process_id: str = ""  # Kafka Streams: the application instance
    assignment: tuple[TP, ...] = ()
    # What the coordinator has decided the member will own (KIP-848 and KIP-1071 groups
    # reconcile towards it at the member's next heartbeat, seconds later).
    target: tuple[TP, ...] = ()
    # The topics the member subscribes to: KIP-848 members' subscribed topic names (unknown,
    # empty, for a regex subscription), a streams group's topology source topics.
    subscribed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroup:
    group_id: str
    state: str  # lower case, as the broker names it (stable, empty, not_ready, ...)
    group_epoch: int
    coordinator: int | None
    members: tuple[DescribedMember, ...]
    error_code: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareOffsets:
    """DescribeShareGroupOffsets of one group: per partition the share-partition start
    offset and the lag as the broker computes it (v1, KIP-1226; None before)."""

    start: dict[TP, int]
    lag: dict[TP, int]
    error_code: int = 0
    error: str | None = None


def _state(s: str | None) -> str:
    """Broker state names (``NotReady``, ``PreparingRebalance``) in lagwatch's lower case."""
    out = "".join(f"_{c.lower()}" if c.isupper() else c for c in (s or "unknown")).lstrip("_")
    return out.replace("_", "") if out in ("preparing_rebalance", "completing_rebalance") else out


def _err(code: int, msg: str | None) -> str:
    return f"{for_code(code).__name__} ({code}){': ' + msg if msg else ''}"


class BrokerRequests:
    """One kafka-python client per cluster, connected at first use, reused across cycles.

    Calls come from the sampling thread; requests of one call are sent at once and
    awaited together with one deadline."""

    def __init__(self, props: dict[str, str], bootstrap: str, timeout: float,
                 client_id: str) -> None:
        self.config = kafka_python_config(props, bootstrap, timeout, client_id)
        self.timeout = timeout
        self._client: KafkaNetClient | None = None
        self._coordinators: dict[str, int] = {}
        self._lock = threading.Lock()
        self.requests = 0

    # -- plumbing -------------------------------------------------------------------
    def _connected(self) -> KafkaNetClient:
        if self._client is None:
            client = KafkaNetClient(**self.config)
            try:
                client.get_broker_version(int(self.timeout * 1000))
            except BaseException:
                client.close()
                raise
            self._client = client
        return self._client

    def supports(self, request: type) -> bool:
        """Does the bootstrap broker speak this request (any version we know)?"""
        try:
            self._connected().api_version(request, max_version=request.max_version)
        except IncompatibleBrokerVersion:
            return False
        return True

    def _gather(self, calls: Sequence[tuple[int, Any]]) -> list[Any]:
        """Send every (node, request) at once; each result is a response or an exception."""
        client = self._connected()
        futures: list[Any] = []
        for node, req in calls:
            try:
                futures.append(client.send(node, req))
            except UnknownBrokerIdError as e:
                # A broker that restarted or joined is in librdkafka's metadata, whose node
                # ids we send to, before kafka-python's own refresh (metadata.max.age.ms,
                # 5 min): this request fails alone and the refresh is asked for now, so the
                # next cycle reaches the broker.
                futures.append(e)
                client.cluster.request_update()
        self.requests += len(futures)
        pending = [f for f in futures if not isinstance(f, BaseException)]
        deadline = time.monotonic() + self.timeout
        while not all(f.is_done for f in pending):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            client.poll(timeout_ms=min(100, int(left * 1000) + 1))
        return [f if isinstance(f, BaseException) else
                f.value if f.succeeded() else (f.exception or TimeoutError("request timed out"))
                for f in futures]

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- log end offsets --------------------------------------------------------------
    def log_end_offsets(self, by_leader: dict[int, list[TP]]) -> tuple[dict[TP, int], list[str]]:
        """The leader's LEO of each partition, asked of its leader (node id = broker id)."""
        calls = []
        for leader, tps in by_leader.items():
            topics: dict[str, list[Any]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=p, timestamp=LATEST))
            calls.append((leader, ListOffsetsRequest(
                replica_id=DEBUGGING_REPLICA_ID, isolation_level=0,
                topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps)
                        for t, ps in topics.items()])))
        out: dict[TP, int] = {}
        failures = []
        for (leader, _), res in zip(calls, self._gather(calls), strict=True):
            if isinstance(res, BaseException):
                failures.append(f"broker {leader}: {res}")
                continue
            for t in res.topics:
                for p in t.partitions:
                    if p.error_code == 0 and p.offset >= 0:
                        out[(t.name, p.partition_index)] = p.offset
        return out, failures

    # -- streams and share groups ------------------------------------------------------
    def new_group_types(self) -> bool:
        """Does this cluster have streams and share groups to list (ListGroups v5 with the
        describes)? False on Kafka 3.x: those groups cannot exist there."""
        return (self.supports(StreamsGroupDescribeRequest) or self.supports(ShareGroupDescribeRequest)) \
            and self._connected().api_version(ListGroupsRequest, max_version=5) >= 5

    def list_groups(self, brokers: Iterable[int], types: Sequence[str] = NEW_GROUP_TYPES
                    ) -> tuple[dict[str, ListedGroup], list[str]]:
        """Groups of these types on every broker (each broker lists the groups it
        coordinates)."""
        calls = [(b, ListGroupsRequest(states_filter=[], types_filter=list(types), min_version=5))
                 for b in brokers]
        out: dict[str, ListedGroup] = {}
        failures = []
        for (b, _), res in zip(calls, self._gather(calls), strict=True):
            if isinstance(res, BaseException):
                failures.append(f"broker {b}: {res}")
            elif res.error_code:
                failures.append(f"broker {b}: {_err(res.error_code, None)}")
            else:
                for g in res.groups:
                    out[g.group_id] = ListedGroup(group_id=g.group_id, type=g.group_type,
                                                  state=_state(g.group_state))
        return out, failures

    def _coordinators_of(self, group_ids: Sequence[str]) -> tuple[dict[str, int], dict[str, str]]:
        """Coordinator broker of each group (cached until a request says it moved)."""
        unknown = [g for g in group_ids if g not in self._coordinators]
        errors: dict[str, str] = {}
        if unknown:
            client = self._connected()
            node = client.least_loaded_node(bootstrap_fallback=True)
            (res,) = self._gather([(node, FindCoordinatorRequest(
                key_type=0, coordinator_keys=unknown, min_version=4))])
            if isinstance(res, BaseException):
                errors = {g: f"find coordinator: {res}" for g in unknown}
            else:
                for c in res.coordinators:
                    if c.error_code:
                        errors[c.key] = f"find coordinator: {_err(c.error_code, c.error_message)}"
                    else:
                        self._coordinators[c.key] = c.node_id
        return {g: self._coordinators[g] for g in group_ids if g in self._coordinators}, errors

    def _per_coordinator(self, group_ids: Sequence[str], make: Any) -> tuple[list[Any], dict[str, str]]:
        coords, errors = self._coordinators_of(group_ids)
        by_node: dict[int, list[str]] = {}
        for g, n in coords.items():
            by_node.setdefault(n, []).append(g)
        calls = [(n, make(ids)) for n, ids in by_node.items()]
        results = []
        for (n, _), res in zip(calls, self._gather(calls), strict=True):
            if isinstance(res, BaseException):
                for g in by_node[n]:
                    errors[g] = str(res)
                    self._coordinators.pop(g, None)
            else:
                results.append((n, res))
        return results, errors

    def _forget_moved(self, group_id: str, code: int) -> None:
        if code in _COORDINATOR_ERRORS:
            self._coordinators.pop(group_id, None)

    def describe(self, kind: str, group_ids: Sequence[str]
                 ) -> dict[str, DescribedGroup]:
        """ConsumerGroupDescribe, StreamsGroupDescribe or ShareGroupDescribe (``kind`` =
        consumer, streams or share) of these groups, batched per coordinator."""
        request = {"consumer": ConsumerGroupDescribeRequest, "streams": StreamsGroupDescribeRequest,
                   "share": ShareGroupDescribeRequest}[kind]
        if not group_ids:
            return {}
        results, errors = self._per_coordinator(
            group_ids, lambda ids: request(group_ids=ids, include_authorized_operations=False))
        out: dict[str, DescribedGroup] = {
            g: DescribedGroup(group_id=g, state="unknown", group_epoch=-1, coordinator=None,
                              members=(), error=e) for g, e in errors.items()}
        for node, res in results:
            for d in parse_described(kind, node, res):
                if d.error is not None:
                    self._forget_moved(d.group_id, d.error_code)
                out[d.group_id] = d
        return out

    def classic_subscriptions(self, group_ids: Sequence[str]) -> dict[str, dict[str, tuple[str, ...]]]:
        """DescribeGroups of these classic groups, for what librdkafka's describe leaves out:
        per group, per member id, the topics of the member's subscription metadata."""
        if not group_ids:
            return {}
        results, _errors = self._per_coordinator(
            group_ids, lambda ids: DescribeGroupsRequest(groups=ids, include_authorized_operations=False))
        out: dict[str, dict[str, tuple[str, ...]]] = {}
        for _node, res in results:
            out.update(parse_subscriptions(res))
        return out

    def share_offsets(self, group_ids: Sequence[str]) -> dict[str, ShareOffsets]:
        """DescribeShareGroupOffsets for all topic-partitions of each group."""
        if not group_ids:
            return {}
        results, errors = self._per_coordinator(group_ids, lambda ids: DescribeShareGroupOffsetsRequest(
            groups=[DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(
                group_id=g, topics=None) for g in ids]))
        out = {g: ShareOffsets(start={}, lag={}, error=e) for g, e in errors.items()}
        for _node, res in results:
            for gid, offs in parse_share_offsets(res).items():
                if offs.error is not None:
                    self._forget_moved(gid, offs.error_code)
                out[gid] = offs
        return out


def parse_described(kind: str, node: int, res: Any) -> list[DescribedGroup]:
    """The groups of a Consumer-, Streams- or ShareGroupDescribe response."""
    out = []
    for g in res.groups:
        if g.error_code:
            out.append(DescribedGroup(group_id=g.group_id, state="unknown", group_epoch=-1,
                                      coordinator=node, members=(), error_code=g.error_code,
                                      error=_err(g.error_code, g.error_message)))
        else:
            out.append(DescribedGroup(group_id=g.group_id, state=_state(g.group_state),
                                      group_epoch=g.group_epoch, coordinator=node,
                                      members=tuple(_member(kind, m, g) for m in g.members)))
    return out


def parse_subscriptions(res: Any) -> dict[str, dict[str, tuple[str, ...]]]:
    """Members' subscribed topics from a DescribeGroups response. Only groups of the
    ``consumer`` protocol type carry a consumer subscription (Kafka Connect's workers do
    not); a member whose metadata cannot be read is left out (unknown)."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for g in res.groups:
        if g.error_code or g.protocol_type != "consumer":
            continue
        subs: dict[str, tuple[str, ...]] = {}
        for m in g.members:
            try:
                topics = ConsumerProtocolSubscription.decode(m.member_metadata).topics
            except Exception:  # noqa: BLE001 - a client's own metadata format: unknown
                continue
            subs[m.member_id] = tuple(sorted(topics or ()))
        out[g.group_id] = subs
    return out


def parse_share_offsets(res: Any) -> dict[str, ShareOffsets]:
    """Start offset and lag per partition of each group of a DescribeShareGroupOffsets response."""
    out = {}
    for g in res.groups:
        if g.error_code:
            out[g.group_id] = ShareOffsets(start={}, lag={}, error_code=g.error_code,
                                           error=_err(g.error_code, g.error_message))
            continue
        start: dict[TP, int] = {}
        lag: dict[TP, int] = {}
        for t in g.topics:
            for p in t.partitions:
                if p.error_code or p.start_offset < 0:
                    continue  # no state yet (nothing consumed) or a partition error
                start[(t.topic_name, p.partition_index)] = p.start_offset
                if getattr(p, "lag", -1) >= 0:  # v1 (KIP-1226); -1 when unknown
                    lag[(t.topic_name, p.partition_index)] = p.lag
        out[g.group_id] = ShareOffsets(start=start, lag=lag)
    return out


def _member(kind: str, m: Any, g: Any) -> DescribedMember:
    if kind == "streams":
        # A task (subtopology, partition) reads that partition of each of the
        # subtopology's source topics, repartition topics included.
        sources = {s.subtopology_id: [*s.source_topics, *(r.name for r in s.repartition_source_topics)]
                   for s in (g.topology.subtopologies if g.topology else [])}

        def task_partitions(a: Any) -> tuple[TP, ...]:
            return tuple(sorted({(t, p) for task in (a.active_tasks if a else [])
                                 for t in sources.get(task.subtopology_id, []) for p in task.partitions}))
        return DescribedMember(member_id=m.member_id, member_epoch=m.member_epoch,
                               client_id=m.client_id, host=m.client_host, instance_id=m.instance_id,
                               process_id=m.process_id or "", assignment=task_partitions(m.assignment),
                               target=task_partitions(m.target_assignment),
                               subscribed=tuple(sorted({t for ts in sources.values() for t in ts})))

    def partitions(a: Any) -> tuple[TP, ...]:
        return tuple(sorted((t.topic_name, p)
                            for t in (a.topic_partitions if a else []) for p in t.partitions))
    return DescribedMember(member_id=m.member_id, member_epoch=m.member_epoch, client_id=m.client_id,
                           host=m.client_host, instance_id=getattr(m, "instance_id", None),
                           assignment=partitions(m.assignment),
                           target=partitions(getattr(m, "target_assignment", None)),
                           subscribed=_subscribed(m))


def _subscribed(m: Any) -> tuple[str, ...]:
    """A KIP-848 or share member's subscribed topic names; unknown (empty) when it subscribes
    by regex, whose matches the describe does not list."""
    if getattr(m, "subscribed_topic_regex", None):
        return ()
    return tuple(sorted(getattr(m, "subscribed_topic_names", None) or ()))

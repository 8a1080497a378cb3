"""Every request of a sampling cycle, through kafka-python 3's request layer, per broker
or per coordinator, never per group:

* Metadata, asked of every broker at once (the first answer is used);
* ListGroups (v5, all types) per broker: each lists the groups it coordinates;
* FindCoordinator v4 (KIP-699) for the groups the listing does not place;
* per coordinator, one OffsetFetch v8+ for all its groups (KIP-709; one per group before
  Kafka 3.0), one DescribeGroups for its classic groups, one ConsumerGroupDescribe
  (KIP-848), StreamsGroupDescribe (KIP-1071), ShareGroupDescribe and
  DescribeShareGroupOffsets (KIP-932) for its groups of each type;
* per partition leader, ListOffsets for the log start offset, the high watermark, the
  last stable offset and, with ``replica_id = -2`` (DEBUGGING_REPLICA_ID), the leader's
  log end offset (librdkafka hard-codes ``-1``).

librdkafka's admin client accepts one group per OffsetFetch, crashes when that request
meets a moved coordinator (confluentinc/librdkafka#5040) and can abort on a late answer
(#4605); kafka-python's high-level ``list_group_offsets`` raises on the first error of a
batch. The request layer keeps each group's error to that group.

kafka-python 3 encodes requests from Kafka's own JSON message definitions
(the four it lacks are in ``exporter/kafka/messages/``) and brings the framing,
version negotiation, TLS and SASL. docs/design.md gives its measured cost against
a minimal hand-written client.

Everything here is read-only: list, describe and ListOffsets requests only.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import ssl
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from kafka.errors import (
    IncompatibleBrokerVersion,
    KafkaConnectionError,
    RequestTimedOutError,
    UnknownBrokerIdError,
    for_code,
)
from kafka.net.compat import KafkaNetClient
from kafka.net.sasl.oauth import AbstractTokenProvider
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import ListOffsetsRequest, OffsetFetchRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from exporter.contracts.sampling import ListedGroup
from exporter.contracts.snapshot import COMMITTING_TYPES, TP, GroupType, KafkaGroupState
from exporter.kafka.messages import (
    ConsumerGroupDescribeRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
    StreamsGroupDescribeRequest,
)
from exporter.kafka.oauth_props import CONSUMED
from exporter.kafka.offset_fetch import CommittedOffsets, LeanOffsetFetchRequest

log = logging.getLogger("lagwatch.broker_requests")

DEBUGGING_REPLICA_ID = -2  # ListOffsets from this "replica" answers with the leader's LEO
LATEST = -1
_COORDINATOR_ERRORS = {14, 15, 16}  # load in progress, not available, not coordinator
# The group types a ListGroups v5 answer names; before v5 every group is classic.
LISTED_TYPES = frozenset({*COMMITTING_TYPES, GroupType.SHARE})
# error_code of a group whose request failed as a whole (timeout, broker silent, or the
# call raised): the failure is reported once per request (BrokerRequests.take_failures),
# not once per group.
REQUEST_FAILED = -1
# Requests of ours outstanding per broker connection: kafka-python refuses a sixth
# (max_in_flight_requests_per_connection, 5) with NodeNotReadyError instead of queueing it.
IN_FLIGHT = 4
# Seconds a Metadata request waits on one broker before the others are asked too: the
# answer is the same from every broker, and it holds every topic (megabytes on a large
# cluster), so one broker is asked, and a hung one costs a cycle this much once.
METADATA_HEDGE = 0.5
# Seconds between polls of an idle SASL client's event loop (its re-authentication timers
# fire at 85-95 % of the session lifetime, so this must be well under 5 % of it).
SESSION_TICK = 0.1


class Unsupported(Exception):
    """The cluster's client properties need something kafka-python cannot be given."""


class BrokerSilent(Exception):
    """The broker let a request time out earlier in this cycle: it is not asked again
    until the next cycle (a hung broker keeps its TCP connection open and answers
    nothing; without this every stage of a cycle would wait a full timeout for it)."""


# -- librdkafka properties -> kafka-python configuration ----------------------------

_SASL_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# librdkafka properties that only librdkafka's own clients need; anything else under
# ssl. or sasl. that kafka-python cannot honour is refused at start (one warning), so a
# cluster never fails its log end offsets every cycle for a setting we silently dropped.
_IGNORED_SECURITY = {"sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
                     "ssl.endpoint.identification.algorithm",
                     "enable.ssl.certificate.verification"}


def kafka_python_config(props: dict[str, str], bootstrap: str, timeout: float,
                        client_id: str, tokens: AbstractTokenProvider | None = None) -> dict[str, Any]:
    """kafka-python client settings equivalent to the cluster's librdkafka properties;
    ``tokens`` is the cluster's OAUTHBEARER token source (exporter/kafka/tokens.py).
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
        # kafka-python refuses answers over 1,000,000 bytes by default; one batched
        # OffsetFetch of a coordinator with 2,000 groups of 50 partitions is about 2 MB
        # (MAX_ELEMENTS bounds one answer to roughly 5 MB).
        "receive_message_max_bytes": 64 * 2**20,
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
        elif mech == "OAUTHBEARER" and tokens is not None:
            # kafka-python re-authenticates (KIP-368) before the broker's session lifetime
            # ends, asking the provider again: it must hold a fresh token by then.
            conf.update(sasl_mechanism=mech, sasl_oauth_token_provider=tokens)
            used |= CONSUMED
        else:
            raise Unsupported(f"sasl.mechanism {mech} (supported: PLAIN, SCRAM-SHA-256, "
                              "SCRAM-SHA-512, GSSAPI, OAUTHBEARER with a token source)")
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
    state: KafkaGroupState
    group_epoch: int
    coordinator: int | None
    members: tuple[DescribedMember, ...]
    protocol_type: str = ""  # classic groups: consumer, connect, ... ("" for commit-only)
    error_code: int = 0
    error: str | None = None

    @classmethod
    def failed(cls, group_id: str, error: str) -> DescribedGroup:
        """The group of a request that failed as a whole (REQUEST_FAILED)."""
        return cls(group_id=group_id, state=KafkaGroupState.UNKNOWN, group_epoch=-1, coordinator=None,
                   members=(), error_code=REQUEST_FAILED, error=error)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareOffsets:
    """DescribeShareGroupOffsets of one group: per partition the share-partition start
    offset and the lag as the broker computes it (v1, KIP-1226; None before)."""

    start: dict[TP, int]
    lag: dict[TP, int]
    error_code: int = 0
    error: str | None = None

    @classmethod
    def failed(cls, group_id: str, error: str) -> ShareOffsets:
        """The group of a request that failed as a whole (REQUEST_FAILED)."""
        return cls(start={}, lag={}, error_code=REQUEST_FAILED, error=error)


def _listed_type(raw: str | None) -> GroupType:
    """A ListGroups group type; before v5 (no type), or one lagwatch does not know, is read
    as classic."""
    return GroupType(raw) if raw in LISTED_TYPES else GroupType.CLASSIC


# The broker's state spellings met so far, each normalised once (KafkaGroupState's
# constructor reaches its ``_missing_`` for every broker spelling: a few microseconds, two
# thousand times a cycle); a few dozen at most are kept.
_STATES: dict[str | None, KafkaGroupState] = {}


def _state(raw: str | None) -> KafkaGroupState:
    state = _STATES.get(raw)
    if state is None:
        state = KafkaGroupState(raw)
        if len(_STATES) < 64:
            _STATES[raw] = state
    return state


def _err(code: int, msg: str | None) -> str:
    return f"{for_code(code).__name__} ({code}){': ' + msg if msg else ''}"


class BrokerRequests:
    """One kafka-python client per cluster, connected at first use, reused across cycles.

    Calls come from the sampling thread; requests of one call are sent at once and
    awaited together with one deadline. A broker that lets a request time out (or
    cannot be connected to) is *silent* for the rest of the cycle (:meth:`begin_cycle`
    clears it): later requests to it fail at once with :class:`BrokerSilent`, so a hung
    broker costs one request timeout per cycle and only its own share of the data."""

    def __init__(self, props: dict[str, str], bootstrap: str, timeout: float,
                 client_id: str, offset_fetch_max_version: int = 9,
                 tokens: AbstractTokenProvider | None = None) -> None:
        self.config = kafka_python_config(props, bootstrap, timeout, client_id, tokens)
        self.timeout = timeout
        self._client: KafkaNetClient | None = None
        # Per group its coordinator; the sampler hands in the map the runner keeps.
        self.coordinators: dict[str, int] = {}
        self._lock = threading.Lock()
        self.requests = 0
        self.silent: set[int] = set()
        self._metadata_from: int | None = None  # the broker whose Metadata answered last
        self._failures: list[str] = []  # requests of a call that failed as a whole
        # OffsetFetch v10 names topics by id only (KIP-848): v8-9 batch groups by name.
        # Lower it to test the per-group path of brokers before Kafka 3.0 (KIP-709).
        self.offset_fetch_max_version = offset_fetch_max_version

    @property
    def connected(self) -> bool:
        """Has the client bootstrapped (it then stays connected to the cluster)?"""
        return self._client is not None

    def take_failures(self) -> list[str]:
        """Requests that failed as a whole since the last call, one line each."""
        out, self._failures = self._failures, []
        return out

    def learn_brokers(self, metadata: Any) -> None:
        """Let kafka-python send to the brokers of a metadata answer we received."""
        self._connected().cluster.update_metadata(metadata)

    def begin_cycle(self) -> None:
        """A new cycle asks every broker again: a paused broker may have resumed."""
        self.silent.clear()

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
            if self.config["security_protocol"].startswith("SASL"):
                threading.Thread(target=self._keep_sessions, args=(client,), daemon=True,
                                 name=f"sessions-{self.config['client_id']}").start()
        return self._client

    def _keep_sessions(self, client: KafkaNetClient) -> None:
        """Drive kafka-python's event loop between cycles. Its KIP-368 re-authentication is
        a timer of that loop, which runs only while someone polls: with nobody polling
        between two cycles the broker closes the connection when the session ends
        (``connections.max.reauth.ms``, or the token's expiry) and the next cycle's first
        requests fail. A poll without waiting runs the timers that are due."""
        while self._client is client:
            with contextlib.suppress(Exception):  # a closed client: the loop ends
                client.poll(timeout_ms=0)
            time.sleep(SESSION_TICK)

    def supports(self, request: type) -> bool:
        """Does the bootstrap broker speak this request (any version we know)?"""
        try:
            self._connected().api_version(request, max_version=request.max_version)
        except IncompatibleBrokerVersion:
            return False
        return True

    def _send(self, client: KafkaNetClient, node: int, req: Any) -> Any:
        if node in self.silent:
            return BrokerSilent(f"broker {node} did not answer earlier in this cycle")
        self.requests += 1
        try:
            return client.send(node, req)
        except UnknownBrokerIdError as e:
            # A broker that restarted or joined is in the metadata we send to before
            # kafka-python's own refresh: this request fails alone and the refresh is
            # asked for now, so the next cycle reaches the broker.
            client.cluster.request_update()
            return e

    def _gather(self, calls: Sequence[tuple[int, Any]], first: bool = False,
                hedge: float | None = None) -> list[Any]:
        """Send every (node, request), at most IN_FLIGHT at a time per broker (kafka-python
        refuses more per connection); each result is a response or an exception. With
        ``first`` the wait ends at the first answer (one question to every broker); with
        ``hedge`` too, the first call goes alone and the others only when it has not
        answered within ``hedge`` seconds (or failed)."""
        client = self._connected()
        results: list[Any] = [None] * len(calls)
        queued = collections.deque(range(len(calls) if hedge is None else min(1, len(calls))))
        held = collections.deque(range(len(queued), len(calls)))
        now = time.monotonic()
        deadline, hedge_at = now + self.timeout, now + (hedge or 0.0)
        while True:
            self._pump(client, calls, results, queued)
            pending = [f for f in results if f is not None and not isinstance(f, BaseException)]
            answered = first and any(f.succeeded() for f in pending)
            now = time.monotonic()
            left, settled = deadline - now, not queued and all(f.is_done for f in pending)
            if held and not answered and (settled or now >= hedge_at):
                queued.extend(held)
                held.clear()
                continue
            if answered or left <= 0 or settled:
                break
            client.poll(timeout_ms=min(100, int(left * 1000) + 1))
        for i, (node, _) in enumerate(calls):
            f = results[i]
            if f is None:
                results[i] = TimeoutError("request timed out before it could be sent")
            elif not isinstance(f, BaseException) and (
                    (not f.is_done and not answered)
                    or isinstance(f.exception, (RequestTimedOutError, KafkaConnectionError))):
                self.silent.add(node)
        return [f if isinstance(f, BaseException) else
                f.value if f.succeeded() else (f.exception or TimeoutError("request timed out"))
                for f in results]

    def _pump(self, client: KafkaNetClient, calls: Sequence[tuple[int, Any]], results: list[Any],
              queued: collections.deque[int]) -> None:
        """Send the queued calls whose broker has fewer than IN_FLIGHT of ours outstanding."""
        busy: collections.Counter[int] = collections.Counter(
            calls[i][0] for i, f in enumerate(results)
            if f is not None and not isinstance(f, BaseException) and not f.is_done)
        for _ in range(len(queued)):
            i = queued.popleft()
            node, req = calls[i]
            if busy[node] >= IN_FLIGHT and node not in self.silent:
                queued.append(i)
                continue
            results[i] = self._send(client, node, req)
            busy[node] += 1

    def _any_node(self) -> int:
        """kafka-python's least loaded broker, unless it is silent this cycle."""
        client = self._connected()
        node = client.least_loaded_node(bootstrap_fallback=True)
        if node in self.silent:
            node = next((b.node_id for b in client.cluster.brokers() if b.node_id not in self.silent),
                        node)
        return node

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- metadata ------------------------------------------------------------------------
    def metadata(self) -> Any:
        """A MetadataResponse for all topics, asked of the broker that answered last (else
        the first known), and of every other broker too when it has not answered within
        METADATA_HEDGE; the first answer wins."""
        client = self._connected()
        nodes = [b.node_id for b in client.cluster.brokers()] or \
            [b.node_id for b in client.cluster.bootstrap_brokers()]
        if self._metadata_from in nodes:  # the broker that answered last is asked first
            nodes.remove(self._metadata_from)
            nodes.insert(0, self._metadata_from)
        results = self._gather([(n, MetadataRequest(topics=None, allow_auto_topic_creation=False))
                                for n in nodes], first=True, hedge=METADATA_HEDGE)
        answers = [(n, r) for n, r in zip(nodes, results, strict=True) if not isinstance(r, BaseException)]
        if not answers:
            raise next(iter(results), TimeoutError("no broker known"))
        self._metadata_from = answers[0][0]
        return answers[0][1]

    # -- ListOffsets -------------------------------------------------------------------------
    def list_offsets(self, by_leader: dict[int, list[TP]], timestamp: int = LATEST,
                     replica_id: int = -1, isolation_level: int = 0
                     ) -> tuple[dict[TP, int], list[str]]:
        """One ListOffsets per leader for all its partitions (split by MAX_ELEMENTS).
        ``replica_id`` -2 asks for the leader's log end offset (DEBUGGING_REPLICA_ID); -1
        with ``timestamp`` -2 / -1 for the log start offset / the high watermark
        (isolation 0) or LSO (isolation 1)."""
        calls = [(leader, _list_offsets_request(part, timestamp, replica_id, isolation_level))
                 for leader, tps in by_leader.items() for part in _partition_chunks(tps)]
        return _offsets_of(calls, self._gather(calls))

    # -- listings --------------------------------------------------------------------------
    def new_group_types(self) -> bool:
        """Does this cluster have streams and share groups to list (ListGroups v5 with the
        describes)? False on Kafka 3.x: those groups cannot exist there."""
        return (self.supports(StreamsGroupDescribeRequest) or self.supports(ShareGroupDescribeRequest)) \
            and self._connected().api_version(ListGroupsRequest, max_version=5) >= 5

    def list_groups(self, brokers: Iterable[int], types: Sequence[GroupType] = ()
                    ) -> tuple[dict[str, ListedGroup], list[str]]:
        """Groups on every broker (each broker lists the groups it coordinates, so the
        listing also says where each group's coordinator is). ``types`` empty: all types
        (ListGroups v5; before v5 every group is classic)."""
        calls = [(b, ListGroupsRequest(states_filter=[], types_filter=list(types),
                                       min_version=5 if types else 0)) for b in brokers]
        out: dict[str, ListedGroup] = {}
        failures = []
        for (b, _), res in zip(calls, self._gather(calls), strict=True):
            if isinstance(res, BaseException):
                failures.append(f"broker {b}: {res}")
            elif res.error_code:
                failures.append(f"broker {b}: {_err(res.error_code, None)}")
            else:
                for g in res.groups:
                    out[g.group_id] = ListedGroup(
                        group_id=g.group_id, type=_listed_type(getattr(g, "group_type", None)),
                        state=_state(getattr(g, "group_state", None)), coordinator=b,
                        protocol_type=g.protocol_type or "")
        return out, failures

    # -- coordinators ----------------------------------------------------------------------
    def learn_coordinators(self, coordinators: dict[str, int]) -> None:
        """Coordinators known without asking (the broker that listed the group)."""
        self.coordinators.update(coordinators)

    def _coordinators_of(self, group_ids: Sequence[str]) -> tuple[dict[str, int], dict[str, str]]:
        """Coordinator broker of each group: cached (from the listing, or an earlier lookup)
        until a request says it moved; the unknown ones in one FindCoordinator v4 (KIP-699)."""
        unknown = [g for g in group_ids if g not in self.coordinators]
        errors: dict[str, str] = {}
        if unknown:
            (res,) = self._gather([(self._any_node(), FindCoordinatorRequest(
                key_type=0, coordinator_keys=unknown, min_version=4))])
            if isinstance(res, BaseException):
                errors = {g: f"find coordinator: {res}" for g in unknown}
                self._failures.append(f"find coordinator: {res}")
            else:
                for c in res.coordinators:
                    if c.error_code:
                        errors[c.key] = f"find coordinator: {_err(c.error_code, c.error_message)}"
                    else:
                        self.coordinators[c.key] = c.node_id
        return {g: self.coordinators[g] for g in group_ids if g in self.coordinators}, errors

    def _per_coordinator(self, group_ids: Sequence[str], make: Any,
                         weight: dict[str, int] | None = None) -> tuple[list[Any], dict[str, str]]:
        """One request per coordinator for all its groups (``make(ids)``), split so that no
        response holds more than MAX_ELEMENTS array elements by ``weight`` (a group's
        expected partitions): Kafka 4.4's readers reject arrays over 1,000,000."""
        coords, errors = self._coordinators_of(group_ids)
        by_node: dict[int, list[str]] = {}
        for g, n in coords.items():
            by_node.setdefault(n, []).append(g)
        calls = [(n, ids, make(ids)) for n, gs in by_node.items()
                 for ids in _chunks(gs, weight or {})]
        results = []
        answers = self._gather([(n, req) for n, _, req in calls])
        for (n, ids, _), res in zip(calls, answers, strict=True):
            if isinstance(res, BaseException):
                # The coordinator stays cached: the listing says when a group moved.
                self._failures.append(f"broker {n}: {res} ({len(ids)} group(s))")
                errors.update((g, f"broker {n}: {res}") for g in ids)
            else:
                results.append((n, ids, res))
        return results, errors

    def _forget_moved(self, group_id: str, code: int) -> None:
        if code in _COORDINATOR_ERRORS:
            self.coordinators.pop(group_id, None)

    def describe(self, kind: GroupType, group_ids: Sequence[str]
                 ) -> dict[str, DescribedGroup]:
        """ConsumerGroupDescribe, StreamsGroupDescribe or ShareGroupDescribe (``kind`` =
        consumer, streams or share) of these groups, batched per coordinator."""
        request = _DESCRIBE_REQUESTS[kind]
        if not group_ids:
            return {}
        results, errors = self._per_coordinator(
            group_ids, lambda ids: request(group_ids=ids, include_authorized_operations=False))
        out = {g: DescribedGroup.failed(g, e) for g, e in errors.items()}
        for node, _ids, res in results:
            for d in parse_described(kind, node, res):
                if d.error is not None:
                    self._forget_moved(d.group_id, d.error_code)
                out[d.group_id] = d
        return out

    def describe_classic(self, group_ids: Sequence[str]) -> dict[str, DescribedGroup]:
        """DescribeGroups of these classic groups, one request per coordinator: state,
        members with their assignments and subscriptions (the consumer protocol's bytes)."""
        if not group_ids:
            return {}
        results, errors = self._per_coordinator(
            group_ids, lambda ids: DescribeGroupsRequest(groups=ids, include_authorized_operations=False))
        out = {g: DescribedGroup.failed(g, e) for g, e in errors.items()}
        for node, _ids, res in results:
            for d in parse_classic(node, res):
                if d.error is not None:
                    self._forget_moved(d.group_id, d.error_code)
                out[d.group_id] = d
        return out

    def offset_fetch(self, group_ids: Sequence[str], weight: dict[str, int]
                     ) -> dict[str, Committed]:
        """Committed offsets of these groups (classic, consumer and streams groups commit
        alike): one OffsetFetch v8+ per coordinator for all its groups (KIP-709), split by
        ``weight``; brokers before Kafka 3.0 (no v8) get one request per group."""
        if not group_ids:
            return {}
        batched = self._connected().api_version(
            OffsetFetchRequest, max_version=self.offset_fetch_max_version) >= 8
        if batched:
            results, errors = self._per_coordinator(group_ids, lambda ids: LeanOffsetFetchRequest(
                groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None) for g in ids],
                require_stable=False, max_version=self.offset_fetch_max_version), weight)
        else:
            results, errors = self._per_coordinator(group_ids, lambda ids: OffsetFetchRequest(
                group_id=ids[0], topics=None, max_version=min(7, self.offset_fetch_max_version)),
                {g: MAX_ELEMENTS for g in group_ids})
        out = {g: Committed.failed(g, e) for g, e in errors.items()}
        for _node, ids, res in results:
            for gid, c in parse_offset_fetch(res, ids).items():
                if c.error is not None:
                    self._forget_moved(gid, c.error_code)
                out[gid] = c
        return out

    def share_offsets(self, group_ids: Sequence[str]) -> dict[str, ShareOffsets]:
        """DescribeShareGroupOffsets for all topic-partitions of each group."""
        if not group_ids:
            return {}
        results, errors = self._per_coordinator(group_ids, lambda ids: DescribeShareGroupOffsetsRequest(
            groups=[DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(
                group_id=g, topics=None) for g in ids]))
        out = {g: ShareOffsets.failed(g, e) for g, e in errors.items()}
        for _node, _ids, res in results:
            for gid, offs in parse_share_offsets(res).items():
                if offs.error is not None:
                    self._forget_moved(gid, offs.error_code)
                out[gid] = offs
        return out


# The describe request of each KIP-848-style group type (classic groups: DescribeGroups).
_DESCRIBE_REQUESTS = {GroupType.CONSUMER: ConsumerGroupDescribeRequest,
                      GroupType.STREAMS: StreamsGroupDescribeRequest,
                      GroupType.SHARE: ShareGroupDescribeRequest}


# Array elements one batched request or response may carry (groups + topics + partitions,
# all its arrays together): well under the 1,000,000 elements that Kafka 4.4's readers
# accept for one decoded array, whichever array of a message holds them. OffsetFetch and
# the describes are split by group (_chunks), ListOffsets by partition (_partition_chunks).
MAX_ELEMENTS = 250_000
UNKNOWN_WEIGHT = 100  # elements assumed for a group not read before


def _chunks(ids: list[str], weight: dict[str, int]) -> list[list[str]]:
    """``ids`` in runs whose summed weight stays within MAX_ELEMENTS (each run at least one)."""
    out: list[list[str]] = [[]]
    total = 0
    for g in sorted(ids):
        w = weight.get(g, UNKNOWN_WEIGHT)
        if out[-1] and total + w > MAX_ELEMENTS:
            out.append([])
            total = 0
        out[-1].append(g)
        total += w
    return out


def _partition_chunks(tps: list[TP]) -> list[list[TP]]:
    """``tps`` in runs whose topics plus partitions stay within MAX_ELEMENTS: one
    ListOffsets each (a leader of fewer partitions gets one request)."""
    out: list[list[TP]] = [[]]
    total, topic = 0, None
    for tp in sorted(tps):
        cost = 1 if tp[0] == topic else 2  # a topic's first partition also opens its entry
        if out[-1] and total + cost > MAX_ELEMENTS:
            out.append([])
            total, cost = 0, 2
        out[-1].append(tp)
        total += cost
        topic = tp[0]
    return out


def _list_offsets_request(tps: list[TP], timestamp: int, replica_id: int, isolation: int) -> Any:
    topics: dict[str, list[Any]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append(ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=p, timestamp=timestamp))
    return ListOffsetsRequest(
        replica_id=replica_id, isolation_level=isolation,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()],
        min_version=2 if isolation else 1)


def _offsets_of(calls: list[tuple[int, Any]], answers: list[Any]) -> tuple[dict[TP, int], list[str]]:
    out: dict[TP, int] = {}
    failures = []
    for (leader, _), res in zip(calls, answers, strict=True):
        if isinstance(res, BaseException):
            failures.append(f"broker {leader}: {res}")
            continue
        refused: dict[int, int] = {}  # error code -> partitions (a leader moved, a topic deleted)
        for t in res.topics:
            for p in t.partitions:
                if p.error_code == 0 and p.offset >= 0:
                    out[(t.name, p.partition_index)] = p.offset
                elif p.error_code:
                    refused[p.error_code] = refused.get(p.error_code, 0) + 1
        failures.extend(f"broker {leader}: {_err(code, None)} for {n} partition{'s' * (n > 1)}"
                        for code, n in sorted(refused.items()))
    return out, failures


@dataclass(frozen=True, slots=True, kw_only=True)
class Committed:
    """One group's committed offsets (OffsetFetch), or why they could not be read."""

    offsets: dict[TP, int]
    error_code: int = 0
    error: str | None = None

    @classmethod
    def failed(cls, group_id: str, error: str) -> Committed:
        """The group of a request that failed as a whole (REQUEST_FAILED)."""
        return cls(offsets={}, error_code=REQUEST_FAILED, error=error)


def parse_classic(node: int, res: Any) -> list[DescribedGroup]:
    """The groups of a DescribeGroups response; a member's assignment and subscription are
    read from the consumer protocol's bytes (other protocols, Kafka Connect's: unknown)."""
    out = []
    for g in res.groups:
        if g.error_code:
            out.append(DescribedGroup(group_id=g.group_id, state=KafkaGroupState.UNKNOWN, group_epoch=-1,
                                      coordinator=node, members=(), error_code=g.error_code,
                                      error=_err(g.error_code, getattr(g, "error_message", None))))
            continue
        consumer = g.protocol_type == "consumer"
        out.append(DescribedGroup(
            group_id=g.group_id, state=_state(g.group_state), group_epoch=-1,
            coordinator=node, protocol_type=g.protocol_type or "",
            members=tuple(DescribedMember(
                member_id=m.member_id, member_epoch=-1, client_id=m.client_id or "",
                host=m.client_host or "", instance_id=getattr(m, "group_instance_id", None),
                assignment=_assigned(m.member_assignment) if consumer else (),
                subscribed=_subscription(m.member_metadata) if consumer else ())
                for m in g.members)))
    return out


def _assigned(raw: bytes | None) -> tuple[TP, ...]:
    if not raw:
        return ()
    try:
        a = ConsumerProtocolAssignment.decode(raw)
    except Exception:  # noqa: BLE001 - a client's own bytes: unknown
        return ()
    return tuple((t, p) for t, ps in a.assigned_partitions or () for p in ps)


def _subscription(raw: bytes | None) -> tuple[str, ...]:
    if not raw:
        return ()
    try:
        return tuple(sorted(ConsumerProtocolSubscription.decode(raw).topics or ()))
    except Exception:  # noqa: BLE001 - a client's own bytes: unknown
        return ()


def parse_offset_fetch(res: Any, ids: Sequence[str]) -> dict[str, Committed]:
    """Committed offsets per group of an OffsetFetch response: v8+ lists groups, each with
    its own error (one group's error never costs another its offsets); before v8 the
    response is the one group asked (``ids[0]``). No committed offset (-1) or a partition
    error: left out."""
    if isinstance(res, CommittedOffsets):  # v8-v9, decoded by exporter/kafka/offset_fetch.py
        return {g: _committed(code, offsets) for g, (code, offsets) in res.groups.items()}
    if res.version < 8:  # kafka-python's decode: the one group asked
        groups = [SimpleNamespace(group_id=ids[0], error_code=res.error_code, topics=res.topics)]
    else:
        groups = res.groups
    return {g.group_id: _committed(g.error_code, _offsets(g)) for g in groups}


def _offsets(g: Any) -> dict[TP, int]:
    """One group of kafka-python's answer: its committed offsets (-1 and partition errors
    left out; a group's error leaves no topics)."""
    return {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
            if p.error_code == 0 and p.committed_offset >= 0}


def _committed(code: int, offsets: dict[TP, int]) -> Committed:
    """A group's committed offsets, or its error and none."""
    if code:
        return Committed(offsets={}, error_code=code, error=_err(code, None))
    return Committed(offsets=offsets)


def parse_described(kind: GroupType, node: int, res: Any) -> list[DescribedGroup]:
    """The groups of a Consumer-, Streams- or ShareGroupDescribe response."""
    out = []
    for g in res.groups:
        if g.error_code:
            out.append(DescribedGroup(group_id=g.group_id, state=KafkaGroupState.UNKNOWN, group_epoch=-1,
                                      coordinator=node, members=(), error_code=g.error_code,
                                      error=_err(g.error_code, g.error_message)))
        else:
            out.append(DescribedGroup(group_id=g.group_id, state=_state(g.group_state),
                                      group_epoch=g.group_epoch, coordinator=node,
                                      members=tuple(_member(kind, m, g) for m in g.members)))
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


def _member(kind: GroupType, m: Any, g: Any) -> DescribedMember:
    if kind == GroupType.STREAMS:
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

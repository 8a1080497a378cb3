"""The workloads of the fleet benchmark (bench/fleet.py; its recording is replayed by
tests/test_replay_fleet.py).

A fleet is a list of :class:`Workload` objects, each one consumer group (or Spark query) with
the topic it reads, the processes that consume it, a schedule of actions (scale, rolling
deploy, turning bad, kill, offset reset, records deleted) and its ground truth: what status
lagwatch must show, from when, and within how long.

Ground truth is recorded by the workload itself at the moment something happens: the
consumer process prints ``TURNED <epoch>`` when its behaviour changes, the harness notes the
time of a SIGKILL or of a backwards commit, a JVM app prints ``BLOCKED <epoch>``. A healthy
group must be ``ok`` in every sample from ``warmup`` after its first member got an assignment
(a Spark query: after its first micro-batch that caught up with the topic, by Spark's own
progress).

Everything runs on loopback against :class:`devenv.kafka.KafkaCluster`; every child process
dies with the harness (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from devenv.kafka import KafkaCluster, die_with_parent
from devenv.procs import terminate
from exporter.evaluate.constants import REWIND_HOLD_CYCLES  # cycles a rewind is shown

ROOT = Path(__file__).resolve().parent.parent
KIP848_SESSION_TIMEOUT = 45.0  # broker default group.consumer.session.timeout.ms (not set by devenv)
CLASSIC_SESSION_TIMEOUT = 10.0  # what the fleet's classic consumers use (session.timeout.ms)
REPORT_INTERVAL = 5.0  # lagwatch_client's default
SPARK_HEARTBEAT = 5.0  # spark_metrics.LagListener's default heartbeat_interval

# The alerts a correct detection should eventually raise (alerts/lagwatch.rules.yml).
EXPECTED_ALERTS: dict[str, tuple[str, ...]] = {
    "lagging": ("KafkaConsumerGroupLagGrowing", "KafkaConsumerGroupLagHigh"),
    "stalled": ("KafkaConsumerGroupStalled",),
    "livelocked": ("KafkaConsumerGroupLivelocked",),
    "stopped": ("KafkaConsumerGroupStoppedWithLag",),
    "rewind": ("KafkaConsumerGroupRewind",),
}
SPARK_ALERTS: dict[str, tuple[str, ...]] = {
    "livelocked": ("KafkaConsumerSparkQueryLivelocked",),
    "lagging": ("KafkaConsumerSparkQueryLagHigh",),
    "stopped": ("KafkaConsumerGroupStoppedWithLag",),
}


@dataclass(frozen=True)
class Params:
    """Thresholds the exporter runs with, and the bounds derived from them."""

    interval: float = 3.0
    stall_after: float = 30.0
    livelock_after: float = 30.0
    lag_seconds: float = 600.0
    margin: float = 5.0  # see bound()
    warmup_cycles: int = 2

    @property
    def warmup(self) -> float:
        return self.warmup_cycles * self.interval

    def bound(self, status: str, *, session: float = CLASSIC_SESSION_TIMEOUT,
              instrumented: bool = False, spark: bool = False) -> float:
        """Longest acceptable detection delay: the threshold for that status (docs/statuses.md), plus 2
        cycles (the first cycle after the threshold can start up to one interval later, and the
        rules that need two cycles of evidence, `stopped` and `lagging`, need one more), plus
        ``margin`` (the cycle's own duration on a loaded machine and the recorder's 1 s poll)."""
        cycles = 2 * self.interval + self.margin
        if status == "lagging":
            # docs/statuses.md: lag grown by more than one commit gap + one interval over two commits
            # or more; the fleet's slow consumers (a fifth of what arrives) get there in 3-4
            return 2 * self.interval + cycles
        if status == "stalled":
            return self.stall_after + cycles
        if status == "livelocked":
            if spark:
                return self.livelock_after + SPARK_HEARTBEAT + cycles
            if instrumented:
                return self.livelock_after + REPORT_INTERVAL + cycles
            return self.stall_after + cycles  # rejoin loop: stall_after + two rejoins
        if status == "stopped":
            return session + cycles
        if status == "rewind":
            return self.interval + cycles  # confirmed at the sample after the backward move
        raise ValueError(status)


@dataclass(frozen=True)
class Change:
    """From ``t`` on (epoch seconds) lagwatch must show ``expect`` (None: not judged)."""

    t: float
    expect: str | None
    bound: float | None = None
    note: str = ""


# Seconds after one of the harness's faults ends during which a consumer's session loss is
# still the fault's doing (the groups it coordinated move and rejoin).
FAULT_SETTLE = 60.0
DIED = "a process died on its own"  # the note of the change after which nothing is judged
LOST = "partitions lost: its session timed out"  # the note of a consumer's lost partitions


# -- librdkafka clients in child processes --------------------------------------------------------
#
# librdkafka can abort its whole process on an internal assertion when a broker dies under an
# admin request (seen here: rd_kafka_enq_once_del_source_return "eonce->refcnt > 0" during the
# coordinator SIGKILL; docs/reliability.md reports the same for the exporter, which is why its clients live
# in a worker process). The harness must outlive the faults it injects, so every Kafka client it
# uses while the fleet runs lives in a child process.

def in_child(fn: Callable[..., Any], *args: Any, timeout: float = 120) -> Any:
    """``fn(*args)`` in a fresh interpreter (multiprocessing spawn); its result, or raises."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_child_entry, fn, *args).result(timeout)


def _child_entry(fn: Callable[..., Any], *args: Any) -> Any:
    die_with_parent()
    return fn(*args)


def commit_back(bootstrap: str, group: str, topic: str, partitions: int, back: int) -> float:
    """Commit the group's offsets ``back`` records earlier (the group must be empty); returns
    when the commit was done."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "log_level": 2})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        back_to = [TopicPartition(tp.topic, tp.partition, max(0, tp.offset - back))
                   for tp in committed if tp.offset >= 0]
        deadline = time.monotonic() + 30
        while True:
            try:
                c.commit(offsets=back_to, asynchronous=False)
                return time.time()
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def delete_half_unread(bootstrap: str, group: str, topic: str, partitions: int) -> tuple[float, list]:
    """Delete the records between the group's committed offset and halfway to the HW; returns
    (when, [(partition, new log start)])."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "log_level": 2})
    try:
        cut = []
        for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30):
            _lo, hi = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
            if tp.offset >= 0 and hi > tp.offset:
                cut.append(TopicPartition(tp.topic, tp.partition, tp.offset + (hi - tp.offset) // 2))
    finally:
        c.close()
    if cut:
        for f in admin.delete_records(cut, request_timeout=30).values():
            f.result(30)
    return time.time(), [(x.partition, x.offset) for x in cut]


def coordinators(bootstrap: str, groups: list[str]) -> dict[str, int]:
    """Group -> node id of its coordinator (consumer groups; those that fail are left out)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    out: dict[str, int] = {}
    for g, fut in admin.describe_consumer_groups(groups, request_timeout=15).items():
        with contextlib.suppress(Exception):
            out[g] = fut.result(20).coordinator.id
    return out


def produce_forever(bootstrap: str, topics: list[dict[str, Any]], t0: float) -> None:
    """Child process: the plain producer and the transactional one, until SIGTERM."""
    die_with_parent()
    specs = [TopicSpec(**t) for t in topics]

    class Cluster:  # what the producers read from a KafkaCluster
        bootstrap_servers = bootstrap

    threads: list[Any] = [Producers(Cluster, specs, t0)]  # type: ignore[arg-type]
    threads += [TxnProducer(Cluster, t) for t in specs if t.transactional]  # type: ignore[arg-type]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.stop_flag.set()
    for t in threads:
        t.join(15)


class ProducerProcess:
    """The fleet's producers in a child process (see in_child for why)."""

    def __init__(self, cluster: KafkaCluster, topics: list[TopicSpec], t0: float) -> None:
        import dataclasses
        import multiprocessing

        specs = [dataclasses.asdict(t) for t in topics]
        self.proc = multiprocessing.get_context("spawn").Process(
            target=produce_forever, args=(cluster.bootstrap_servers, specs, t0), daemon=True,
            name="fleet-producers")
        self.proc.start()

    def alive(self) -> bool:
        return self.proc.is_alive()

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


# -- processes ----------------------------------------------------------------------------------

class Proc:
    """A child process whose stdout lines are kept with their arrival time."""

    def __init__(self, name: str, cmd: list[str], log_dir: Path, cwd: Path = ROOT) -> None:
        self.name = name
        self.lines: list[tuple[float, str]] = []
        self.expected_exit = False
        self.started = time.time()
        self.log_path = log_dir / f"{name}.log"
        with open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, text=True,
                                         preexec_fn=die_with_parent)
        threading.Thread(target=self._pump, daemon=True, name=f"pump-{name}").start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.strip()))

    def event(self, word: str) -> float | None:
        """The epoch printed after ``word`` on its first line (else the line's arrival time)."""
        return next(iter(self.events(word)), None)

    def events(self, word: str) -> list[float]:
        """The epochs printed after ``word`` on every line starting with it (else each
        line's arrival time)."""
        out = []
        for t, line in list(self.lines):
            parts = line.split()
            if parts and parts[0] == word:
                try:
                    out.append(float(parts[1]))
                except (IndexError, ValueError):
                    out.append(t)
        return out

    def wait_event(self, word: str, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.event(word)
            if got is not None:
                return got
            if self.proc.poll() is not None:
                return self.event(word)
            time.sleep(0.1)
        return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    def terminate(self, timeout: float = 20) -> None:
        self.expected_exit = True
        terminate(self.proc, timeout)

    def kill(self) -> None:
        self.expected_exit = True
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def unexpected_exit(self) -> bool:
        return not self.expected_exit and self.proc.poll() is not None

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


# -- topics and producers -----------------------------------------------------------------------

@dataclass
class TopicSpec:
    name: str
    partitions: int = 3
    rate: float = 10.0  # records per second outside bursts
    burst_rate: float = 0.0  # records per second during a burst
    bursts: tuple[tuple[float, float], ...] = ()  # (start, duration), seconds after t0
    keys: int = 0  # > 0: keyed records drawn from this many keys (compacted topics)
    config: dict[str, str] = field(default_factory=dict)
    prefill: int = 0  # records written at creation
    transactional: bool = False  # written by TxnProducer, not Producers
    produced: int = 0

    def rate_at(self, rel: float) -> float:
        if any(s <= rel < s + d for s, d in self.bursts):
            return self.burst_rate
        return self.rate


def create_topics(cluster: KafkaCluster, topics: list[TopicSpec]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    rf = min(3, len(cluster.brokers))
    futs = admin.create_topics([NewTopic(t.name, num_partitions=t.partitions, replication_factor=rf,
                                         config=t.config) for t in topics], request_timeout=60)
    for f in futs.values():
        f.result(60)
    pre = [t for t in topics if t.prefill]
    if pre:
        p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5})
        for t in pre:
            for i in range(t.prefill):
                p.produce(t.name, value=b"p" * 100, partition=i % t.partitions)
            t.produced += t.prefill
        assert p.flush(60) == 0, "prefill not delivered"


class Producers(threading.Thread):
    """One idempotent producer writing every non-transactional topic at its rate (with bursts)."""

    def __init__(self, cluster: KafkaCluster, topics: list[TopicSpec], t0: float) -> None:
        super().__init__(daemon=True, name="fleet-producer")
        self.topics = [t for t in topics if not t.transactional]
        self.t0 = t0
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 20,
                                  "enable.idempotence": True, "message.timeout.ms": 120_000,
                                  "log_level": 3})
        self.stop_flag = threading.Event()
        self.errors = 0

    def _cb(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors += 1

    def run(self) -> None:
        tick = 0.1
        credit = {t.name: 0.0 for t in self.topics}
        counter = itertools.count()
        while not self.stop_flag.wait(tick):
            rel = time.time() - self.t0
            for t in self.topics:
                credit[t.name] += t.rate_at(rel) * tick
                while credit[t.name] >= 1:
                    credit[t.name] -= 1
                    i = next(counter)
                    kw: dict[str, Any] = {"value": b"x" * 100, "on_delivery": self._cb}
                    if t.keys:
                        kw["key"] = f"key-{random.randrange(t.keys)}".encode()
                    else:
                        kw["partition"] = i % t.partitions
                    try:
                        self.producer.produce(t.name, **kw)
                        t.produced += 1
                    except BufferError:
                        self.errors += 1
            self.producer.poll(0)
        self.producer.flush(10)


class TxnProducer(threading.Thread):
    """Transactions of ``per_txn`` records every ``every`` seconds; one in ``abort_every`` is
    aborted. Retriable errors abort and retry; a fatal one makes a new producer (a broker
    restart or a transaction coordinator failover can fence it)."""

    def __init__(self, cluster: KafkaCluster, topic: TopicSpec, every: float = 0.5,
                 per_txn: int = 6, abort_every: int = 4) -> None:
        super().__init__(daemon=True, name="fleet-txn-producer")
        self.bootstrap = cluster.bootstrap_servers
        self.topic = topic
        self.every, self.per_txn, self.abort_every = every, per_txn, abort_every
        self.stop_flag = threading.Event()
        self.committed = self.aborted = self.errors = 0
        self.recreated = 0

    def _new(self) -> Producer:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"{self.topic.name}-tx",
                      "linger.ms": 5, "transaction.timeout.ms": 60_000, "log_level": 3})
        p.init_transactions(60)
        return p

    def run(self) -> None:
        p: Producer | None = None
        n = 0
        while not self.stop_flag.wait(self.every):
            try:
                if p is None:
                    p = self._new()
                n += 1
                p.begin_transaction()
                for i in range(self.per_txn):
                    p.produce(self.topic.name, value=b"t" * 100, partition=(n + i) % self.topic.partitions)
                    self.topic.produced += 1
                if n % self.abort_every == 0:
                    p.abort_transaction(30)
                    self.aborted += 1
                else:
                    p.commit_transaction(30)
                    self.committed += 1
            except KafkaException as e:
                self.errors += 1
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if p is not None and err is not None and err.txn_requires_abort():
                    with contextlib.suppress(KafkaException):
                        p.abort_transaction(30)
                elif err is None or not err.retriable():
                    p = None  # fatal (fenced, coordinator gone for good): start afresh
                    self.recreated += 1
                    time.sleep(1)
        if p is not None:
            p.flush(10)


# -- workloads ----------------------------------------------------------------------------------

@dataclass
class Ctx:
    """What workloads need from the harness."""

    cluster: KafkaCluster
    t0: float
    log_dir: Path
    log: Callable[[str], None] = print

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers


Action = tuple[float, str, Callable[["Ctx"], None]]  # (seconds after t0, label, what)


class Workload:
    """One consumer group (or Spark query): topics, processes, schedule and ground truth."""

    gtype = "classic"

    def __init__(self, kind: str, group: str, topic: TopicSpec, *, healthy: bool,
                 expect: str = "ok", description: str = "", start_at: float = 0.0) -> None:
        self.kind = kind
        self.group = group
        self.topic = topic
        self.healthy = healthy
        self.expect = expect
        self.description = description
        self.start_at = start_at
        self.actions: list[Action] = []
        self.events: dict[str, float] = {}  # what happened when (epoch seconds)
        self.notes: list[str] = []
        self.procs: list[Proc] = []
        self.instrumented = False
        self.session = CLASSIC_SESSION_TIMEOUT
        self.alert_marks: list[tuple[float, str]] = []  # (when, alert name) expected from then
        # The harness's own faults (bench.fleet.Fault: start, end, 0 while it lasts): a group
        # is judged through them whatever its consumers lose.
        self.faults: list[Any] = []

    # lifecycle -------------------------------------------------------------------
    def setup(self, ctx: Ctx) -> None:
        """Before t0 (after topics exist)."""

    def start(self, ctx: Ctx) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()

    def ready_time(self) -> float | None:
        """When the workload is in its steady state: its first member got an assignment and,
        for the Python consumers, first read a record under 2 s old or reached the end of a
        partition (CAUGHT_UP). At the fleet's start the
        2 cores are saturated and a consumer can stay 15-30 s behind for its first minute
        (the compacted topic's did, in a run on 7a2018b): lagging, truly, not yet healthy."""
        ts = [t for p in self.procs if (t := p.event("READY")) is not None]
        if not ts:
            return self.events.get("ready")
        caught = [t for p in self.procs if (t := p.event("CAUGHT_UP")) is not None]
        return max(min(ts), min(caught)) if caught else min(ts)

    def check(self) -> list[str]:
        """Problems of the harness itself (a healthy process died on its own)."""
        out = []
        for p in self.procs:
            if p.unexpected_exit() and not getattr(p, "reported", False):
                p.reported = True  # type: ignore[attr-defined]
                out.append(f"{self.group}: process {p.name} exited {p.proc.returncode}: {p.tail(300)!r}")
                self.events.setdefault("harness_failure", time.time())
        return out

    # ground truth ----------------------------------------------------------------
    def truth(self, p: Params) -> list[Change]:
        ready = self.ready_time()
        if ready is None:
            return []
        turn = self.events.get("turn") if not self.healthy else None
        out = []
        if turn is None or ready + p.warmup < turn:  # a Spark query's warm-up may outlast it
            out.append(Change(ready + p.warmup, "ok", note="warm-up over"))
        if turn is not None:
            out.append(Change(turn, self.expect, self.bound(p), note="behaviour turned bad"))
        return self._cut(out)

    def _cut(self, changes: list[Change]) -> list[Change]:
        """The changes in time order, none judged after a process of the workload died on its
        own (a harness fault); a cut made before is made again, so that changes added since
        are cut too."""
        out = sorted((c for c in changes if c.note != DIED), key=lambda c: c.t)
        failed = self.events.get("harness_failure")
        if failed is None:
            return out
        return [c for c in out if c.t < failed] + [Change(failed, None, note=DIED)]

    def bound(self, p: Params) -> float:
        return p.bound(self.expect, session=self.session, instrumented=self.instrumented,
                       spark=self.gtype == "spark")

    def expected_alerts(self) -> tuple[str, ...]:
        table = SPARK_ALERTS if self.gtype == "spark" else EXPECTED_ALERTS
        return () if self.healthy else table.get(self.expect, ())


class ConsumerGroup(Workload):
    """Python consumers (devenv/fleet_consumer.py), 1..n members."""

    def __init__(self, kind: str, group: str, topic: TopicSpec, *, healthy: bool, expect: str = "ok",
                 description: str = "", protocol: str = "classic", members: int = 1,
                 behaviour: str = "healthy", args: tuple[str, ...] = (), static: bool = False,
                 start_at: float = 0.0) -> None:
        super().__init__(kind, group, topic, healthy=healthy, expect=expect, description=description,
                         start_at=start_at)
        self.gtype = protocol
        self.protocol = protocol
        self.initial_members = members
        self.behaviour = behaviour
        self.args = args
        self.static = static
        self.instrumented = "--instrument" in args
        self.session = KIP848_SESSION_TIMEOUT if protocol == "consumer" else CLASSIC_SESSION_TIMEOUT
        self.members: list[Proc] = []
        self._seq = itertools.count(1)
        self._lock = threading.Lock()

    def _spawn(self, ctx: Ctx, slot: int | None = None) -> Proc:
        n = next(self._seq)
        slot = n if slot is None else slot
        cmd = [sys.executable, "-m", "devenv.fleet_consumer", "--bootstrap", ctx.bootstrap,
               "--group", self.group, "--topic", self.topic.name, "--client-id", f"{self.group}-{slot}",
               "--behaviour", self.behaviour, "--protocol", self.protocol, *self.args]
        if self.static:
            cmd += ["--instance-id", f"{self.group}-instance-{slot}"]
        p = Proc(f"{self.group}-m{n}", cmd, ctx.log_dir)
        p.slot = slot  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def start(self, ctx: Ctx) -> None:
        with self._lock:
            for i in range(self.initial_members):
                self.members.append(self._spawn(ctx, i + 1))
        self._seq = itertools.count(self.initial_members + 1)

    # actions -------------------------------------------------------------------------
    def scale(self, n: int) -> Callable[[Ctx], None]:
        def act(ctx: Ctx) -> None:
            with self._lock:
                while len(self.members) < n:
                    self.members.append(self._spawn(ctx))
                leaving = self.members[n:]
                del self.members[n:]
            for p in reversed(leaving):
                p.terminate()
            ctx.log(f"{self.group}: scaled to {n} members")
        return act

    def roll(self, pause: float = 5.0) -> Callable[[Ctx], None]:
        """Rolling deploy, one member at a time. Static members (group.instance.id) stop, stay
        in the group for ``pause`` and come back with the same instance id within the session
        timeout; dynamic members are replaced surge-first (new one assigned, then old one stops)."""
        def act(ctx: Ctx) -> None:
            with self._lock:
                olds = list(self.members)
            for old in olds:
                slot = getattr(old, "slot", None)
                if self.static:
                    old.terminate()
                    time.sleep(pause)
                    new = self._spawn(ctx, slot)
                    new.wait_event("READY", 60)
                else:
                    new = self._spawn(ctx, slot)
                    new.wait_event("READY", 60)
                    old.terminate()
                with self._lock:
                    self.members = [new if m is old else m for m in self.members]
            ctx.log(f"{self.group}: rolling deploy done")
        return act

    def turn(self) -> Callable[[Ctx], None]:
        def act(ctx: Ctx) -> None:
            with self._lock:
                members = list(self.members)
            for m in members:
                m.signal(signal.SIGUSR1)
            ts = [t for m in members if (t := m.wait_event("TURNED", 10)) is not None]
            if ts:
                self.events["turn"] = min(ts)
            ctx.log(f"{self.group}: turned {self.behaviour}")
        return act

    def kill(self) -> Callable[[Ctx], None]:
        def act(ctx: Ctx) -> None:
            with self._lock:
                members, self.members = list(self.members), []
            t = time.time()
            for m in members:
                m.kill()
            self.events["turn"] = t
            ctx.log(f"{self.group}: SIGKILLed")
        return act

    def rewind(self, back: int, away: float = 10.0) -> Callable[[Ctx], None]:
        """Stop the consumer (it leaves), commit offsets ``back`` records earlier, start it
        again ``away`` seconds later: `kafka-consumer-groups --reset-offsets` during a deploy.
        (A consumer restarted at once re-reads a small rewind within one sampling interval,
        before any cycle could see the offset move backwards.)"""
        def act(ctx: Ctx) -> None:
            with self._lock:
                members, self.members = list(self.members), []
            self.events["stop"] = time.time()
            for m in members:
                m.terminate()
            try:
                self.events["turn"] = in_child(commit_back, ctx.bootstrap, self.group, self.topic.name,
                                               self.topic.partitions, back)
            finally:
                time.sleep(away)
            with self._lock:
                self.members.append(self._spawn(ctx, 1))
            ctx.log(f"{self.group}: offsets reset {back} records back, consumer restarted")
        return act

    def _losses(self, changes: list[Change], p: Params) -> list[Change]:
        """Not judged while a healthy consumer (or a bad one before its turn) is without the
        partitions librdkafka took away (LOST: its session timed out, on a machine whose
        coordinators are slow to answer), and ``ok`` again a warm-up after it caught up
        (CAUGHT_UP again): the group really stopped consuming meanwhile. Not for losses
        during the harness's own faults (up to FAULT_SETTLE after one ends): lagwatch must
        ride those out."""
        turn = self.events.get("turn") if not self.healthy else None
        caught = sorted(t for pr in self.procs for t in pr.events("CAUGHT_UP"))
        gaps: list[tuple[float, float]] = []  # [lost, ok again)
        for lost in sorted(t for pr in self.procs for t in pr.events("LOST")):
            if (turn is not None and lost >= turn) or any(
                    f.start <= lost and (not f.end or lost <= f.end + FAULT_SETTLE) for f in self.faults):
                continue
            back = next((t + p.warmup for t in caught if t > lost), math.inf)
            if gaps and lost <= gaps[-1][1]:
                gaps[-1] = (gaps[-1][0], max(gaps[-1][1], back))
            else:
                gaps.append((lost, back))
        if not gaps:
            return changes
        out = [c for c in changes if c.expect != "ok" or not any(a <= c.t < b for a, b in gaps)]
        for a, b in gaps:
            out.append(Change(a, None, note=LOST))
            if b < (turn if turn is not None else math.inf):
                out.append(Change(b, "ok", note="caught up again after the loss"))
        return self._cut(out)

    def delete_records(self) -> Callable[[Ctx], None]:
        """Delete records between the committed offset and the HW (retention catching up with a
        consumer that is behind): the group's next unread records are lost."""
        def act(ctx: Ctx) -> None:
            t, cut = in_child(delete_half_unread, ctx.bootstrap, self.group, self.topic.name,
                              self.topic.partitions)
            if cut:
                self.events["records_deleted"] = t
                self.alert_marks.append((t, "KafkaConsumerGroupNearRetention"))
                ctx.log(f"{self.group}: records deleted up to {cut}")
        return act

    def truth(self, p: Params) -> list[Change]:
        out = self._losses(super().truth(p), p)
        if "stop" in self.events:  # rewind: not judged while the consumer is away
            out.append(Change(self.events["stop"], None, note="consumer stopped for the offset reset"))
            turn = self.events.get("turn")
            if turn is not None:
                # confirmed a cycle after the reset, shown for REWIND_HOLD_CYCLES cycles; then
                # not judged while the restarted consumer catches up, and ok again 30 s later
                held = turn + (REWIND_HOLD_CYCLES + 2) * p.interval + p.margin
                out.append(Change(held, None, note="rewind hold over; consumer catching up"))
                out.append(Change(held + 30, "ok", note="consumer caught up again"))
            out = self._cut(out)
        return out


class JvmGroup(Workload):
    """A Kafka Streams app (streams group) or a KafkaShareConsumer (share group)."""

    def __init__(self, kind: str, group: str, topic: TopicSpec, *, app: str, healthy: bool,
                 expect: str = "ok", description: str = "", after: int = 10**15) -> None:
        super().__init__(kind, group, topic, healthy=healthy, expect=expect, description=description)
        self.app = app
        self.gtype = "streams" if app == "StreamsApp" else "share"
        self.after = after
        self.session = 6.0  # group.streams/share.session.timeout.ms of devenv.kafka

    def setup(self, ctx: Ctx) -> None:
        if self.app == "ShareApp":
            from devenv.groups_tool import set_share_auto_offset_reset_earliest
            set_share_auto_offset_reset_earliest(ctx.cluster, self.group)

    def start(self, ctx: Ctx) -> None:
        from devenv.jvm_apps import JVM_OPTS, classpath
        from devenv.kafka import java_binary

        if self.app == "StreamsApp":
            args = [f"bootstrap={ctx.bootstrap}", f"app={self.group}", f"topic={self.topic.name}",
                    f"after={self.after}", "prop.group.protocol=streams"]
            cp = classpath(streams=True)
        else:
            mode = "healthy" if self.healthy else "wedged"
            args = [f"bootstrap={ctx.bootstrap}", f"group={self.group}", f"topic={self.topic.name}",
                    f"mode={mode}", f"after={self.after}", f"client={self.group}-1"]
            cp = classpath()
        self.procs.append(Proc(self.group, [java_binary(), *JVM_OPTS, "-cp", cp, self.app, *args],
                               ctx.log_dir))

    def truth(self, p: Params) -> list[Change]:
        blocked = self.procs[0].event("BLOCKED") if self.procs else None
        if blocked is not None:
            self.events["turn"] = blocked
        return super().truth(p)


SPARK_WARMUP = 60.0  # seconds after a query's start before the fleet judges it


class SparkQuery(Workload):
    """A Structured Streaming query in the fleet's one PySpark driver (tests/support/spark_driver.py);
    a bad one hangs its micro-batch in a Python UDF once its flag file exists."""

    gtype = "spark"

    def __init__(self, kind: str, group: str, topic: TopicSpec, *, healthy: bool, expect: str = "ok",
                 description: str = "", driver: SparkDriver, trigger_ms: int = 500) -> None:
        super().__init__(kind, group, topic, healthy=healthy, expect=expect, description=description)
        self.driver = driver
        self.trigger_ms = trigger_ms
        self.flag: Path | None = None
        # (time, Spark's own end and latest offsets, the listener's end offsets), summed over
        # partitions: a wrong status is explained by whether the query or its reports lagged.
        self.spark_view: list[tuple[float, int | None, int | None, int | None]] = []
        self._stopped = threading.Event()

    def start(self, ctx: Ctx) -> None:
        d = self.driver.get()
        if d is None:
            self.notes.append("no Spark driver: " + self.driver.error)
            return
        if not self.healthy:
            self.flag = ctx.log_dir / f"{self.group}.hang"
        d.call("start", name=self.group, topic=self.topic.name, trigger_ms=self.trigger_ms,
               hang_flag=None if self.flag is None else str(self.flag))

        # Ready once a batch caught up with the topic by Spark's own progress, after a
        # warm-up: a fresh driver's micro-batches outlast the 500 ms trigger while its JVM
        # warms up under the fleet's start, and the query really is behind (its lag grows)
        # then, even after catching up once.
        started = time.monotonic()

        def first_batch() -> None:
            time.sleep(SPARK_WARMUP)
            while time.monotonic() < started + 180 and "ready" not in self.events:
                with contextlib.suppress(Exception):
                    if d.call("query", name=self.group)["caught_up"]:
                        self.events.setdefault("ready", time.time())  # unless it turned first
                        return
                time.sleep(1)
        threading.Thread(target=first_batch, daemon=True).start()

        def watch() -> None:
            while not self._stopped.wait(2.0):
                with contextlib.suppress(Exception):
                    own = d.call("query", name=self.group)
                    heard = d.call("listener", name=self.group)["end_offset_sum"]
                    self.spark_view.append((time.time(), own["end_offsets"], own["latest_offsets"], heard))
        threading.Thread(target=watch, daemon=True).start()

    def hang(self) -> Callable[[Ctx], None]:
        def act(ctx: Ctx) -> None:
            if self.flag is None:
                return
            self.flag.write_text("hang")
            self.events["turn"] = time.time()
            self.events.setdefault("ready", self.events["turn"])  # judged from the turn on
            ctx.log(f"{self.group}: batch hangs from now on")
        return act

    def truth(self, p: Params) -> list[Change]:
        # Bad from when its batch really hung (the UDF's first blocked row), as the JVM
        # groups are from their BLOCKED line: in a 30-minute run the query, 40 s behind,
        # completed batches for 30 s after the flag appeared.
        if self.flag is not None:
            with contextlib.suppress(OSError, ValueError):
                held = float(self.flag.with_name(self.flag.name + ".held").read_text())
                self.events["turn"] = max(self.events.get("turn", 0.0), held)
        return super().truth(p)

    def stop(self) -> None:
        self._stopped.set()
        if self.flag is not None:
            with contextlib.suppress(OSError):
                self.flag.unlink()


class SparkDriver:
    """The one PySpark driver process, started in the background (it takes a while). The
    thread that starts it stays until :meth:`close`: the driver dies with that thread."""

    def __init__(self) -> None:
        self.proc: Any = None
        self.error = ""
        self.done = threading.Event()
        self.closed = threading.Event()

    def start(self, cluster: KafkaCluster) -> None:
        def run() -> None:
            try:
                from devenv.jars import SPARK_VERSION, spark_kafka_jars
                from tests.support.spark_proc import SparkDriverProcess

                self.proc = SparkDriverProcess(Path(sys.executable), cluster.bootstrap_servers,
                                               spark_kafka_jars(SPARK_VERSION), SPARK_HEARTBEAT,
                                               start_timeout=240)
            except Exception as e:  # noqa: BLE001 - the fleet runs without Spark then
                self.error = f"{type(e).__name__}: {str(e)[:500]}"
            finally:
                self.done.set()
            self.closed.wait()
        threading.Thread(target=run, daemon=True, name="spark-driver").start()

    def get(self, timeout: float = 300) -> Any:
        self.done.wait(timeout)
        return self.proc

    def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.close(timeout=60)
            if self.proc.proc.poll() is None:
                self.proc.proc.kill()
        self.closed.set()


# -- the fleet ----------------------------------------------------------------------------------

def _bursts(first: float, every: float, length: float, until: float) -> tuple[tuple[float, float], ...]:
    out = []
    t = first
    while t < until:
        out.append((t, length))
        t += every
    return tuple(out)


BATCH_COMMITS = ("--commit", "batch", "--batch-records", "100", "--batch-seconds", "5")


@dataclass
class _Fleet:
    """A fleet being built: the profile's settings and the workloads so far, in order."""

    full: bool  # the ``full`` profile (else ``small``)
    end: float  # the run's duration, seconds
    prefix: str  # the run's prefix of every topic and group name
    driver: SparkDriver | None
    ws: list[Workload] = field(default_factory=list)

    @property
    def bursts(self) -> tuple[tuple[float, float], ...]:
        return _bursts(40, 180.0 if self.full else 150.0, 30, self.end - 20)

    def topic(self, name: str, **kw: Any) -> TopicSpec:
        return TopicSpec(f"{self.prefix}-{name}", **kw)

    def group(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def cg(self, kind: str, name: str, t: TopicSpec, **kw: Any) -> ConsumerGroup:
        w = ConsumerGroup(kind, self.group(name), t, **kw)
        self.ws.append(w)
        return w

    def turns(self, first: float) -> list[tuple[str, float]]:
        """(name suffix, turn time) of each copy of a bad kind: two in the full profile."""
        out = [("", first)]
        if self.full:
            out.append(("-b", max(first + 120, 0.33 * self.end)))
        return out


def build_fleet(profile: str, duration: float, prefix: str, driver: SparkDriver | None,
                jvm_bad: bool | None = None) -> list[Workload]:
    """The fleet: ``small`` (one group per kind, for a 5-minute run, ~30 groups) or ``full``
    (about 40 groups, several of the bad kinds twice, for 15 minutes and more)."""
    f = _Fleet(full=profile == "full", end=duration, prefix=prefix, driver=driver)
    # Healthy, never to be paged
    _steady(f)
    _scaling(f)
    _transactional_and_compacted(f)
    _rolling_jvm_and_spark(f)
    # Bad, to be detected
    t1 = 150.0 if f.full else 80.0
    _turning(f, t1)
    _bad_more(f, t1, f.full if jvm_bad is None else jvm_bad)
    return f.ws


def _steady(f: _Fleet) -> None:
    """Healthy groups of steady, bursty, idle and auto-committing consumers."""
    full, topic, cg, bursts = f.full, f.topic, f.cg, f.bursts
    cg("steady", "steady", topic("steady", rate=10), healthy=True,
       description="classic, 3 partitions, 10 rec/s, commit per record")
    cg("steady", "steady-848", topic("steady-848", rate=10), healthy=True, protocol="consumer",
       description="KIP-848, 3 partitions, 10 rec/s")
    if full:
        cg("steady", "steady-instrumented", topic("steady-instr", rate=10), healthy=True,
           args=("--instrument",), description="classic, instrumented (reports every 5 s)")
    cg("bursty", "bursty", topic("bursty", rate=2, burst_rate=20, bursts=bursts), healthy=True,
       args=BATCH_COMMITS, description="2 rec/s with 10x bursts for 30 s; commits every 100 records or 5 s")
    cg("bursty", "bursty-tail", topic("bursty-quiet", rate=0, burst_rate=20, bursts=bursts), healthy=True,
       args=BATCH_COMMITS, description="quiet topic with 30 s bursts; commits every 100 records or 5 s "
       "(the burst's tail stays uncommitted until the next burst)")
    cg("idle", "idle", topic("idle", rate=0, prefill=300), healthy=True, args=("--instrument",),
       description="topic idle after 300 records; instrumented")
    if full:
        cg("idle", "idle-plain", topic("idle-plain", rate=0, prefill=30), healthy=True,
           description="topic idle after 30 records")
    cg("autocommit", "autocommit", topic("autocommit", rate=10), healthy=True,
       args=("--commit", "auto", "--auto-commit-ms", "5000"),
       description="classic, enable.auto.commit every 5 s")
    if full:
        cg("autocommit", "autocommit-848", topic("autocommit-848", rate=10), healthy=True,
           protocol="consumer", args=("--commit", "auto", "--auto-commit-ms", "5000"),
           description="KIP-848, auto-commit every 5 s")


def _scaling(f: _Fleet) -> None:
    """Healthy groups scaled from 1 to 4 members and back, classic and KIP-848."""
    bursts, batch = f.bursts, BATCH_COMMITS
    scale_every = 360.0 if f.full else 1e9
    for name, proto, tname, extra, off, tkw in (
            ("coop-scale", "classic", "coop", ("--assignor", "cooperative-sticky"), 0.0,
             {"rate": 10}),
            ("coop-scale-tail", "classic", "coop-tail", ("--assignor", "cooperative-sticky", *batch), 5.0,
             {"rate": 0, "burst_rate": 20, "bursts": bursts}),
            ("kip848-scale", "consumer", "k848", (), 10.0, {"rate": 10}),
            ("kip848-scale-tail", "consumer", "k848-tail", batch, 15.0,
             {"rate": 0, "burst_rate": 20, "bursts": bursts})):
        if not f.full and name == "kip848-scale-tail":
            continue
        what = "cooperative-sticky classic" if proto == "classic" else "KIP-848"
        tail = " on a quiet topic with bursts, batched commits" if "tail" in name else ""
        w = f.cg("scaling", name, f.topic(tname, partitions=4, **tkw), healthy=True, protocol=proto,
                 args=extra, description=f"{what}, 1->4->1 members{tail}")
        t = 50.0 + off
        while t < f.end - 60:
            w.actions += [(t, "scale to 4", w.scale(4)), (t + 80, "scale to 1", w.scale(1))]
            t += scale_every


def _transactional_and_compacted(f: _Fleet) -> None:
    """Healthy groups on a transactional topic and on a compacted one."""
    full, topic, cg, end = f.full, f.topic, f.cg, f.end
    txn = topic("txn", rate=0, transactional=True)
    cg("transactional", "txn", txn, healthy=True, args=("--isolation", "read_committed"),
       description="read_committed, transactions of 6 records every 0.5 s, 1 in 4 aborted")
    if full:
        cg("transactional", "txn-848", txn, healthy=True, protocol="consumer",
           args=("--isolation", "read_committed"), description="KIP-848, read_committed, same topic")
    compact = topic("compacted", rate=20, keys=40,
                    config={"cleanup.policy": "compact", "segment.ms": "10000",
                            "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                            "delete.retention.ms": "1000"})
    if full:
        cg("compacted", "compacted", compact, healthy=True, description="compacted topic, 40 keys, 20 rec/s")
    cg("compacted", "compacted-late", compact, healthy=True, start_at=0.25 * end if full else 100.0,
       description="starts late on the compacted topic: reads across the offset gaps")


def _rolling_jvm_and_spark(f: _Fleet) -> None:
    """Healthy rolling deploys, Kafka Streams and share groups, and Spark queries."""
    topic, group, driver = f.topic, f.group, f.driver
    roll_every = 240.0 if f.full else 150.0
    for name, static, off in (("rolling-static", True, 100.0), ("rolling-surge", False, 115.0)):
        w = f.cg("rolling deploy", name, topic(name, partitions=4, rate=10), healthy=True, members=2,
                 static=static, description="2 members restarted one by one, "
                 + ("static membership, 5 s away (within session.timeout.ms)" if static
                    else "surge: replacement joins before the old one leaves"))
        t = off
        while t < f.end - 60:
            w.actions.append((t, "rolling deploy", w.roll()))
            t += roll_every
    f.ws.append(JvmGroup("streams", group("streams"), topic("streams", rate=5), app="StreamsApp",
                         healthy=True, description="Kafka Streams, group.protocol=streams"))
    f.ws.append(JvmGroup("share", group("share"), topic("share", rate=5), app="ShareApp", healthy=True,
                         description="share group (KafkaShareConsumer)"))
    if driver is not None:
        f.ws.append(SparkQuery("spark", group("spark"), topic("spark", partitions=1, rate=5),
                               healthy=True, driver=driver,
                               description="Spark Structured Streaming query, 500 ms trigger"))
        # Records wait up to a minute between its micro-batches, by design: not `stalled`.
        f.ws.append(SparkQuery("spark", group("spark-60s"), topic("spark-60s", partitions=1, rate=5),
                               healthy=True, driver=driver, trigger_ms=60_000,
                               description="Spark query with a 60 s trigger: records wait between batches"))


def _turning(f: _Fleet, t1: float) -> None:
    """The bad kinds that turn at ``t1`` (twice in the full profile): slow, not committing,
    wedged, killed, rewound."""
    topic, cg = f.topic, f.cg
    for sfx, t in f.turns(t1):
        w = cg("slow", f"slow{sfx}", topic(f"slow{sfx}", partitions=1, rate=10), healthy=False,
               expect="lagging", behaviour="slow", args=("--delay", "0.5"),
               description="consumes 2 rec/s of 10 from the turn on")
        w.actions.append((t, "turn slow", w.turn()))
        w = cg("nocommit", f"nocommit{sfx}", topic(f"nocommit{sfx}", partitions=2, rate=10), healthy=False,
               expect="stalled", behaviour="nocommit", description="polls, never commits from the turn on")
        w.actions.append((t + 5, "turn nocommit", w.turn()))
        w = cg("wedged", f"wedged{sfx}", topic(f"wedged{sfx}", rate=10), healthy=False, expect="livelocked",
               behaviour="wedge", args=("--instrument",),
               description="instrumented; its poll loop wedges, librdkafka keeps heartbeating")
        w.actions.append((t + 10, "turn wedge", w.turn()))
        w = cg("killed", f"killed{sfx}", topic(f"killed{sfx}", rate=10), healthy=False, expect="stopped",
               description="SIGKILLed (classic, session.timeout.ms 10 s)")
        w.actions.append((t + 15, "kill", w.kill()))
        w = cg("rewind", f"rewind{sfx}", topic(f"rewind{sfx}", rate=10), healthy=False, expect="rewind",
               description="stopped, offsets reset 600 records back, restarted 10 s later")
        w.actions.append((t + 25, "reset offsets", w.rewind(600)))
    if f.full:
        w = cg("nocommit", "nocommit-848", topic("nocommit-848", partitions=2, rate=10), healthy=False,
               expect="stalled", behaviour="nocommit", protocol="consumer",
               description="KIP-848, polls, never commits")
        w.actions.append((t1 + 20, "turn nocommit", w.turn()))
        w = cg("slow", "slow-848", topic("slow-848", partitions=1, rate=10), healthy=False, expect="lagging",
               behaviour="slow", protocol="consumer", args=("--delay", "0.5"),
               description="KIP-848, consumes 2 rec/s of 10")
        w.actions.append((t1 + 20, "turn slow", w.turn()))
        w = cg("wedged", "wedged-848", topic("wedged-848", rate=10), healthy=False, expect="livelocked",
               behaviour="wedge", protocol="consumer", args=("--instrument",),
               description="KIP-848, instrumented, poll loop wedges")
        w.actions.append((t1 + 25, "turn wedge", w.turn()))


def _bad_more(f: _Fleet, t1: float, jvm_bad: bool) -> None:
    """The other bad kinds: max.poll loops, a KIP-848 kill, records lost to retention, a
    hung Spark batch, and (``jvm_bad``) wedged Kafka Streams and share consumers."""
    topic, group, cg = f.topic, f.group, f.cg
    for name, proto, off in (("maxpoll", "classic", 0.0), ("maxpoll-848", "consumer", 5.0)):
        w = cg("max.poll loop", name, topic(name, partitions=1, rate=5), healthy=False, expect="livelocked",
               behaviour="maxpoll", protocol=proto, args=("--max-poll-ms", "6000"),
               description=f"{'classic' if proto == 'classic' else 'KIP-848'}: each record takes 8 s, "
               "max.poll.interval.ms 6 s: kicked out, rejoins, never commits")
        w.actions.append((t1 + off, "turn maxpoll", w.turn()))
    w = cg("killed", "killed-848", topic("killed-848", rate=10), healthy=False, expect="stopped",
           protocol="consumer", description="KIP-848, SIGKILLed (broker session timeout 45 s)")
    w.actions.append((t1 + 10, "kill", w.kill()))
    w = cg("retention", "retention", topic("retention", partitions=1, rate=10), healthy=False,
           expect="lagging", behaviour="slow", args=("--delay", "0.5"),
           description="slow from the turn, then records it has not read are deleted (delete_records)")
    w.actions += [(t1 - 10, "turn slow", w.turn()), (t1 + (110 if f.full else 50), "delete records",
                                                      w.delete_records())]
    if f.driver is not None:
        sq = SparkQuery("spark", group("spark-hung"), topic("spark-hung", partitions=1, rate=5),
                        healthy=False, expect="livelocked", driver=f.driver,
                        description="Spark query whose micro-batch hangs in a UDF")
        sq.actions.append((t1 + 30, "hang batch", sq.hang()))
        f.ws.append(sq)
    if jvm_bad:
        tw = t1 + 30
        f.ws.append(JvmGroup("streams", group("streams-wedged"), topic("streams-wedged", rate=5),
                             app="StreamsApp", healthy=False, expect="stalled", after=int(5 * tw),
                             description="Kafka Streams processor wedges (no interceptor)"))
        f.ws.append(JvmGroup("share", group("share-wedged"), topic("share-wedged", rate=5), app="ShareApp",
                             healthy=False, expect="stalled", after=int(5 * tw),
                             description="share consumer wedges"))


def topics_of(ws: list[Workload]) -> list[TopicSpec]:
    seen: dict[str, TopicSpec] = {}
    for w in ws:
        seen.setdefault(w.topic.name, w.topic)
    return list(seen.values())


def env_ok() -> dict[str, bool]:
    """What this machine can run: Java (JVM apps), pyspark."""
    import importlib.util
    import shutil
    return {"java": shutil.which("java") is not None,
            "pyspark": importlib.util.find_spec("pyspark") is not None,
            "prometheus": os.path.exists("/usr/bin/prometheus") or shutil.which("prometheus") is not None}

"""Start real Apache Kafka brokers (KRaft, combined broker+controller) on loopback.

Used by the tests, the demo and by hand::

    python -m devenv.kafka                 # one broker, prints its address
    python -m devenv.kafka --brokers 3     # three brokers, replication factor 3

Every JVM carries ``-Dlagwatch.owner=<pid>`` and ``-Dlagwatch.dir=<dir>`` and
dies with its parent (PR_SET_PDEATHSIG). A launcher that starts finds JVMs
whose owner is gone (an interrupted run) and kills them and their directories,
so an interrupted run never leaves a broker behind for the next one.

Extra listeners (e.g. SASL_SSL for security tests) can be added next to the
PLAINTEXT one, which stays the inter-broker and admin listener::

    KafkaCluster(listeners=[Listener("SASL_SSL", config={"sasl.enabled.mechanisms": ...})])
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devenv.jars import DEFAULT_KAFKA_VERSION, kafka_libs

_PR_SET_PDEATHSIG = 1


class BrokerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def java_binary() -> str:
    java = shutil.which("java")
    if not java:
        raise BrokerStartError(
            "Java 17+ is required to run Kafka: install it (Debian: apt-get install openjdk-17-jre-headless)"
        )
    return java


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the launching process dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _broker_jvms() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every broker JVM a KafkaCluster started: its argv names its owner."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.startswith(b"-Dlagwatch.owner=") for a in argv):
            yield int(proc.name), argv


def reap_orphans() -> list[int]:
    """Kill broker JVMs left by a launcher process that no longer exists."""
    killed = []
    for pid, argv in _broker_jvms():
        owner = next(a for a in argv if a.startswith(b"-Dlagwatch.owner="))
        owner_pid = int(owner.split(b"=", 1)[1])
        if Path(f"/proc/{owner_pid}").exists():
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        d = next((a for a in argv if a.startswith(b"-Dlagwatch.dir=")), None)
        if d:
            shutil.rmtree(d.split(b"=", 1)[1].decode(), ignore_errors=True)
    # Brokers die with their launcher (PDEATHSIG), so a killed run leaves only its
    # directory: remove those whose recorded owner is gone.
    for root in Path(tempfile.gettempdir()).glob("lagwatch-kafka-*"):
        try:
            owner_pid = int((root / "owner").read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner_pid}").exists():
            shutil.rmtree(root, ignore_errors=True)
    return killed


@dataclass
class Listener:
    """An extra listener on every node, next to PLAINTEXT (inter-broker, tools, admin).

    ``config`` entries are written as ``listener.name.<name lower-cased>.<key>=<value>``,
    Kafka's per-listener form (``sasl.enabled.mechanisms``, ``ssl.keystore.location``,
    ``scram-sha-512.sasl.jaas.config`` ...).
    """

    name: str
    protocol: str = ""  # security protocol; defaults to the name (SSL, SASL_SSL, SASL_PLAINTEXT)
    config: dict[str, str] = field(default_factory=dict)

    @property
    def security_protocol(self) -> str:
        return self.protocol or self.name


@dataclass
class Broker:
    node_id: int
    port: int
    controller_port: int
    dir: Path
    proc: subprocess.Popen | None = None
    paused: bool = False
    ports: dict[str, int] = field(default_factory=dict)  # extra listener name -> port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def listener_address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    @property
    def log_file(self) -> Path:
        return self.dir / "server.log"

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        """SIGSTOP: the JVM keeps its sockets but answers nothing."""
        assert self.proc
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.proc
        os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False


@dataclass
class KafkaCluster:
    """N combined-mode KRaft nodes sharing one temporary directory."""

    brokers_count: int = 1
    version: str = DEFAULT_KAFKA_VERSION
    extra_config: dict[str, str] = field(default_factory=dict)
    heap: str = "768m"
    root: Path | None = None
    brokers: list[Broker] = field(default_factory=list)
    cluster_id: str = ""
    listeners: list[Listener] = field(default_factory=list)
    # Extra JVM flags of every node, e.g. -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=...
    # (Kafka 4 refuses to fetch a JWKS or token URL that flag does not list).
    jvm_options: list[str] = field(default_factory=list)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def bootstrap_for(self, listener: str) -> str:
        """Bootstrap servers of one of the extra listeners."""
        return ",".join(b.listener_address(listener) for b in self.brokers)

    @property
    def libs(self) -> Path:
        return kafka_libs(self.version)

    # -- lifecycle -------------------------------------------------------
    # Start timeouts are hang guards: a broker is ready in 5-20 s on an idle machine, far
    # later on a starved one, and a broker that died is seen at once (Broker.alive).
    START_TIMEOUT = 300.0

    def start(self, timeout: float = START_TIMEOUT) -> KafkaCluster:
        java = java_binary()
        reap_orphans()
        libs = self.libs
        self.root = Path(tempfile.mkdtemp(prefix="lagwatch-kafka-"))
        (self.root / "owner").write_text(str(os.getpid()))
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.brokers = [
            Broker(i + 1, free_port(), free_port(), self.root / f"node{i + 1}")
            for i in range(self.brokers_count)
        ]
        voters = ",".join(f"{b.node_id}@127.0.0.1:{b.controller_port}" for b in self.brokers)
        rf = min(3, self.brokers_count)
        for b in self.brokers:
            b.dir.mkdir(parents=True)
            b.ports = {ln.name: free_port() for ln in self.listeners}
            props = self._server_properties(b, voters, rf)
            (b.dir / "server.properties").write_text(
                "".join(f"{k}={v}\n" for k, v in props.items())
            )
            (b.dir / "log4j2.properties").write_text(_LOG4J2.format(log=b.log_file))
            (b.dir / "log4j.properties").write_text(_LOG4J1.format(log=b.log_file))
            self._format_storage(java, libs, b)
        for b in self.brokers:
            self._spawn(b)
        self.wait_ready(timeout)
        return self

    def _server_properties(self, b: Broker, voters: str, rf: int) -> dict[str, str]:
        """Broker ``b``'s server.properties: KRaft, loopback listeners, the quick group
        timeouts the tests need, then the listeners' and the cluster's own settings."""
        extra = "".join(f",{ln.name}://127.0.0.1:{b.ports[ln.name]}" for ln in self.listeners)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(b.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},CONTROLLER://127.0.0.1:{b.controller_port}"
                         + extra,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{b.port}" + extra,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" + "".join(
                f",{ln.name}:{ln.security_protocol}" for ln in self.listeners),
            "log.dirs": str(b.dir / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(rf),
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "500",
            # Streams (KIP-1071) and share (KIP-932) groups: a killed member leaves within
            # seconds, not Kafka's 45 s default (Kafka 3.9 ignores these).
            "group.streams.min.session.timeout.ms": "1000",
            "group.streams.session.timeout.ms": "6000",
            "group.streams.min.heartbeat.interval.ms": "500",
            "group.streams.heartbeat.interval.ms": "1000",
            "group.share.min.session.timeout.ms": "1000",
            "group.share.session.timeout.ms": "6000",
            "group.share.min.heartbeat.interval.ms": "500",
            "group.share.heartbeat.interval.ms": "1000",
            "replica.lag.time.max.ms": "30000",  # Kafka's default; LEO > HW lasts until the ISR shrinks
            "log.segment.bytes": str(16 * 1024 * 1024),
        }
        for ln in self.listeners:
            props.update({f"listener.name.{ln.name.lower()}.{k}": v for k, v in ln.config.items()})
        props.update(self.extra_config)
        return props

    def _format_storage(self, java: str, libs: Path, b: Broker) -> None:
        """kafka-storage format of broker ``b``'s log directory; a failure stops the cluster."""
        fmt = subprocess.run(
            [java, "-cp", f"{libs}/*", *self._log_opts(b), "kafka.tools.StorageTool",
             # "--cluster-id=" because a random id may start with "-"
             "format", f"--cluster-id={self.cluster_id}", "-c", str(b.dir / "server.properties")],
            capture_output=True, text=True,
        )
        if fmt.returncode != 0:
            self.stop()
            raise BrokerStartError(f"kafka-storage format failed:\n{fmt.stdout}\n{fmt.stderr}")

    def _log_opts(self, b: Broker) -> list[str]:
        # Kafka 4 logs with log4j2, Kafka 3 with reload4j (log4j 1): configure both.
        return [f"-Dlog4j2.configurationFile={b.dir / 'log4j2.properties'}",
                f"-Dlog4j.configuration=file:{b.dir / 'log4j.properties'}"]

    def _spawn(self, b: Broker) -> None:
        cmd = [
            java_binary(), f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            f"-Dlagwatch.owner={os.getpid()}", f"-Dlagwatch.dir={self.root}",
            *self._log_opts(b), *self.jvm_options,
            "-cp", f"{self.libs}/*", "kafka.Kafka", str(b.dir / "server.properties"),
        ]
        out = open(b.dir / "stdout.log", "ab")  # noqa: SIM115 - owned by the child
        b.proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        out.close()

    def waiting(self) -> None:
        """Called at each poll of :meth:`wait_ready`; a subclass may raise to end the wait
        (the demo, on a signal whose own raise was lost)."""

    def wait_ready(self, timeout: float = START_TIMEOUT, brokers: list[Broker] | None = None) -> None:
        """Wait until every broker answers metadata and sees all live nodes."""
        from confluent_kafka.admin import AdminClient

        want = brokers or self.brokers
        deadline = time.monotonic() + timeout
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            self.waiting()
            for b in want:
                if not b.alive():
                    out = (b.dir / "stdout.log").read_text(errors="replace")[-3000:]
                    raise BrokerStartError(
                        f"Kafka node {b.node_id} exited with {b.proc.returncode if b.proc else '?'}"
                        f"\n--- server.log ---\n{b.log_tail()}\n--- stdout ---\n{out}"
                    )
            if not all(_port_open(b.port) for b in want):
                time.sleep(0.3)
                continue
            try:
                ok = True
                for b in want:
                    admin = AdminClient({"bootstrap.servers": b.address, "log_level": 0})
                    md = admin.list_topics(timeout=2)
                    live = sum(1 for x in self.brokers if x.alive() and not x.paused)
                    if len(md.brokers) < live or md.controller_id < 0:
                        ok = False
                if ok:
                    return
            except Exception as e:  # noqa: BLE001 - retried until the deadline
                last_err = e
            time.sleep(0.3)
        logs = "\n".join(f"--- node {b.node_id} ---\n{b.log_tail()}" for b in want)
        raise BrokerStartError(f"Kafka did not become ready in {timeout}s ({last_err})\n{logs}")

    def stop_broker(self, b: Broker, kill: bool = False) -> None:
        if not b.alive():
            return
        assert b.proc
        if b.paused:
            b.resume()
        b.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            b.proc.wait(30)
        except subprocess.TimeoutExpired:
            b.proc.kill()
            b.proc.wait(10)

    def restart_broker(self, b: Broker, timeout: float = START_TIMEOUT) -> None:
        self.stop_broker(b)
        self._spawn(b)
        self.wait_ready(timeout, [b])

    def stop(self) -> None:
        for b in self.brokers:
            if b.alive():
                assert b.proc
                if b.paused:
                    b.resume()
                b.proc.send_signal(signal.SIGTERM)
        for b in self.brokers:
            if b.proc and b.proc.poll() is None:
                try:
                    b.proc.wait(20)
                except subprocess.TimeoutExpired:
                    b.proc.kill()
                    b.proc.wait(10)
        if self.root:
            self._kill_unheld()
            shutil.rmtree(self.root, ignore_errors=True)

    def _kill_unheld(self) -> None:
        """Kill and reap this cluster's broker JVMs that no Broker holds: a signal handler
        that raises (Ctrl-C in the demo) inside ``Popen`` after the fork loses the child's
        handle, and the JVM would outlive the stop until this process exits."""
        mark = f"-Dlagwatch.dir={self.root}".encode()
        held = {b.proc.pid for b in self.brokers if b.proc}
        for pid, argv in _broker_jvms():
            if mark in argv and pid not in held:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- tools -----------------------------------------------------------
    def run_tool(self, main_class: str, *args: str, timeout: float = 120) -> str:
        """Run one of Kafka's own command-line tools and return its stdout."""
        res = subprocess.run(
            [java_binary(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Dlog4j2.level=ERROR", "-cp", f"{self.libs}/*", main_class, *args],
            capture_output=True, text=True, timeout=timeout,
        )
        if res.returncode != 0:
            raise RuntimeError(f"{main_class} {' '.join(args)} failed:\n{res.stderr}{res.stdout}")
        return res.stdout


_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


_LOG4J1 = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
"""


@contextlib.contextmanager
def running(brokers: int = 1, version: str = DEFAULT_KAFKA_VERSION, **kw) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(brokers_count=brokers, version=version, **kw)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def commit_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets for a group without ever joining it (what admin tools do). A freshly
    started cluster may still be loading its group coordinators, and a topic created a
    moment ago may not have reached the coordinator's metadata yet: those errors are
    retried for up to 30 s."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    busy = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
            KafkaError.NOT_COORDINATOR, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
            KafkaError.UNKNOWN_TOPIC_OR_PART}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                         asynchronous=False)
                return
            except KafkaException as e:
                if e.args[0].code() not in busy or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devenv.kafka", description=__doc__.split("\n")[0])
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--version", default=DEFAULT_KAFKA_VERSION)
    args = ap.parse_args(argv)
    try:
        with running(args.brokers, args.version) as c:
            print(f"Kafka {args.version} ({args.brokers} node(s)) at {c.bootstrap_servers}", flush=True)
            print("Ctrl-C stops it.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while all(b.alive() for b in c.brokers):
                    time.sleep(1)
    except BrokerStartError as e:
        print(f"lagwatch: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

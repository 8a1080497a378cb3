"""One consumer process of the fleet benchmark (bench/fleet.py), healthy until told otherwise.

    python -m devenv.fleet_consumer --bootstrap H:P --group G --topic T [--behaviour B] [options]

It consumes like a real service does (commit per record, batched commits, auto-commit,
read_committed, cooperative-sticky, KIP-848, static membership, lagwatch instrumentation)
and keeps doing so until it gets SIGUSR1: from then on it shows its ``--behaviour``:

  healthy   nothing changes (SIGUSR1 is ignored)
  slow      each record takes ``--delay`` seconds; every record is still committed
  nocommit  keeps polling, never commits again
  wedge     the poll loop wedges for good (librdkafka keeps heartbeating; the member stays
            in the group because max.poll.interval.ms is large)
  maxpoll   each record takes longer than max.poll.interval.ms (``--max-poll-ms``): the member
            is kicked out, rejoins, gets the same record again, and never commits

Commit modes (before the turn): ``--commit record`` commits each record asynchronously;
``--commit batch`` commits every ``--batch-records`` records or ``--batch-seconds`` seconds,
whichever comes first, but only when a record arrives (so the tail of a burst stays
uncommitted until the next records: docs/statuses.md's bursty consumer); ``--commit auto`` is
librdkafka's auto-commit every ``--auto-commit-ms``.

Prints ``READY <epoch>`` once it has an assignment, ``CAUGHT_UP <epoch>`` once it read a record
less than ``CAUGHT_UP_AGE`` seconds old or reached the end of a partition (its start backlog
behind it; an idle topic's consumer has nothing newer to read), ``TURNED <epoch>`` at the moment its
behaviour changes (the ground truth of bench/fleet.py) and ``EXIT <epoch>`` on SIGTERM, after
closing the consumer (with ``--instance-id`` librdkafka does not leave the group on close:
static membership, KIP-345).

``LOST <epoch>`` when librdkafka takes its partitions away without a rebalance it took part
in (its session timed out, or it was fenced: ``on_lost``), after which it prints ``CAUGHT_UP``
again once it has caught up: a healthy consumer that lost its partitions really stopped
consuming meanwhile, and the fleet does not judge it until then.

It also prints what it sees of its own committed offsets going backwards, the fleet's evidence
for a ``rewind`` nobody planned: ``COMMIT_BACK <epoch> <partition> <from> <to>`` when the
broker acknowledges a commit lower than one it acknowledged before (the committed offset is
now lower), and ``REPLAY <epoch> <partition> <offset> <acknowledged>`` when a record below
an offset already acknowledged as committed is delivered again (records processed twice).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

BEHAVIOURS = ("healthy", "slow", "nocommit", "wedge", "maxpoll")
CAUGHT_UP_AGE = 2.0  # seconds: producers and consumers share this machine's clock
COMMIT_EVIDENCE = ("COMMIT_BACK", "REPLAY")  # the lines bench/fleet.py reports


def say(*words: object) -> None:
    print(*words, flush=True)


def build_conf(args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "client.id": args.client_id or f"{args.group}-consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": args.commit == "auto",
        "isolation.level": args.isolation,
        "enable.partition.eof": True,  # CAUGHT_UP on an idle topic
    }
    if args.commit == "auto":
        conf["auto.commit.interval.ms"] = args.auto_commit_ms
    if args.protocol == "consumer":
        conf["group.protocol"] = "consumer"  # KIP-848: session and heartbeat are the broker's
    else:
        conf["session.timeout.ms"] = args.session_timeout_ms
        conf["heartbeat.interval.ms"] = max(500, args.session_timeout_ms // 10)
        if args.assignor:
            conf["partition.assignment.strategy"] = args.assignor
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    if args.behaviour == "maxpoll":
        conf["max.poll.interval.ms"] = args.max_poll_ms
        if args.protocol == "classic":  # librdkafka wants max.poll.interval.ms >= session.timeout.ms
            conf["session.timeout.ms"] = min(args.session_timeout_ms, args.max_poll_ms)
            conf["heartbeat.interval.ms"] = max(500, conf["session.timeout.ms"] // 10)
    elif args.behaviour == "wedge":
        conf["max.poll.interval.ms"] = 3_600_000
    return conf


class CommitWatch:
    """Per partition, the highest commit the broker acknowledged, to print COMMIT_BACK and
    REPLAY (once per episode: until the partition is past it again)."""

    def __init__(self) -> None:
        self.acked: dict[tuple[str, int], int] = {}
        self.replaying: set[tuple[str, int]] = set()

    def on_commit(self, err: Any, partitions: list[Any]) -> None:
        if err is not None:
            return
        for tp in partitions:
            if tp.error is not None or tp.offset < 0:
                continue
            key = (tp.topic, tp.partition)
            before = self.acked.get(key, -1)
            if tp.offset < before:
                say("COMMIT_BACK", time.time(), tp.partition, before, tp.offset)
            self.acked[key] = tp.offset  # the broker holds the latest acknowledged one

    def consumed(self, topic: str, partition: int, offset: int) -> None:
        key = (topic, partition)
        acked = self.acked.get(key, -1)
        if offset < acked and key not in self.replaying:
            self.replaying.add(key)
            say("REPLAY", time.time(), partition, offset, acked)
        elif offset >= acked:
            self.replaying.discard(key)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m devenv.fleet_consumer")
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True, help="comma-separated")
    ap.add_argument("--client-id", default=None)
    ap.add_argument("--behaviour", choices=BEHAVIOURS, default="healthy")
    ap.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    ap.add_argument("--assignor", default="", help="partition.assignment.strategy (classic)")
    ap.add_argument("--commit", choices=["record", "batch", "auto"], default="record")
    ap.add_argument("--batch-records", type=int, default=100)
    ap.add_argument("--batch-seconds", type=float, default=5.0)
    ap.add_argument("--auto-commit-ms", type=int, default=5000)
    ap.add_argument("--isolation", choices=["read_uncommitted", "read_committed"],
                    default="read_uncommitted")
    ap.add_argument("--session-timeout-ms", type=int, default=10_000)
    ap.add_argument("--max-poll-ms", type=int, default=6000)
    ap.add_argument("--instance-id", default="", help="group.instance.id (static membership)")
    ap.add_argument("--delay", type=float, default=0.5, help="seconds per record once slow")
    ap.add_argument("--instrument", action="store_true", help="lagwatch InstrumentedConsumer")
    ap.add_argument("--report-interval", type=float, default=5.0)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    conf = build_conf(args)
    watch = CommitWatch()
    conf["on_commit"] = watch.on_commit
    if args.instrument:
        from lagwatch_client import InstrumentedConsumer
        consumer: Consumer = InstrumentedConsumer(conf, report_interval=args.report_interval)
    else:
        consumer = Consumer(conf)
    run = _Loop(args, consumer, watch)
    signal.signal(signal.SIGTERM, run.stop)
    signal.signal(signal.SIGINT, run.stop)
    signal.signal(signal.SIGUSR1, run.turn)
    consumer.subscribe(args.topic.split(","), on_lost=run.lost)
    run.loop()
    with contextlib.suppress(Exception):
        consumer.close()
    say("EXIT", time.time())
    return 0


class _Loop:
    """The consumer's poll loop, healthy until SIGUSR1 turns it to its ``--behaviour``."""

    def __init__(self, args: argparse.Namespace, consumer: Consumer, watch: CommitWatch) -> None:
        self.args, self.consumer, self.watch = args, consumer, watch
        self.running = True
        self.turn_requested = False
        self.ready = False  # it got an assignment
        self.caught_up = False  # it read a fresh record or reached a partition's end
        self.bad = False
        self.pending = 0  # records not committed yet (batch mode)
        self.last_commit = time.monotonic()

    def stop(self, *_: object) -> None:
        self.running = False

    def turn(self, *_: object) -> None:
        self.turn_requested = True

    def lost(self, _consumer: Any, _partitions: Any) -> None:
        self.caught_up = False
        say("LOST", time.time())

    def loop(self) -> None:
        args, consumer = self.args, self.consumer
        while self.running:
            if self.turn_requested and not self.bad and args.behaviour != "healthy":
                self.bad = True
                say("TURNED", time.time())
                if args.behaviour == "wedge":
                    while self.running:  # the handler is wedged; librdkafka's threads still heartbeat
                        time.sleep(0.2)
                    break
            msg = consumer.poll(0.5)
            if not self.ready and consumer.assignment():
                self.ready = True
                say("READY", time.time())
            err = msg.error() if msg is not None else None
            if err is not None and err.code() == KafkaError._PARTITION_EOF:
                if self.ready and not self.caught_up:
                    self.caught_up = True
                    say("CAUGHT_UP", time.time())
                continue
            if msg is None or msg.error():
                continue
            self.handle(msg)

    def handle(self, msg: Any) -> None:
        """One record: noted, then committed as the behaviour says."""
        args, consumer = self.args, self.consumer
        self.watch.consumed(msg.topic(), msg.partition(), msg.offset())
        if not self.caught_up:
            _kind, ts_ms = msg.timestamp()
            if ts_ms > 0 and time.time() - ts_ms / 1000 < CAUGHT_UP_AGE:
                self.caught_up = True
                say("CAUGHT_UP", time.time())
        if self.bad and args.behaviour == "slow":
            time.sleep(args.delay)
            with contextlib.suppress(KafkaException):
                consumer.commit(msg, asynchronous=False)
            return
        if self.bad and args.behaviour == "nocommit":
            return
        if self.bad and args.behaviour == "maxpoll":
            time.sleep(args.max_poll_ms / 1000 + 2)  # longer than max.poll.interval.ms
            # Kicked out meanwhile: the commit is refused (classic) or commits the position
            # the new assignment restarted from (KIP-848); either way nothing moves.
            with contextlib.suppress(KafkaException):
                consumer.commit(asynchronous=False)
            return
        if args.commit == "record":
            with contextlib.suppress(KafkaException):
                consumer.commit(msg, asynchronous=True)
        elif args.commit == "batch":
            self.pending += 1
            due = time.monotonic() - self.last_commit >= args.batch_seconds
            if self.pending >= args.batch_records or due:
                with contextlib.suppress(KafkaException):
                    consumer.commit(asynchronous=False)
                self.pending = 0
                self.last_commit = time.monotonic()


if __name__ == "__main__":
    sys.exit(main())

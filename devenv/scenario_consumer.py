"""A real consumer process with one behaviour, for scenario tests and the demo.

    python -m devenv.scenario_consumer --mode healthy --bootstrap H:P --group G --topic T

Modes:
  healthy   consume and commit after every message batch
  slow      sleep --delay seconds per record, commit each record
  nocommit  poll forever, never commit (after one initial commit)
  blocked   instrumented; after --after records the handler blocks forever while
            librdkafka keeps heartbeating (max.poll.interval.ms is large)
  maxpoll   not instrumented; every record takes longer than a short
            max.poll.interval.ms, so the member is kicked out, rejoins, and never commits
  hung      not instrumented; like blocked, the shape of a sarama or franz-go consumer
            whose handler hangs: those clients have no poll timeout, so the member stays
Prints "READY <epoch>" once assigned and "BLOCKED <epoch>" when the handler wedges.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from types import SimpleNamespace
from typing import Any

from confluent_kafka import Consumer, KafkaException

from lagwatch_client import InstrumentedConsumer


def say(*words: object) -> None:
    print(*words, flush=True)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True,
                    choices=["healthy", "slow", "nocommit", "blocked", "maxpoll", "hung"])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--client-id", default=None)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--after", type=int, default=20)
    ap.add_argument("--instrument", action="store_true")
    ap.add_argument("--report-interval", type=float, default=1.0)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--protocol", choices=["classic", "consumer"], default="classic",
                    help="group.protocol: consumer is KIP-848 (session and heartbeat are the broker's)")
    return ap.parse_args(argv)


def _conf(args: argparse.Namespace) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "client.id": args.client_id or f"{args.mode}-consumer",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": 500,
    }
    if args.mode == "maxpoll":
        conf["max.poll.interval.ms"] = 2000  # librdkafka wants it >= session.timeout.ms
        conf["session.timeout.ms"] = 2000
    if args.protocol == "consumer":
        conf["group.protocol"] = "consumer"
        del conf["session.timeout.ms"], conf["heartbeat.interval.ms"]
    elif args.mode in ("blocked", "hung"):
        conf["max.poll.interval.ms"] = 600_000
    return conf


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    conf = _conf(args)
    instrument = args.instrument or args.mode == "blocked"
    consumer: Consumer = (InstrumentedConsumer(conf, report_interval=args.report_interval)
                          if instrument else Consumer(conf))
    state = SimpleNamespace(running=True, seen=0, initial_commit=args.mode == "nocommit")

    def stop(*_: object) -> None:
        state.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer.subscribe([args.topic])
    ready = False
    while state.running:
        msg = consumer.poll(0.2)
        if not ready and consumer.assignment():
            ready = True
            say("READY", time.time())
        if msg is None or msg.error():
            continue
        state.seen += 1
        _handle(args, consumer, msg, state)
    consumer.close()
    return 0


def _handle(args: argparse.Namespace, consumer: Consumer, msg: Any, state: SimpleNamespace) -> None:
    """One record, committed (or not) as the mode says."""
    if args.mode == "healthy":
        consumer.commit(msg, asynchronous=True)
    elif args.mode == "slow":
        time.sleep(args.delay)
        consumer.commit(msg, asynchronous=False)
    elif args.mode == "nocommit":
        if state.initial_commit:
            consumer.commit(msg, asynchronous=False)
            state.initial_commit = False
    elif args.mode in ("blocked", "hung"):
        consumer.commit(msg, asynchronous=False)
        if state.seen >= args.after:
            say("BLOCKED", time.time())
            while state.running:  # the handler is wedged; librdkafka still heartbeats
                time.sleep(0.2)
    elif args.mode == "maxpoll":
        time.sleep(3.0)  # longer than max.poll.interval.ms
        # Kicked out of the group meanwhile, the partition was revoked: whether the
        # commit is refused (classic: old generation) or, rejoined already (KIP-848),
        # commits the position the new assignment restarted from, nothing moves.
        with contextlib.suppress(KafkaException):
            consumer.commit(asynchronous=False)


if __name__ == "__main__":
    sys.exit(main())

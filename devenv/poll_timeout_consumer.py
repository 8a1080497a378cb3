"""A kafka-python consumer that leaves its group on its poll timeout while its process lives.

    python -m devenv.poll_timeout_consumer --bootstrap H:P --group G --topic T [--after N]

It consumes and commits each record; after ``--after`` records its handler wedges for
good. kafka-python's heartbeat thread then sees ``max_poll_interval_ms`` pass without a
poll and leaves the group (the Java client and aiokafka do the same), so the broker shows
an empty group while the process is alive. Prints "READY <epoch>" once assigned and
"BLOCKED <epoch>" when the handler wedges.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal
import sys
import time

from kafka import KafkaConsumer
from kafka.errors import KafkaError

# Short, so the leave comes seconds after the wedge; kafka-python wants the session
# timeout below the request timeout and the heartbeat below a third of the session.
MAX_POLL_INTERVAL_MS = 4000
SESSION_TIMEOUT_MS = 6000


def say(*words: object) -> None:
    print(*words, flush=True)


def _commit(consumer: KafkaConsumer) -> None:
    """Commit what was read. A commit refused because the group rebalanced meanwhile (a
    heartbeat held up on a busy machine) is said and left to the next one: the consumer
    rejoins at its next poll, and the point of this client is the wedge that follows."""
    try:
        consumer.commit()
    except KafkaError as e:
        say("COMMIT-FAILED", type(e).__name__)


def _await_topic(consumer: KafkaConsumer, topic: str, timeout: float = 60) -> None:
    """Wait until the topic's partitions are in the client's metadata. Subscribed to a topic
    created a moment before, the leader can assign nothing and the member must join again
    when the partitions appear; with them known first, the first join assigns them."""
    deadline = time.monotonic() + timeout
    while not consumer.partitions_for_topic(topic) and time.monotonic() < deadline:
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--client-id", default="poll-timeout-consumer")
    ap.add_argument("--after", type=int, default=20)
    args = ap.parse_args(argv)
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The group's way in (coordinator, join, sync) on stderr: what a test that never sees
    # READY shows of why.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka.coordinator").setLevel(logging.INFO)
    # Not assigned within this many seconds: every thread's stack goes to stderr, so a
    # client wedged on its way into the group says where.
    faulthandler.dump_traceback_later(30)
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.client_id,
        auto_offset_reset="earliest", enable_auto_commit=False,
        max_poll_interval_ms=MAX_POLL_INTERVAL_MS, session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=1000)
    _await_topic(consumer, args.topic)
    consumer.subscribe([args.topic])
    seen, ready = 0, False
    while running and seen < args.after:
        batch = consumer.poll(timeout_ms=200, max_records=1)
        if not ready and consumer.assignment():
            ready = True
            faulthandler.cancel_dump_traceback_later()
            say("READY", time.time())
        for _tp, records in batch.items():
            seen += len(records)
            _commit(consumer)
    if running:
        say("BLOCKED", time.time())
    while running:  # the handler is wedged: no poll, the heartbeat thread leaves the group
        time.sleep(0.2)
    consumer.close(autocommit=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A consumer throttled to a known rate, for tests/test_catchup.py.

    python -m tests.support.paced_consumer BOOTSTRAP TOPIC GROUP RATE

Consumes record i at ``start + i / RATE`` (a schedule, so poll and commit latency do not
change its rate as long as it keeps up with it) and commits each record asynchronously.
Prints ``START <time>`` at its first record and ``CAUGHT_UP <time>`` the first time it
has consumed everything the broker had: on every assigned partition, its next offset
reached the high watermark of that partition's last fetch response. Runs until SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import time

from confluent_kafka import Consumer, Message, TopicPartition

FETCH_BYTES = 2048  # per partition and fetch: a few record batches (tests/test_catchup.py)


def caught_up(c: Consumer, next_offset: dict[tuple[str, int], int]) -> bool:
    assignment = c.assignment()
    if not assignment:
        return False
    for tp in assignment:
        _lo, hi = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), cached=True)
        if hi < 0 or next_offset.get((tp.topic, tp.partition), 0) < hi:
            return False
    return True


def main() -> int:
    bootstrap, topic, group, rate = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    # Small fetches: each fetch response holds a little of every partition, so a backlog is
    # consumed from all partitions in turn instead of one partition's after the other's.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "client.id": f"paced-{rate:g}",
                  "max.partition.fetch.bytes": FETCH_BYTES})
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    c.subscribe([topic])
    start: float | None = None
    done = 0
    next_offset: dict[tuple[str, int], int] = {}
    announced = False
    while not stop:
        if start is not None:
            time.sleep(max(0.0, start + done / rate - time.time()))
        msg: Message | None = c.poll(0.2)
        if msg is None or msg.error() is not None:
            if start is not None and not announced and caught_up(c, next_offset):
                print("CAUGHT_UP", time.time(), flush=True)
                announced = True
            continue
        if start is None:
            start = time.time()
            print("START", start, flush=True)
        done += 1
        next_offset[(msg.topic(), msg.partition())] = msg.offset() + 1
        c.commit(message=msg, asynchronous=True)
        if not announced and caught_up(c, next_offset):
            print("CAUGHT_UP", time.time(), flush=True)
            announced = True
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

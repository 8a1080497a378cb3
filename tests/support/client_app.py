"""A consumer application with only lagwatch-client installed (see test_release.py).

    <python> client_app.py BOOTSTRAP TOPIC GROUP RECORDS PARTITION:OFFSET,...

Consumes RECORDS records, commits the given offsets, prints ``READY`` and
keeps polling until stdin closes; then closes and prints its instrumentation errors.
Run as a script outside the checkout, so only installed packages are importable.
"""

from __future__ import annotations

import select
import sys
import time

from confluent_kafka import TopicPartition

from lagwatch_client import InstrumentedConsumer


def main() -> int:
    bootstrap, topic, group, records, commits = sys.argv[1:6]
    c = InstrumentedConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "enable.auto.commit": False, "auto.offset.reset": "earliest"},
                             report_interval=0.5)
    c.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 60
    while seen < int(records):
        if time.monotonic() > deadline:
            sys.exit(f"consumed only {seen} of {records} records in 60s")
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += 1
    c.commit(offsets=[TopicPartition(topic, int(p), int(o))
                      for p, o in (pair.split(":") for pair in commits.split(","))],
             asynchronous=False)
    print("READY", flush=True)
    while not select.select([sys.stdin], [], [], 0)[0]:  # a live consumer: keeps polling
        c.poll(0.2)
    c.close()
    print("ERRORS", c.instrumentation_errors, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

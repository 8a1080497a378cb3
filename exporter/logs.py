"""Logging for the main process and the Kafka workers: one line per distinct problem per minute.

librdkafka logs the same failure once per connection attempt, from every client
(sampler, record-timestamp reader, report reader) and broker thread, with
different prefixes: ``FAIL [lagwatch-prod#producer-1] [thrd:sasl_ssl://b1:9093/1]:
sasl_ssl://b1:9093/1: SASL authentication error: ... (after 312ms in state
AUTH_REQ)``. Against a broker refusing the password that is about 70 lines in
one millisecond (they are queued until the client is polled). The filter
below sits on the handler, so it sees the records of every logger (a filter on
a logger does not see its children's records: one on ``lagwatch.librdkafka`` would
never fire), and keys each warning or error by its text without client names,
threads, broker addresses and numbers.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

REPEAT_EVERY = 60.0
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# extra= for a line that marks a change of state (e.g. "cannot sample" after "recovered"):
# it must not be held back as a repeat of the previous failure's line.
TRANSITION = {"transition": True}

_CLIENT = re.compile(r"\[[^\]\s]*#(producer|consumer)-\d+\] ")  # confluent-kafka's "[client.id#kind-N]"
_THREAD = re.compile(r"\[thrd:[^\]]*\]:? ?")
_BROKER = re.compile(r"\b[a-z_]+://[^\s/]+/\w+: ")  # "sasl_ssl://host:port/1: "
_STATE = re.compile(r" \(after \d+ms in state \w+(, \d+ identical error\(s\) suppressed)?\)")
_NUMBER = re.compile(r"\d+(\.\d+)?(ms)?")


def problem_key(record: logging.LogRecord) -> tuple[str, int, str]:
    """What makes two lines the same problem: logger, level and normalised text."""
    text = record.getMessage()
    for pattern in (_CLIENT, _THREAD, _BROKER, _STATE):
        text = pattern.sub("", text)
    return record.name, record.levelno, _NUMBER.sub("#", text)


class RepeatFilter(logging.Filter):
    """Let a warning or error through once per ``every`` seconds per distinct problem;
    the next one that passes says how many were held back."""

    def __init__(self, every: float = REPEAT_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every = every
        self.clock = clock
        self.last: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or getattr(record, "transition", False):
            return True
        key = problem_key(record)
        now = self.clock()
        since, held = self.last.get(key, (-1e18, 0))
        if now - since < self.every:
            self.last[key] = (since, held + 1)
            return False
        if len(self.last) > 1000:
            self.last.clear()
        self.last[key] = (now, 0)
        if held:
            record.msg = f"{record.getMessage()} (and {held} more like this in the last {now - since:.0f}s)"
            record.args = ()
        return True


def setup(level: str | int) -> None:
    """Root handler on stderr with the repeat filter; librdkafka below WARNING is noise."""
    logging.basicConfig(level=level, format=FORMAT)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(RepeatFilter())
    logging.getLogger("lagwatch.librdkafka").setLevel(max(logging.WARNING, logging.getLogger().level))
    # kafka-python (exporter/kafka/broker_requests.py) logs every reconnection; its failures reach the
    # cycle's errors anyway, so only its errors are shown.
    logging.getLogger("kafka").setLevel(max(logging.ERROR, logging.getLogger().level))

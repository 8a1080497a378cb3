"""The repeat filter on real librdkafka lines (no broker): one line per problem per minute."""

from __future__ import annotations

import logging

import pytest

from exporter.logs import TRANSITION, RepeatFilter

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

# As logged through confluent-kafka against a broker refusing the password: the admin
# client's bootstrap thread, the report reader's consumer, another broker's thread.
REFUSED = [
    "FAIL [lagwatch-secure#producer-1] [thrd:sasl_ssl://127.0.0.1:44647/bootstrap]: "
    "sasl_ssl://127.0.0.1:44647/bootstrap: SASL authentication error: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 394ms in state "
    "AUTH_REQ)",
    "FAIL [lagwatch-secure-reports#consumer-2] [thrd:sasl_ssl://127.0.0.1:44647/bootstrap]: "
    "sasl_ssl://127.0.0.1:44647/bootstrap: SASL authentication error: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 326ms in state "
    "AUTH_REQ, 3 identical error(s) suppressed)",
    "FAIL [lagwatch-secure#producer-1] [thrd:sasl_ssl://kafka-2.example:9093/2]: "
    "sasl_ssl://kafka-2.example:9093/2: SASL authentication error: Authentication failed during "
    "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 12ms in state "
    "AUTH_REQ)",
]
OTHER = ("FAIL [lagwatch-secure#producer-1] [thrd:sasl_ssl://127.0.0.1:44647/bootstrap]: "
         "sasl_ssl://127.0.0.1:44647/bootstrap: Connect to ipv4#127.0.0.1:44647 failed: Connection refused "
         "(after 0ms in state CONNECT)")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def record(msg: str, level: int = logging.ERROR, name: str = "lagwatch.librdkafka.secure",
           **extra: object) -> logging.LogRecord:
    r = logging.LogRecord(name, level, __file__, 1, msg, None, None)
    r.__dict__.update(extra)
    return r


def test_one_line_per_problem_per_minute_whatever_the_client_thread_or_broker() -> None:
    clock = Clock()
    f = RepeatFilter(60.0, clock)
    passed = [f.filter(record(m)) for m in REFUSED * 20]  # 60 lines in the same instant
    assert passed == [True] + [False] * 59
    assert f.filter(record(OTHER))  # a different problem is a line of its own
    assert f.filter(record(REFUSED[0], name="lagwatch.librdkafka.other"))  # another cluster
    clock.t += 59
    assert not f.filter(record(REFUSED[1]))
    clock.t += 2
    again = record(REFUSED[2])
    assert f.filter(again)
    assert again.getMessage().endswith("(and 60 more like this in the last 61s)")
    assert "SASL authentication error" in again.getMessage()


def test_info_lines_and_state_changes_always_pass() -> None:
    f = RepeatFilter(60.0, Clock())
    assert all(f.filter(record("cluster a: sampling recovered", logging.INFO)) for _ in range(3))
    line = "cluster a: cannot sample: metadata: timed out"
    assert all(f.filter(record(line, name="lagwatch.runner", **TRANSITION)) for _ in range(3))
    assert f.filter(record("cluster a: describe_group: g1: timed out", logging.WARNING))
    assert not f.filter(record("cluster a: describe_group: g1: timed out", logging.WARNING))

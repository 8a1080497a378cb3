"""The runner's schedule (exporter/runner.py ``next_start``): samples never closer together
than the interval, so a threshold of ``s`` seconds spans at most ceil(s / interval) cycles
whatever the machine's load, which every live test's cycle bound relies on."""

from __future__ import annotations

import math
import random

import pytest

from exporter.runner import next_start

pytestmark = pytest.mark.unit

INTERVAL = 1.0


def _samples(seed: int, cycles: int) -> list[float]:
    """Sample times of ``cycles`` healthy cycles on a loaded machine: each wakes up to 0.8 s
    late, samples up to 0.6 s after it wakes, and takes up to 1.5 s (overrunning at times)."""
    r = random.Random(seed)
    at, out = 0.0, []
    for _ in range(cycles):
        start = at + r.choice((0.0, 0.0, r.uniform(0, 0.8)))
        sampled = start + r.uniform(0, 0.6)
        end = sampled + r.uniform(0, 1.5)
        out.append(sampled)
        at = next_start(at, INTERVAL, sampled, end, True)
        at = max(at, end)  # the thread cannot start a cycle before the last one ended
    return out


@pytest.mark.parametrize("seed", range(20))
def test_samples_are_never_closer_than_the_interval(seed: int) -> None:
    times = _samples(seed, 300)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) >= INTERVAL - 1e-9, min(gaps)
    # so a stall clock of 8 s, started at any sample, is reached within 8 cycles
    for i, t in enumerate(times):
        reached = next((j for j in range(i, len(times)) if times[j] - t >= 8.0), None)
        assert reached is None or reached - i <= math.ceil(8.0 / INTERVAL)


def test_an_idle_machine_keeps_the_cadence() -> None:
    """Woken on time, sampled at once: cycles start an interval apart, on the grid."""
    at = 0.0
    for k in range(1, 100):
        at = next_start(at, INTERVAL, at, at + 0.3, True)
        assert at == k * INTERVAL


def test_a_late_cycle_is_not_followed_by_a_close_one() -> None:
    """Scheduled at 10 s, woken at 10.7 s and sampled then: the next starts at 11.7 s, not
    on the grid at 11 s (0.3 s after the last sample)."""
    assert next_start(10.0, INTERVAL, 10.7, 10.9, True) == pytest.approx(11.7)


def test_after_a_failure_it_backs_off_from_now() -> None:
    assert next_start(10.0, 4.0, 10.2, 10.5, False) == 14.5

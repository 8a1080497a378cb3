"""What a cycle writes to the state topic after a restart (exporter/state/sync.py).

A cluster's groups are judged and written for a few cycles into a stand-in for the
topic (each key's last value, as compaction keeps it); a new evaluator restores them and
judges the next cycle. The groups read back from young records are not written again
at once, only those whose turn it is (``state.write_every``); from records older than
half of ``state.max_age``, every group is.
"""

from __future__ import annotations

import zlib

import pytest

from bench.footprint import live_snapshot
from exporter.config import ClusterConfig, Thresholds
from exporter.contracts.worker import StateLoadReply
from exporter.evaluate.evaluator import Evaluator
from exporter.state import codec
from exporter.state.sync import StateSync

pytestmark = pytest.mark.unit

GROUPS, PARTITIONS, INTERVAL = 40, 5, 15.0
CID = "cluster-id-1"
T0 = 1_764_000_000.0


def _cluster() -> ClusterConfig:
    return ClusterConfig(name="t", bootstrap_servers="kafka:9092")


def _judged(cycles: int) -> tuple[dict[bytes, tuple[bytes | None, float]], float]:
    """The topic after ``cycles`` cycles of one process, and the last cycle's time."""
    ev, sync = Evaluator("t", Thresholds(), INTERVAL), StateSync(_cluster())
    sync.restore(ev, StateLoadReply(CID, {}), T0)
    topic: dict[bytes, tuple[bytes | None, float]] = {}
    now = T0
    for c in range(cycles):
        now = T0 + INTERVAL * c
        view = ev.evaluate(live_snapshot(GROUPS, PARTITIONS, c, now), now=now)
        for key, value, _name in sync.records(ev, view, c + 1, now):
            topic[key] = (value, now)
    return topic, now


def _groups_written_after_restart(topic: dict[bytes, tuple[bytes | None, float]], cycle: int,
                                  now: float) -> list[str]:
    ev, sync = Evaluator("t", Thresholds(), INTERVAL), StateSync(_cluster())
    sync.restore(ev, StateLoadReply(CID, topic), now)
    assert sync.restored_groups == GROUPS
    view = ev.evaluate(live_snapshot(GROUPS, PARTITIONS, cycle, now), now=now)
    return [name for key, value, name in sync.records(ev, view, 1, now)
            if value is not None and codec.parse_key(key, "t") == (codec.GROUP, name)]


def test_a_restart_writes_only_the_groups_whose_turn_it_is() -> None:
    topic, last = _judged(6)
    now = last + INTERVAL
    written = _groups_written_after_restart(topic, 6, now)
    every = _cluster().state_write_every
    due = sorted(f"bench-{GROUPS}x{PARTITIONS}-g{g:05d}" for g in range(GROUPS)
                 if not (1 + zlib.crc32(f"bench-{GROUPS}x{PARTITIONS}-g{g:05d}".encode())) % every)
    assert sorted(written) == due  # every group ok before and after: none changed
    assert len(written) < GROUPS // 2


def test_a_restart_from_old_records_writes_every_group() -> None:
    topic, last = _judged(6)
    now = last + _cluster().state_max_age * 0.6  # young enough to be read, old enough to renew
    assert len(_groups_written_after_restart(topic, 7, now)) == GROUPS

"""What the evaluator's judgement needs to carry on after a restart, as plain data.

The evaluator exports one :class:`SavedGroup` per group and one :class:`SavedTopic` per
topic (``Evaluator.export_group`` / ``export_topic``) and imports them back
(``import_group`` / ``import_topic``); ``exporter/state/`` writes them to lagwatch's own
compacted state topic and reads them back at start. Only ints, floats, strs, bools,
None and tuples of them: the contract does not depend on how the evaluator keeps its
memory, and :mod:`exporter.state.codec` turns it into bytes and back without knowing
the evaluator either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The elements of one row of SavedGroup.partitions after (topic, partition): a partition's
# memory (exporter/evaluate/memory.py PartitionMemory, its concerns flattened), in order,
# each with what it holds: int, float (a number: a time may be an int), bool or str, with
# "?" when it may be None. The codec checks every row against these kinds.
PARTITION_COLUMNS = (
    ("followed", "int"), ("changed_at", "float"),
    # NewData
    ("freeze_hw", "int?"), ("quiet_at", "float"), ("flow_at", "float"), ("tail_from", "float?"),
    ("new_data_at", "float?"), ("arrived_at", "float"),
    # Floor
    ("floor_low", "int"), ("floor_next", "int"), ("floor_at", "float"),
    # Rewind
    ("rewind_until", "float"), ("rewind_pending", "int?"),
    ("lag_since", "float?"),
    # Trend: its Run (all None without one), then lagging
    ("run_t0", "float?"), ("run_l0", "float?"), ("run_n", "int?"), ("run_gap", "float?"),
    ("run_t_last", "float?"), ("run_committed", "int?"), ("run_lag_s", "float?"), ("run_hw", "int?"),
    ("lagging", "bool"),
    # Ownership
    ("owner", "str?"), ("unowned", "int"),
    ("above_from", "float?"),
)
PARTITION_FIELDS = tuple(name for name, _ in PARTITION_COLUMNS)
PARTITION_KINDS = tuple(kind for _, kind in PARTITION_COLUMNS)

Scalar = int | float | str | bool | None
# (topic, partition, *PARTITION_FIELDS)
PartitionRow = tuple[Any, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceState:
    """exporter/evaluate/rebalances.py RebalanceMemory, without its last summary."""

    broker: int
    clients: int
    total: int
    epoch: int | None
    members: tuple[str, ...] | None  # None: no sample yet; sorted
    client_counts: tuple[tuple[str, int], ...]
    events: tuple[float, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RatesState:
    """exporter/evaluate/progress.py RatesMemory, without its last summary."""

    # (topic, partition, flat (time, consumed, HW, time, ...) points)
    points: tuple[tuple[str, int, tuple[float, ...]], ...]
    counted: tuple[tuple[str, int, int], ...]
    lost: tuple[tuple[str, int, int], ...]
    lost_total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedGroup:
    """One group's memory: what its next judgement reads besides the new sample."""

    group: str
    members: tuple[str, ...]  # sorted member ids at the last cycle
    epoch: int | None
    joins: tuple[float, ...]
    seen_once: bool
    unreadable_since: float | None
    acknowledged_at: float | None
    outside_at: float | None
    outside_gaps: tuple[float, ...]
    # (topic, partition, owner, owned since, HW then, records arrived at)
    uncommitted: tuple[tuple[str, int, str, float, int | None, float | None], ...]
    partitions: tuple[PartitionRow, ...]
    commit_gaps: tuple[float, ...] | None  # None: the group never had its cadence learnt
    rebalances: RebalanceState | None
    rates: RatesState | None
    # The group's last view as exporter.state.views encodes it (a plain nested tuple):
    # served while the group cannot be read, and read by the next cycle's rules.
    last_view: tuple[Any, ...] | None
    # The figures last served with it (progress, rebalances), same encoding.
    last_progress: tuple[Any, ...] | None
    last_rebalances: tuple[Any, ...] | None
    # Who left and when (exporter/evaluate/departures.py), same encoding: the members seen
    # at the last cycle, and the departures remembered.
    seen: tuple[Any, ...] = ()
    departed: tuple[Any, ...] = ()
    # The cycle before the one that saw the group's last commit (member groups).
    committed_after: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedTopic:
    """One topic's partitions as the cluster last read them, with their HW history
    (lag in seconds is interpolated on it)."""

    topic: str
    # (partition, leader, replicas, isr, log_start, hw, lso, leo,
    #  flat (time, HW, time, HW, ...) history, HW unread since or None)
    partitions: tuple[tuple[Any, ...], ...]

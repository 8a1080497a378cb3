"""Everything the evaluator remembers of one watched group, in one place.

A group's judgement carries from cycle to cycle in several memories, each kept by the
stage that steps it: the partitions' memory and the group's members and joins
(:class:`~exporter.evaluate.memory.GroupMemory`, the evaluator), the rate points
(:class:`~exporter.evaluate.progress.RatesMemory`, the progress tracker), the rebalance
counts (:class:`~exporter.evaluate.rebalances.RebalanceMemory`, the rebalance tracker),
the commit cadence of its members (exporter/evaluate/cadence.py), its rest while nothing
about it changes (:class:`~exporter.evaluate.rest.Resting`) and the thresholds it is
judged by. They are the fields of one :class:`GroupMemories` per group, in one map by
group id that the evaluator and its trackers share (:data:`MemoriesByGroup`): a group
seen for the first time gets its memories, a deleted group (or one whose shard moved to
another replica) is forgotten with one deletion, and the state topic writes and reads a
group's memories together (exporter/evaluate/persist.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.config import Thresholds
from exporter.evaluate.cadence import Gaps
from exporter.evaluate.memory import GroupMemory
from exporter.evaluate.progress import RatesMemory
from exporter.evaluate.rebalances import RebalanceMemory
from exporter.evaluate.rest import Resting


@dataclass(slots=True)
class GroupMemories:
    """One group's memories. ``rates``, ``rebalances`` and ``gaps`` are None until the
    stage that keeps them first steps the group; ``rest`` is None while it is evaluated."""

    memory: GroupMemory
    th: Thresholds  # the cluster's thresholds, or the first group override matching it
    rates: RatesMemory | None = None
    rebalances: RebalanceMemory | None = None
    gaps: Gaps | None = None  # commit gaps of a group with members (exporter/evaluate/cadence.py)
    rest: Resting | None = None


# Every group of a cluster the evaluator remembers, by group id.
MemoriesByGroup = dict[str, GroupMemories]

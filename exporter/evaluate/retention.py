"""Records lost to retention: pure counting.

When a group's consumed offset is below the partition's log start offset, the
records in between were deleted (retention, or ``delete_records``) before the group
read them. Each partition remembers the offset up to which its losses are already
accounted (``counted_to``: the log start when they were last counted), so the
counter only grows by records newly lost: a later deletion counts from where the
last one stopped, or from the consumed offset if the group has moved on since.

Losses already there when lagwatch first sees a partition are not counted: they
happened before it watched, and counting them at every exporter restart would show
the same loss again as an increase (the reason still names them).
"""

from __future__ import annotations


def lost_step(consumed: int, log_start: int, counted_to: int | None, first: bool
              ) -> tuple[int, int | None]:
    """(records newly lost this cycle, the new ``counted_to``).

    ``first``: the first look at this group-partition (a baseline, nothing counted).
    A log start below ``counted_to`` means the topic was recreated: start afresh."""
    if counted_to is not None and log_start < counted_to:
        counted_to = None
    floor = consumed if counted_to is None else max(consumed, counted_to)
    if log_start <= floor:
        return 0, counted_to
    return (0 if first else log_start - floor), log_start


def retained_position(consumed: int, lag: int, log_start: int | None) -> float | None:
    """Where the consumed offset sits in the retained log: (consumed - log start) /
    (HW - log start), 0 at the log start, negative below it. None without lag, on a log
    retention has never trimmed (log start 0) or an empty one (HW = log start)."""
    hw = consumed + lag
    if lag <= 0 or not log_start or hw <= log_start:
        return None
    return (consumed - log_start) / (hw - log_start)


def below_log_start(consumed: int, log_start: int) -> int:
    """Records between the consumed offset and the log start now: deleted unread."""
    return max(0, log_start - consumed)

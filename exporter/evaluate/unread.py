"""Partition offsets a cycle could not read.

A ListOffsets that failed or timed out, or a partition without a leader while its broker
restarts, leaves a partition's high watermark unknown for a cycle or more. Without it
no lag can be computed, and a partition judged on nothing would read ``ok``: a stalled
group would flip to ``ok`` for the cycle, and its alerts would lose their ``for:``.

So, as a group that cannot be read keeps its last judgement for a grace
(:meth:`exporter.evaluate.evaluator.Evaluator._unreadable`), a partition whose HW is
unknown is judged on its last reading (HW, log start, LSO, LEO) for the same grace. The
HW only grows, so the lag computed on the last one is a lower bound of the true lag, and
a stall (committed offset frozen, records waiting) stays a stall. Past the grace the
partition is ``error``: nothing honest can be said about it. The failures themselves are
counted by the sampler (``lagwatch_errors_total``, stage ``list_offsets``).
"""

from __future__ import annotations

import dataclasses

from exporter.contracts.snapshot import TP, PartitionOffsets

_READINGS = ("log_start", "hw", "lso", "leo")


class UnreadOffsets:
    """Since when each partition's HW has been unknown (only those: the map stays as
    small as the failures)."""

    def __init__(self) -> None:
        self.since: dict[TP, float] = {}

    def bridge(self, read: dict[TP, PartitionOffsets], unread: list[TP],
               last: dict[TP, PartitionOffsets], now: float, grace: float) -> dict[TP, PartitionOffsets]:
        """``read`` with its ``unread`` partitions (HW unknown) standing at ``last``'s
        readings while they are unknown for less than ``grace`` seconds; ``read`` itself
        when there is nothing to fill (the common case: no copy)."""
        out: dict[TP, PartitionOffsets] | None = None
        for tp in unread:
            po = read[tp]
            since = self.since.setdefault(tp, now)
            old = last.get(tp)
            if old is None or old.hw is None or now - since >= grace:
                continue
            if out is None:
                out = dict(read)
            out[tp] = dataclasses.replace(po, **{k: getattr(old, k) for k in _READINGS
                                                 if getattr(po, k) is None})
        for tp in [tp for tp in self.since if (po := read.get(tp)) is None or po.hw is not None]:
            del self.since[tp]  # read again, or gone
        return read if out is None else out

    def overdue(self, tp: TP, now: float, grace: float) -> float | None:
        """Seconds ``tp``'s HW has been unknown, once that is ``grace`` or more."""
        since = self.since.get(tp)
        return None if since is None or now - since < grace else now - since

"""Interpreter settings for a process that judges a large cluster every cycle."""

from __future__ import annotations

import gc

# Allocations between two collections of the youngest generation (Python's default: 700).
# A cycle allocates an object or more per group-partition and frees them by reference
# counting: views, samples and reasons are trees, not cycles. At the default the collector
# runs hundreds of times a cycle and, in its full collections, traverses every view kept.
YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 20)


def collect_less() -> None:
    """Fewer garbage collections, and none over what is loaded at start (modules,
    classes, configuration: never garbage). Reference cycles are still collected, later.
    https://docs.python.org/3/library/gc.html#gc.set_threshold"""
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    gc.freeze()

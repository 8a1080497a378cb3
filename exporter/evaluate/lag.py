"""Lag in seconds: the age of the oldest record a group has not consumed.

Default (``interpolate``): each partition keeps a bounded table of
(sample time, HW) points; the time the record at the committed offset C
became readable is interpolated between the two points whose HW brackets C.
It costs no requests and is accurate to one sampling interval. Runs of equal
HW keep only their first and last point, so an idle topic does not push its
history out, and a record written after a long idle gap gets the gap's end,
not its start (kafka-lag-exporter's idle-topic bug, seglo/kafka-lag-exporter#37 and #121).

When C is older than the table (exporter just started, or a group rewound to
reprocess) interpolation cannot know; instead of extrapolating absurd values we
read the record's own timestamp (``exporter.kafka.timestamps``, in the Kafka worker).
``exact`` mode uses that reader for every lagging partition.
"""

from __future__ import annotations

from exporter.config import Config, default_of


class HwHistory:
    """Monotonic (time, HW) points of one partition, oldest first."""

    __slots__ = ("points", "limit")

    def __init__(self, limit: int = default_of(Config, "history_points")) -> None:
        self.points: list[tuple[float, int]] = []
        self.limit = limit

    def add(self, t: float, hw: int) -> None:
        pts = self.points
        if pts and hw < pts[-1][1]:
            pts.clear()  # topic recreated or truncated: older points are meaningless
        if len(pts) >= 2 and pts[-1][1] == hw and pts[-2][1] == hw:
            pts[-1] = (t, hw)  # extend a run of equal HW: keep its first and last point
        else:
            pts.append((t, hw))
        if len(pts) > self.limit:
            del pts[: len(pts) - self.limit]

    def readable_since(self, offset: int) -> float | None:
        """When the record at ``offset`` became readable (HW passed it); None if unknown."""
        pts = self.points
        if not pts or pts[-1][1] <= offset:
            return None
        if pts[0][1] > offset:
            return None  # older than the table
        lo, hi = 0, len(pts) - 1  # first index with hw > offset
        while lo < hi:
            mid = (lo + hi) // 2
            if pts[mid][1] > offset:
                hi = mid
            else:
                lo = mid + 1
        (t0, h0), (t1, h1) = pts[lo - 1], pts[lo]
        return t0 + (t1 - t0) * (offset + 1 - h0) / (h1 - h0)

    @property
    def oldest(self) -> float | None:
        return self.points[0][0] if self.points else None


def lag_origin(committed: int, history: HwHistory | None, exact_ts: float | None) -> float | None:
    """When the oldest record not consumed (at ``committed``) became readable: its own
    timestamp when read, else interpolated on the HW history; None when unknowable. A
    lag's seconds are ``now`` less this time (:func:`lag_seconds`)."""
    if exact_ts is not None:
        return exact_ts
    return history.readable_since(committed) if history else None


def lag_seconds(now: float, committed: int, hw: int, history: HwHistory | None,
                exact_ts: float | None) -> float | None:
    """Never negative, never NaN; 0 when caught up; None when unknowable."""
    if committed >= hw:
        return 0.0
    since = lag_origin(committed, history, exact_ts)
    if since is None:
        return None
    return max(0.0, now - since)

"""The statuses a partition, group or Spark query can be in, with their severity."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Declared from least to most severe: a group's status is its worst partition's.

    A ``StrEnum``, so a status is also its plain label value (``Status.OK == "ok"``).
    """

    OK = "ok"
    LAGGING = "lagging"
    REWIND = "rewind"
    STALLED = "stalled"
    LIVELOCKED = "livelocked"
    STOPPED = "stopped"
    ERROR = "error"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {s: i for i, s in enumerate(Status)}

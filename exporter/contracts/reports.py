"""What clients say about themselves through the reports topic (exporter/reports/decode.py
reads them): the closed sets of a report's fields."""

from __future__ import annotations

from enum import StrEnum


class CommitMode(StrEnum):
    """How a consumer commits, from its own configuration (``enable.auto.commit``)."""

    AUTO = "auto"  # every auto_commit_interval seconds, by the client
    MANUAL = "manual"  # when the application says
    MIXED = "mixed"  # a group's members differ (a group's exposure only, never a report)


# What one consumer's report may say.
REPORTED_COMMIT_MODES = (CommitMode.AUTO, CommitMode.MANUAL)

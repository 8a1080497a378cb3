"""PySpark StreamingQueryListener that reports query offsets to lagwatch (see docs/spark.md).

    import spark_metrics
    spark.streams.addListener(spark_metrics.LagListener(bootstrap_servers="broker:9092"))

``LagListener`` is imported on first use, so ``spark_metrics.offsets`` (progress
parsing) works without pyspark.
"""

from __future__ import annotations

from typing import Any

from lagwatch_client.wire import DEFAULT_REPORTS_TOPIC
from spark_metrics.offsets import OffsetParseError, ProgressInfo, parse_offsets, parse_progress

__all__ = ["DEFAULT_REPORTS_TOPIC", "LagListener", "OffsetParseError", "ProgressInfo",
           "parse_offsets", "parse_progress"]


def __getattr__(name: str) -> Any:
    if name == "LagListener":
        from spark_metrics.listener import LagListener

        return LagListener
    raise AttributeError(f"module 'spark_metrics' has no attribute {name!r}")

"""The reports' wire format: what reporters write and the exporter's reader accepts.

Consumer applications (:mod:`lagwatch_client.consumer`) and Spark drivers
(:mod:`spark_metrics`) encode reports with these constants and functions;
``exporter.reports.decode`` decodes them with the same ones. The format itself is
documented there, next to the strict decoder.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

VERSION = 1
MAX_REPORT_BYTES = 256 * 1024
MAX_NAME = 512
DEFAULT_REPORTS_TOPIC = "__lagwatch_reports"
# How reporters create the reports topic when it is missing: compacted, so the latest
# report of every consumer member and Spark query survives an exporter restart.
TOPIC_PARTITIONS = 3
TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000",
                "segment.ms": "3600000"}


def report_key(kind: str, group: str, who: str) -> bytes:
    """Compaction key: the latest report per consumer member or Spark query survives."""
    return f"{kind}/{group}/{who}".encode()


def encode(report: dict[str, Any]) -> bytes:
    return json.dumps(report, separators=(",", ":"), allow_nan=False).encode()


def ensure_reports_topic(conf: dict[str, Any], topic: str, timeout: float = 10.0) -> None:
    """Create the compacted reports topic if it is missing (best effort)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    # Create first, never ask for its metadata: a metadata request for a missing topic makes a
    # broker with auto.create.topics.enable (the default) create it, uncompacted, 1 partition.
    new = NewTopic(topic, num_partitions=TOPIC_PARTITIONS, replication_factor=-1, config=TOPIC_CONFIG)
    fut = admin.create_topics([new], request_timeout=timeout)[topic]
    with contextlib.suppress(Exception):  # exists already, or not authorized: reports still flow
        fut.result(timeout)

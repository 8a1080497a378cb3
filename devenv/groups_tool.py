"""Kafka's own ``kafka-consumer-groups --describe``, parsed: the tests' ground truth."""

from __future__ import annotations

from dataclasses import dataclass

from devenv.kafka import KafkaCluster

GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@dataclass(frozen=True)
class DescribeRow:
    group: str
    topic: str
    partition: int
    current_offset: int | None  # committed offset; None when the tool prints "-"
    log_end_offset: int | None  # really the high watermark (consumer endOffsets)
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


def _opt_int(v: str) -> int | None:
    return None if v == "-" else int(v)


def _opt_str(v: str) -> str | None:
    return None if v == "-" else v


def parse_describe(text: str) -> list[DescribeRow]:
    """Parse the offsets table; header lines repeat once per group."""
    rows: list[DescribeRow] = []
    for line in text.splitlines():
        cols = line.split()
        if len(cols) < 9 or cols[0] == "GROUP":
            continue
        # CONSUMER-ID/HOST/CLIENT-ID never contain spaces in our tests, but
        # HOST is "/127.0.0.1" style; keep the last three columns as they are.
        group, topic, part, cur, leo, lag, cid, host, client = cols[:9]
        rows.append(DescribeRow(group, topic, int(part), _opt_int(cur), _opt_int(leo),
                                _opt_int(lag), _opt_str(cid), _opt_str(host), _opt_str(client)))
    return rows


def describe_group(cluster: KafkaCluster, group: str | None = None) -> list[DescribeRow]:
    """Rows of ``kafka-consumer-groups --describe`` for one group or all groups."""
    which = ["--group", group] if group else ["--all-groups"]
    out = cluster.run_tool(
        GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap_servers, "--describe", *which
    )
    return parse_describe(out)


def list_groups(cluster: KafkaCluster) -> list[str]:
    out = cluster.run_tool(GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap_servers, "--list")
    return sorted(line.strip() for line in out.splitlines() if line.strip())

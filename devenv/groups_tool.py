"""Kafka's own ``kafka-consumer-groups --describe``, parsed: the tests' ground truth."""

from __future__ import annotations

import functools
import zipfile
from dataclasses import dataclass
from pathlib import Path

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


# The tool's own wait for a coordinator or a metadata answer (its --timeout, 5 s by default):
# on a busy machine a broker can take longer than that to answer.
TOOL_TIMEOUT = ("--timeout", "60000")


def describe_group(cluster: KafkaCluster, group: str | None = None) -> list[DescribeRow]:
    """Rows of ``kafka-consumer-groups --describe`` for one group or all groups."""
    which = ["--group", group] if group else ["--all-groups"]
    out = cluster.run_tool(
        GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap_servers, "--describe", *which, *TOOL_TIMEOUT
    )
    return parse_describe(_no_error(out))


def list_groups(cluster: KafkaCluster) -> list[str]:
    out = cluster.run_tool(GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap_servers, "--list",
                           *TOOL_TIMEOUT)
    return sorted(line.strip() for line in _no_error(out).splitlines() if line.strip())


def _no_error(out: str) -> str:
    """The tool's output; a RuntimeError when it printed an error instead (some versions
    print it to stdout and exit 0)."""
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    if errors:
        raise RuntimeError(f"{GROUP_COMMAND} failed: {errors[0]}")
    return out


# -- share groups (KIP-932) and streams groups (KIP-1071), Kafka 4.2 -----------------------------
#
# Neither kind shows up in kafka-consumer-groups; each has its own tool. On a cluster formatted
# by Kafka 4.2 the share.version and streams.version features are finalized at 1 by default, so
# nothing needs enabling. A share group starts at the latest offset unless its GROUP config
# share.auto.offset.reset says otherwise.

SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
STREAMS_GROUP_COMMAND = "org.apache.kafka.tools.streams.StreamsGroupCommand"


@functools.cache
def _config_command(libs: Path) -> str:
    """kafka-configs' main class: in kafka-tools (Java) from Kafka 4.4 on, in the core jar
    (Scala) before."""
    java = "org.apache.kafka.tools.ConfigCommand"
    for jar in sorted(libs.glob("kafka-tools-*.jar")):
        with zipfile.ZipFile(jar) as z:
            if java.replace(".", "/") + ".class" in z.namelist():
                return java
    return "kafka.admin.ConfigCommand"


def _tables(text: str) -> list[dict[str, str]]:
    """Rows of the tools' column-aligned tables, keyed by header.

    Columns are split on whitespace; the last column takes the rest of the line (it may hold
    spaces, e.g. streams ASSIGNMENTS) and is "" when the tool printed nothing there.
    """
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.split()[0] == "GROUP":
            # "COORDINATOR (ID)" is the one header holding a space
            header = line.replace("COORDINATOR (ID)", "COORDINATOR-(ID)").split()
            continue
        if header is None:
            continue
        cols = line.split(None, len(header) - 1)
        cols += [""] * (len(header) - len(cols))
        rows.append(dict(zip(header, (c.strip() for c in cols), strict=True)))
    return rows


def set_share_auto_offset_reset_earliest(cluster: KafkaCluster, group: str) -> None:
    """Make a share group (existing or not yet) start from the earliest offset.

    Equivalent to ``kafka-configs --entity-type groups --entity-name G --alter --add-config
    share.auto.offset.reset=earliest``: a dynamic GROUP config, which share consumers cannot set
    themselves. Set it before the group's first member joins; it only matters for partitions the
    group has no state for yet.
    """
    cluster.run_tool(_config_command(cluster.libs), "--bootstrap-server", cluster.bootstrap_servers,
                     "--entity-type", "groups", "--entity-name", group,
                     "--alter", "--add-config", "share.auto.offset.reset=earliest")


@dataclass(frozen=True)
class ShareDescribeRow:
    """One partition of ``kafka-share-groups --describe --verbose``."""

    group: str
    topic: str
    partition: int
    start_offset: int | None  # share-partition start offset; None ("-") until the state is written
    lag: int | None  # high watermark - start offset - records past it already done with (acknowledged)
    leader_epoch: int | None


@dataclass(frozen=True)
class ShareMemberRow:
    """One member of ``kafka-share-groups --describe --members --verbose``."""

    group: str
    consumer_id: str
    host: str
    client_id: str
    partitions: int  # the #PARTITIONS column
    member_epoch: int | None
    assignment: tuple[tuple[str, int], ...]  # (topic, partition), from "t1:0,1;t2:0"


def parse_share_describe(text: str) -> list[ShareDescribeRow]:
    return [ShareDescribeRow(r["GROUP"], r["TOPIC"], int(r["PARTITION"]), _opt_int(r["START-OFFSET"]),
                             _opt_int(r["LAG"]), _opt_int(r.get("LEADER-EPOCH", "-")))
            for r in _tables(text)]


def _share_assignment(text: str) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    for part in filter(None, text.split(";")):
        topic, _, parts = part.rpartition(":")
        out += [(topic, int(p)) for p in parts.split(",") if p]
    return tuple(out)


def parse_share_members(text: str) -> list[ShareMemberRow]:
    return [ShareMemberRow(r["GROUP"], r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"], int(r["#PARTITIONS"]),
                           _opt_int(r.get("MEMBER-EPOCH", "-")), _share_assignment(r["ASSIGNMENT"]))
            for r in _tables(text)]


def describe_share_group(cluster: KafkaCluster, group: str) -> list[ShareDescribeRow]:
    """Per-partition state of a share group (empty when it has no offset information yet)."""
    out = cluster.run_tool(SHARE_GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap_servers,
                           "--describe", "--group", group, "--verbose")
    return parse_share_describe(out)


def describe_share_members(cluster: KafkaCluster, group: str) -> list[ShareMemberRow]:
    """Members of a share group (empty when it has none)."""
    out = cluster.run_tool(SHARE_GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap_servers,
                           "--describe", "--group", group, "--members", "--verbose")
    return parse_share_members(out)


@dataclass(frozen=True)
class StreamsDescribeRow:
    """One input partition of ``kafka-streams-groups --describe --offsets --verbose``."""

    group: str
    topic: str
    partition: int
    current_offset: int | None  # committed offset; None ("-") when none
    log_end_offset: int | None  # the tool's LOG-END-OFFSET (Admin listOffsets latest = high watermark)
    lag: int | None
    leader_epoch: int | None


@dataclass(frozen=True)
class StreamsMemberRow:
    """One member of ``kafka-streams-groups --describe --members --verbose``."""

    group: str
    member_id: str
    process_id: str
    client_id: str
    member_protocol: str  # "streams" (or "classic" for a member upgraded from the classic protocol)
    member_epoch: int | None
    target_assignment_epoch: int | None
    topology_epoch: int | None
    # tasks as (subtopology, partition): the current assignment, and the target active one
    active: tuple[tuple[str, int], ...]
    standby: tuple[tuple[str, int], ...]
    warmup: tuple[tuple[str, int], ...]
    target_active: tuple[tuple[str, int], ...]


def _streams_tasks(text: str) -> dict[str, tuple[tuple[str, int], ...]]:
    """'ACTIVE: 0:[0,1,2]; TARGET-ACTIVE: 0:[0,1,2]; ' -> {'ACTIVE': (('0', 0), ...), ...}"""
    tasks: dict[str, list[tuple[str, int]]] = {}
    kind = None
    for token in text.replace(";", " ").split():
        if token.endswith(":") and not token[:-1].isdigit():
            kind = token[:-1]
            tasks.setdefault(kind, [])
        elif kind is not None and ":[" in token:
            sub, _, parts = token.partition(":[")
            tasks[kind] += [(sub, int(p)) for p in parts.rstrip("]").split(",") if p]
    return {k: tuple(v) for k, v in tasks.items()}


def parse_streams_describe(text: str) -> list[StreamsDescribeRow]:
    return [StreamsDescribeRow(r["GROUP"], r["TOPIC"], int(r["PARTITION"]),
                               _opt_int(r.get("CURRENT-OFFSET", "-")), _opt_int(r.get("LOG-END-OFFSET", "-")),
                               _opt_int(r["OFFSET-LAG"]), _opt_int(r.get("LEADER-EPOCH") or "-"))
            for r in _tables(text)]


def parse_streams_members(text: str) -> list[StreamsMemberRow]:
    rows = []
    for r in _tables(text):
        tasks = _streams_tasks(r["ASSIGNMENTS"])
        rows.append(StreamsMemberRow(
            r["GROUP"], r["MEMBER"], r["PROCESS"], r["CLIENT-ID"], r.get("MEMBER-PROTOCOL", ""),
            _opt_int(r.get("MEMBER-EPOCH", "-")), _opt_int(r.get("TARGET-ASSIGNMENT-EPOCH", "-")),
            _opt_int(r.get("TOPOLOGY-EPOCH", "-")), tasks.get("ACTIVE", ()), tasks.get("STANDBY", ()),
            tasks.get("WARMUP", ()), tasks.get("TARGET-ACTIVE", ())))
    return rows


def describe_streams_group(cluster: KafkaCluster, group: str) -> list[StreamsDescribeRow]:
    """Per-input-partition committed offset, log end and lag of a streams group.

    The tool lists only the partitions of its members' active tasks: an Empty group gives no rows
    although its committed offsets remain (an OffsetFetch, e.g. confluent-kafka's
    list_consumer_group_offsets, still returns them).
    """
    out = cluster.run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap_servers,
                           "--describe", "--group", group, "--offsets", "--verbose")
    return parse_streams_describe(out)


def describe_streams_members(cluster: KafkaCluster, group: str) -> list[StreamsMemberRow]:
    """Members of a streams group (empty when it has none)."""
    out = cluster.run_tool(STREAMS_GROUP_COMMAND, "--bootstrap-server", cluster.bootstrap_servers,
                           "--describe", "--group", group, "--members", "--verbose")
    return parse_streams_members(out)

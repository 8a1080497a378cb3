"""Label text of the series lagwatch serves, each escaped once."""

from __future__ import annotations

from collections.abc import Iterator

from exporter.contracts.snapshot import PartitionOffsets
from exporter.contracts.view import ClusterView
from exporter.expose.textformat import escape_label


def partition_labels(v: ClusterView) -> Iterator[tuple[str, str, PartitionOffsets]]:
    """(topic, label string, offsets) of every partition, each topic's labels escaped once."""
    cl = cluster_label(v)
    topic_lab: dict[str, str] = {}
    for (topic, part), po in v.partitions.items():
        tl = topic_lab.get(topic)
        if tl is None:
            tl = topic_lab[topic] = f'{cl},topic="{escape_label(topic)}"'
        yield topic, f'{tl},partition="{part}"', po


def cluster_label(v: ClusterView) -> str:
    return f'cluster="{escape_label(v.cluster)}"'


def group_labels(v: ClusterView, group: str) -> str:
    return group_label_text(v.cluster, group)


def group_label_text(cluster: str, group: str) -> str:
    return f'cluster="{escape_label(cluster)}",group="{escape_label(group)}"'

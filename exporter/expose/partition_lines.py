"""The per-partition families of the consumer groups (committed, position, lag in
offsets and in seconds, stalled): five lines a group-partition, most of a large
cluster's ``/metrics`` and most of its rendering.

They need nothing but each group's judged rows, so they are rendered beside the
evaluation rather than after it: the runner hands each chunk of judged groups
(:class:`~exporter.contracts.worker.PartitionLinesChunk`) to the cluster's worker
process as the evaluator finishes it, the worker formats and deflates their lines on
the other core while the main process judges the next chunk, and the family bodies
come back with the cycle's :class:`~exporter.contracts.worker.PartitionLinesReply`.
The main process renders every other family and takes these five bodies in their
place (exporter/expose/render.py). Where the worker cannot (it died, or the view
was capped after the chunks went), the main process renders them itself with the
same :func:`add_group`: the bytes are the same either way (tests/test_partition_lines.py).
This module runs in the worker, which imports no numpy (a test keeps it so): the columns
cross as bytes and are read with ``array``.
"""

from __future__ import annotations

import array
import math
from collections.abc import Sequence

from exporter.contracts.snapshot import TP
from exporter.contracts.worker import PartitionBodies, PartitionLinesChunk
from exporter.expose.textformat import Lines, escape_label, float_text

# The five families, in the contract's order.
NAMES: tuple[str, ...] = ("kafka_consumergroup_committed_offset", "kafka_consumergroup_position_offset",
                          "kafka_consumergroup_lag_offsets", "kafka_consumergroup_lag_seconds",
                          "kafka_consumergroup_stalled_seconds")

Out = tuple[Lines, Lines, Lines, Lines, Lines]
# Seconds texts a cycle keeps at most (a few MB): past it, a new value is formatted each
# time it is met.
TEXTS_KEPT = 1 << 16


def new_lines() -> Out:
    """The five families' empty buffers: their sample lines only (the main process writes
    each family's header, from the metric contract)."""
    a, b, c, d, e = (Lines(n, "") for n in NAMES)
    return a, b, c, d, e


def add_group(gl: str, tps: Sequence[TP], committed: Sequence[int], position: Sequence[int],
              lag_offsets: Sequence[int], lag_seconds: Sequence[float],
              stalled_seconds: Sequence[float], out: Out, texts: dict[float, str] | None = None) -> None:
    """One group's per-partition series, formatted into one text per family and added at
    once: each line costs a list append, not an encode and a copy (NO_OFFSET and NaN: no
    line). ``texts``: the seconds formatted so far, shared by the groups of a cycle
    (:class:`PartitionLines`); None: the group's own."""
    pre_c, pre_p, pre_lo, pre_ls, pre_st = (f"{f.name}{{" for f in out)
    isfinite = math.isfinite
    cl: list[str] = []
    po: list[str] = []
    lo: list[str] = []
    ls: list[str] = []
    st: list[str] = []
    gtl: dict[str, str] = {}
    # Seconds repeat: one stall clock for a group's partitions, and one lag for every group
    # at the same offset of a partition (the evaluator computes it once); 0 for most.
    texts = {0.0: "0"} if texts is None else texts
    for (topic, partition), c, pos, lag, secs, stall in zip(
            tps, committed, position, lag_offsets, lag_seconds, stalled_seconds, strict=True):
        tl = gtl.get(topic)
        if tl is None:
            tl = gtl[topic] = f'{gl},topic="{escape_label(topic)}"'
        pl = f'{tl},partition="{partition}"}} '
        if c >= 0:
            cl.append(f"{pre_c}{pl}{c}\n")
        if pos >= 0:
            po.append(f"{pre_p}{pl}{pos}\n")
        if lag >= 0:
            lo.append(f"{pre_lo}{pl}{lag}\n")
        # Most partitions of a large cluster are caught up: 0 s needs no formatting.
        if isfinite(secs):  # NaN: unknown, no line
            if (t := texts.get(secs)) is None:
                t = _text(secs, texts)
            ls.append(f"{pre_ls}{pl}{t}\n")
        if (t := texts.get(stall)) is None:
            t = _text(stall, texts)
        st.append(f"{pre_st}{pl}{t}\n")
    for lines, text in zip(out, (cl, po, lo, ls, st), strict=True):
        if text:
            lines.add_text("".join(text))


def _text(v: float, texts: dict[float, str]) -> str:
    """``v``'s text, kept in ``texts`` while it holds fewer than :data:`TEXTS_KEPT`."""
    t = float_text(v)
    if len(texts) < TEXTS_KEPT:
        texts[v] = t
    return t


class PartitionLines:
    """One cycle's five families as its chunks arrive (in the worker process)."""

    def __init__(self, cycle: int) -> None:
        self.cycle = cycle
        self.out = new_lines()
        self.texts: dict[float, str] = {0.0: "0"}  # the cycle's seconds texts (add_group)

    def add(self, chunk: PartitionLinesChunk) -> None:
        rows = len(chunk.tps)
        committed, position, lag_o = (_column("q", c, rows) for c in (chunk.committed, chunk.position,
                                                                      chunk.lag_offsets))
        lag_s, stalled = _column("d", chunk.lag_seconds, rows), _column("d", chunk.stalled_seconds, rows)
        if sum(chunk.sizes) != rows:
            raise ValueError(f"a chunk of {rows} rows says its groups hold {sum(chunk.sizes)}")
        at = 0
        for gl, size in zip(chunk.labels, chunk.sizes, strict=True):
            end = at + size
            add_group(gl, chunk.tps[at:end], committed[at:end], position[at:end], lag_o[at:end],
                      lag_s[at:end], stalled[at:end], self.out, self.texts)
            at = end

    def bodies(self) -> PartitionBodies:
        """The five families' bodies, picklable (plain text as bytes, or deflated)."""
        return tuple(b.tobytes() if isinstance(b, memoryview) else b
                     for b in (lines.body() for lines in self.out))


def _column(kind: str, data: bytes, rows: int) -> list:
    """A column's values from its bytes (``q``: int64, ``d``: float64)."""
    a = array.array(kind)
    a.frombytes(data)
    if len(a) != rows:
        raise ValueError(f"a chunk of {rows} rows has a column of {len(a)}")
    return a.tolist()

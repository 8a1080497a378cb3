"""Kafka offsets out of a StreamingQueryProgress, whatever form the PySpark flavour hands them in.

Pure Python (no pyspark import) so it is cheap to test with real progress shapes.

``json.loads(progress.json)["sources"][i]["endOffset"]`` is a nested dict in
classic PySpark and in Spark Connect alike. The typed ``SourceProgress.endOffset``
attribute is a JSON string in classic mode but a Python ``repr`` of a dict in
Spark Connect 4.0/4.1 (``str(dict)``, single quotes), so every entry point
here accepts a dict, a JSON string or a repr string.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Offsets = dict[str, dict[str, int]]  # topic -> partition (as str, like Spark) -> next offset
KAFKA_PREFIXES = ("KafkaV2[", "KafkaSourceV1[")


class OffsetParseError(ValueError):
    pass


def _loads(text: str) -> Any:
    text = text.strip()
    if not text or text in ("null", "None"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:  # Spark Connect 4.0/4.1: str(dict) -> "{'t': {'0': 5}}"
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise OffsetParseError(f"neither JSON nor a Python literal: {text[:80]!r}") from e


def parse_offsets(value: Any) -> Offsets | None:
    """``{"t": {"0": 12}}`` from a dict, JSON text or Python repr; None when absent.

    Partition keys come back as decimal strings (Spark's form); offsets as ints.
    Spark uses -1/-2 for "latest"/"earliest" in start offsets the user asked for;
    those are not positions and are skipped.
    """
    if isinstance(value, str | bytes):
        value = _loads(value.decode() if isinstance(value, bytes) else value)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise OffsetParseError(f"offsets must be an object, got {type(value).__name__}")
    out: Offsets = {}
    for topic, parts in value.items():
        if not isinstance(topic, str) or not topic:
            raise OffsetParseError(f"bad topic name {topic!r}")
        if isinstance(parts, str):
            parts = _loads(parts)
        if not isinstance(parts, Mapping):
            raise OffsetParseError(f"offsets of {topic} must be an object")
        tp: dict[str, int] = {}
        for p, off in parts.items():
            ps = str(p)
            if not ps.isdigit():
                raise OffsetParseError(f"bad partition {p!r} of {topic}")
            if isinstance(off, bool) or not isinstance(off, int | float | str):
                raise OffsetParseError(f"bad offset {off!r} for {topic}[{ps}]")
            try:
                n = int(off)
            except ValueError:
                raise OffsetParseError(f"bad offset {off!r} for {topic}[{ps}]") from None
            if n >= 0:
                tp[str(int(ps))] = n
        out[topic] = tp
    return out


def is_kafka_source(description: Any) -> bool:
    """``KafkaV2[Subscribe[t]]``, ``KafkaV2[SubscribePattern[..]]``, ``KafkaV2[Assign[..]]``,
    ``KafkaSourceV1[...]``; anything else (files, rate, socket, Delta) is not ours."""
    return isinstance(description, str) and description.startswith(KAFKA_PREFIXES)


def _merge(into: Offsets, new: Offsets, pick: Any) -> None:
    for topic, parts in new.items():
        cur = into.setdefault(topic, {})
        for p, off in parts.items():
            cur[p] = pick(cur[p], off) if p in cur else off


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None
    try:
        f = float(v)
    except ValueError:
        return None
    return f if math.isfinite(f) and 0 <= f <= 1e15 else None


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


@dataclass
class ProgressInfo:
    """What lagwatch needs from one progress event."""

    query_id: str | None = None
    run_id: str | None = None
    name: str | None = None
    batch_id: int | None = None
    batch_duration_ms: float | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    num_input_rows: int | None = None
    end_offsets: Offsets = field(default_factory=dict)
    latest_offsets: Offsets = field(default_factory=dict)
    kafka_sources: int = 0
    errors: list[str] = field(default_factory=list)  # sources that could not be read


def progress_dict(progress: Any) -> dict[str, Any]:
    """The progress as plain JSON data: ``json.loads(progress.json)`` when available.

    Accepts a StreamingQueryProgress (classic or Connect), its ``json`` text, or
    an already-parsed dict.
    """
    if isinstance(progress, str | bytes):
        d = _loads(progress.decode() if isinstance(progress, bytes) else progress)
    else:
        try:
            text = progress.json
            if callable(text):  # very old PySpark had json() as a method
                text = text()
        except Exception:  # noqa: BLE001 - fall back to the typed fields below
            text = None
        if isinstance(text, str | bytes):
            d = json.loads(text)
        elif isinstance(progress, Mapping):  # PySpark 4 progress objects are dicts
            d = dict(progress)
        else:
            raise OffsetParseError(f"cannot read progress of type {type(progress).__name__}")
    if not isinstance(d, dict):
        raise OffsetParseError("progress is not a JSON object")
    return d


def parse_progress(progress: Any) -> ProgressInfo:
    """Offsets of every Kafka source, merged per topic-partition, plus batch figures.

    When two Kafka sources of one query read the same partition (a self-join),
    the end offset kept is the smaller one (the lag that matters is the one
    further behind) and the latest offset the larger.
    """
    d = progress_dict(progress)
    info = ProgressInfo(
        query_id=str(d["id"]) if d.get("id") is not None else None,
        run_id=str(d["runId"]) if d.get("runId") is not None else None,
        name=d.get("name") if isinstance(d.get("name"), str) and d.get("name") else None,
        batch_id=_int(d.get("batchId")),
        input_rows_per_second=_finite(d.get("inputRowsPerSecond")),
        processed_rows_per_second=_finite(d.get("processedRowsPerSecond")),
        num_input_rows=_int(d.get("numInputRows")),
    )
    dur = d.get("batchDuration")  # 4.0+; before that only durationMs.triggerExecution
    if dur is None and isinstance(d.get("durationMs"), Mapping):
        dur = d["durationMs"].get("triggerExecution")
    info.batch_duration_ms = _finite(dur)
    sources = d.get("sources") or []
    if not isinstance(sources, list):
        raise OffsetParseError("sources is not a list")
    for i, src in enumerate(sources):
        if isinstance(src, str):
            try:
                src = _loads(src)
            except OffsetParseError as e:
                info.errors.append(f"source {i}: {e}")
                continue
        if not isinstance(src, Mapping) or not is_kafka_source(src.get("description")):
            continue
        info.kafka_sources += 1
        try:
            end = parse_offsets(src.get("endOffset"))
            latest = parse_offsets(src.get("latestOffset"))
        except OffsetParseError as e:
            info.errors.append(f"source {i} ({src.get('description')}): {e}")
            continue
        if end:
            _merge(info.end_offsets, end, min)
        if latest:
            _merge(info.latest_offsets, latest, max)
    return info


def running_batch(execution: Any) -> dict[str, Any] | None:
    """The micro-batch a query planned and has not committed, read from its ``StreamExecution``
    (classic PySpark: ``query._jsq.streamingQuery()``, through py4j): Spark writes a batch's
    end offsets to the offset log before running it and the batch id to the commit log once
    done, and re-runs a planned, uncommitted batch after a restart. None when no batch is
    planned beyond the last committed one; raises when the logs cannot be read.

    ``{"batch_id": N, "start_offsets": <offset log N-1>, "end_offsets": <offset log N>}``,
    each the Kafka sources' offsets merged like :func:`parse_progress` (other sources left out).
    """
    planned = execution.offsetLog().getLatest()
    if planned.isEmpty():
        return None
    batch_id = int(planned.get()._1())
    done = execution.commitLog().getLatest()
    if not done.isEmpty() and int(done.get()._1()) >= batch_id:
        return None
    start: Offsets = {}
    if batch_id > 0:
        prev = execution.offsetLog().get(batch_id - 1)
        if not prev.isEmpty():
            start = kafka_offsets(prev.get())
    return {"batch_id": batch_id, "start_offsets": start, "end_offsets": kafka_offsets(planned.get()._2())}


def kafka_offsets(offset_seq: Any) -> Offsets:
    """The Kafka sources' offsets of an ``OffsetSeq`` (one optional offset per source, as JSON):
    a Kafka source's is ``{"topic": {"partition": offset}}``; any other shape is another source."""
    out: Offsets = {}
    offsets = offset_seq.offsets()
    for i in range(int(offsets.size())):
        opt = offsets.apply(i)
        if opt.isEmpty():
            continue
        try:
            parsed = parse_offsets(str(opt.get().json()))
        except OffsetParseError:
            continue
        if parsed and all(isinstance(parts, dict) for parts in parsed.values()):
            _merge(out, parsed, min)
    return out

"""Judgement that survives a restart: the evaluator's state as plain data, as records, and back.

Every recording of tests/recordings/ is replayed through an evaluator that runs without
a break and one that is "restarted" in the middle: its groups and topics exported,
encoded as state records, decoded and imported into a new evaluator, which replays the
rest. Every view of every later cycle is equal (statuses, stalled seconds, lag seconds,
rates, rebalance counts, reasons), also across a gap of cycles the restarted one never
saw. Records that are corrupt, truncated, of another format version, of another Kafka
cluster or too old are refused with their reason (a property test feeds arbitrary bytes
and arbitrary JSON), never an exception of another kind.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter import recording
from exporter.contracts.snapshot import TP
from exporter.contracts.state import SavedGroup
from exporter.contracts.status import Status
from exporter.contracts.view import ClusterView, PartitionProgress, PartitionRows, PartitionView, ProgressRows
from exporter.evaluate.columns import PartitionTable
from exporter.evaluate.evaluator import Evaluator
from exporter.state import codec
from exporter.state.codec import DropReason, StateError
from exporter.state.plain import PlainError, decoder, from_plain, to_plain

pytestmark = pytest.mark.unit

RECORDINGS = sorted((Path(__file__).resolve().parent / "recordings").glob("*.jsonl.xz"))
CID = "cluster-id-1"


def _make(rec: recording.Recording) -> Evaluator:
    h = rec.header
    return Evaluator(h["cluster"], rec.thresholds, rec.interval, int(h["history_points"]),
                     int(h["max_group_partitions"]), rec.group_thresholds)


def _restarted(ev: Evaluator, fresh: Evaluator, now: float) -> int:
    """``fresh`` with ``ev``'s state, through records as the state topic holds them; the
    records' bytes."""
    size = 0
    for t in ev.export_topics():
        raw = codec.encode(t, CID, now)
        d = codec.decode(codec.TOPIC, t.topic, raw, CID, now, 3600.0)
        assert d.state == t
        fresh.import_topic(d.state, d.at)
        size += len(raw)
    for gid in ev.state_groups():
        s = ev.export_group(gid)
        assert s is not None
        raw = codec.encode(s, CID, now)
        d = codec.decode(codec.GROUP, gid, raw, CID, now, 3600.0)
        assert d.state == s, gid
        assert isinstance(d.state, SavedGroup)
        fresh.import_group(gid, d.state)
        size += len(raw)
    return size


_VIEWS = decoder(tuple[PartitionView, ...])
_PROGRESS = decoder(tuple[tuple[tuple[str, int], PartitionProgress], ...])


def _plain_ways_agree(ev: Evaluator, view: ClusterView) -> tuple[int, int]:
    """Each group's rows and rates made plain from their columns equal what each row read
    as a PartitionView (or PartitionProgress) gives field by field, and decode, column
    by column, to what the generic decoder makes row by row; each memory table made
    again from its plain rows equals it. Returns (rows, rate rows) compared."""
    rows = rates = 0
    for g in view.groups.values():
        plain = g.partitions.plain()
        assert plain == tuple(to_plain(v) for v in g.partitions), g.group
        again = json.loads(json.dumps(plain))
        assert from_plain(PartitionRows, again) == PartitionRows.of(_VIEWS(again)) == g.partitions
        rows += len(plain)
        progress = g.progress.partitions if g.progress is not None else None
        if isinstance(progress, ProgressRows):
            pairs = progress.plain()
            assert pairs == tuple((tuple(tp), to_plain(p)) for tp, p in progress.items())
            again = json.loads(json.dumps(pairs))
            assert dict(from_plain(Mapping[TP, PartitionProgress], again)) == dict(_PROGRESS(again))
            rates += len(pairs)
        table = ev.groups[g.group].memory.parts
        if isinstance(table, PartitionTable):
            made = PartitionTable.of_plain(list(table.tps), table.plain())
            assert dict(made) == dict(table) and made.plain() == table.plain()
    return rows, rates


def _replay(rec: recording.Recording, ats: tuple[int, ...], gap: int = 0,
            plain: list[int] | None = None) -> tuple[list[int], int]:
    """Replay ``rec`` through an evaluator without a break and, for each cycle ``at`` of
    ``ats``, one restarted before it: a new evaluator given, through records, the state the
    unbroken one had after cycle ``at - 1`` (what an evaluator restarted there had: both
    judged the same cycles). With ``gap`` (one restart), both miss cycles at..at+gap-1 (the
    exporter was down). Every later view of each restarted one equals the unbroken one's.
    Returns (cycles compared per restart, group-cycles not ok after the first restart).
    With ``plain``, also :func:`_plain_ways_agree` on every view without a break."""
    assert not gap or len(ats) == 1
    a = _make(rec)
    restarted: dict[int, Evaluator] = {}
    compared = [0] * len(ats)
    troubled = 0
    for i, c in enumerate(rec.cycles):
        if gap and ats[0] <= i < ats[0] + gap:
            continue
        for at in ats:
            if i == at + gap:
                restarted[at] = fresh = _make(rec)
                _restarted(a, fresh, rec.cycles[at - 1].now)
        va = a.evaluate(c.snap, c.consumer, c.spark, c.exact_ts, now=c.now)
        if plain is not None:
            plain[:] = [n + m for n, m in zip(plain, _plain_ways_agree(a, va), strict=True)]
        for k, at in enumerate(ats):
            if at not in restarted:
                continue
            vb = restarted[at].evaluate(c.snap, c.consumer, c.spark, c.exact_ts, now=c.now)
            for gid, g in va.groups.items():
                assert vb.groups.get(gid) == g, f"cycle {i}: {gid} differs after the restart at {at}"
            assert va == vb, f"cycle {i}: the views differ after the restart at {at}"
            compared[k] += 1
            if k == 0:
                troubled += sum(1 for g in va.groups.values() if g.status != Status.OK)
    return compared, troubled


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name.split(".")[0])
def test_a_restart_mid_replay_serves_what_no_restart_serves(path: Path) -> None:
    rec = recording.load(path)
    n = len(rec.cycles)
    plain = [0, 0]
    compared, troubled = _replay(rec, (n // 3, n // 2), plain=plain)
    assert compared == [n - n // 3, n - n // 2]
    compared, _ = _replay(rec, (2 * n // 3,), gap=3)
    assert compared == [n - 2 * n // 3 - 3]
    assert plain[0] > 0
    if path.name.startswith("scenarios"):
        assert plain[1] > 0  # rates in columns were compared
    if path.name.startswith(("scenarios", "membership.", "group-types")):
        assert troubled > 0  # the restart fell while groups were stalled, stopped, livelocked


def test_rows_that_do_not_fit_are_refused_as_the_generic_decoder_refuses_them() -> None:
    bad = [["t", 0, 5, None, 1, 2.0, 0.0, "sleepy", "", "", False, ""]]  # no such status
    with pytest.raises(PlainError):
        from_plain(PartitionRows, bad)
    with pytest.raises(PlainError):  # a bool where the records lost are
        from_plain(Mapping[TP, PartitionProgress], [[["t", 0], [1.0, None, None, True, 0]]])


def _stalled_group_state() -> tuple[Evaluator, SavedGroup]:
    """An evaluator that judged scenarios.jsonl until a partition was stalled."""
    rec = recording.load(next(p for p in RECORDINGS if p.name.startswith("scenarios")))
    ev = _make(rec)
    for c in rec.cycles:
        v = ev.evaluate(c.snap, c.consumer, c.spark, c.exact_ts, now=c.now)
        stalled = [g for g in v.groups.values() if g.status == Status.STALLED]
        if stalled and any(p.stalled_seconds > 0 for p in stalled[0].partitions):
            s = ev.export_group(stalled[0].group)
            assert s is not None
            return ev, s
    raise AssertionError("no stalled group in scenarios.jsonl")


def test_a_record_of_another_cluster_version_or_age_is_refused_with_its_reason() -> None:
    _ev, s = _stalled_group_state()
    raw = codec.encode(s, CID, 1000.0)
    ok = codec.decode(codec.GROUP, s.group, raw, CID, 1010.0, 60.0)
    assert ok.state == s and ok.at == 1000.0
    v2 = b"\x02" + raw[1:]
    cases = {
        DropReason.FOREIGN_CLUSTER: lambda: codec.decode(codec.GROUP, s.group, raw, "other", 1010.0, 60.0),
        DropReason.STALE: lambda: codec.decode(codec.GROUP, s.group, raw, CID, 1061.0, 60.0),
        DropReason.BAD_VERSION: lambda: codec.decode(codec.GROUP, s.group, v2, CID, 1010.0, 60.0),
        DropReason.CORRUPT: lambda: codec.decode(codec.GROUP, s.group, raw[:-5], CID, 1010.0, 60.0),
        DropReason.MALFORMED: lambda: codec.decode(codec.GROUP, "another-group", raw, CID, 1010.0, 60.0),
    }
    for reason, call in cases.items():
        with pytest.raises(StateError) as e:
            call()
        assert e.value.reason == reason


def _doc(state: object) -> bytes:
    text = json.dumps({"cluster_id": CID, "at": 1000.0, "state": state})
    return bytes((codec.VERSION,)) + zlib.compress(text.encode())


def test_a_record_written_before_a_field_was_added_reads_with_its_default() -> None:
    """A group's record as a lagwatch before ``committed_after`` wrote it (one field fewer,
    the last) reads back with that field's default; one more field fewer is not a group
    of the known fields with defaults only, and one field too many is malformed."""
    _ev, s = _stalled_group_state()
    s = dataclasses.replace(s, committed_after=990.5)
    plain = json.loads(zlib.decompress(codec.encode(s, CID, 1000.0)[1:]))["state"]
    old = codec.decode(codec.GROUP, s.group, _doc(plain[:-1]), CID, 1010.0, 60.0)
    assert old.state == dataclasses.replace(s, committed_after=None)
    assert codec.decode(codec.GROUP, s.group, _doc(plain), CID, 1010.0, 60.0).state == s
    fields = [f.name for f in dataclasses.fields(SavedGroup)]
    required = fields.index("seen")  # the fields from ``seen`` on have defaults
    for bad in (plain[:required - 1], [*plain, None]):
        with pytest.raises(StateError) as e:
            codec.decode(codec.GROUP, s.group, _doc(bad), CID, 1010.0, 60.0)
        assert e.value.reason == DropReason.MALFORMED, len(bad)


def test_a_partition_row_of_the_wrong_kind_is_malformed() -> None:
    _ev, s = _stalled_group_state()
    row = list(s.partitions[0])
    for i, bad in ((2, "12"), (2, None), (3, True), (24, 1.5)):  # committed, changed_at, lagging...
        rows = [list(r) for r in s.partitions]
        rows[0] = row[:i] + [bad] + row[i + 1:]
        plain = list(to_plain(dataclasses.replace(s, partitions=())))
        plain[10] = rows  # SavedGroup.partitions
        with pytest.raises(StateError) as e:
            codec.decode(codec.GROUP, s.group, _doc(plain), CID, 1000.0, 60.0)
        assert e.value.reason == DropReason.MALFORMED, (i, bad)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_refused_as_a_state_error(raw: bytes) -> None:
    with pytest.raises(StateError):
        codec.decode(codec.GROUP, "g", raw, CID, 1000.0, 60.0)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | st.text(max_size=5), lambda c: st.lists(c, max_size=6), max_leaves=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json)
def test_arbitrary_json_is_refused_as_malformed(state: object) -> None:
    with pytest.raises(StateError) as e:
        codec.decode(codec.GROUP, "g", _doc(state), CID, 1000.0, 60.0)
    # Infinity is no JSON number: the document itself is corrupt
    assert e.value.reason in (DropReason.MALFORMED, DropReason.CORRUPT)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_real_record_with_a_byte_changed_or_cut_is_refused_or_a_valid_state(data: st.DataObject) -> None:
    """Flipped or cut bytes of a real record: refused with a reason, or (a flip inside a
    number that zlib's checksum lets through cannot happen: adler32 covers the JSON) never
    an exception of another kind."""
    s = _SAMPLE_STATE
    raw = bytearray(codec.encode(s, CID, 1000.0))
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    else:
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    try:
        d = codec.decode(codec.GROUP, s.group, bytes(raw), CID, 1000.0, 60.0)
    except StateError:
        return
    assert d.state == s  # the change fell where it changes nothing (never the case with zlib)


_SAMPLE_STATE = _stalled_group_state()[1]


def test_the_keys_name_cluster_kind_and_group_whatever_the_group_id() -> None:
    for gid in ("a", "a/b/c", "ünï cödé", "/"):
        key = codec.key_of("prod", codec.GROUP, gid)
        assert codec.parse_key(key, "prod") == (codec.GROUP, gid)
        assert codec.parse_key(key, "staging") is None
    assert codec.parse_key(b"prod/x/y", "prod") is None
    assert codec.parse_key(b"\xff\xfe", "prod") is None
    assert codec.parse_key(None, "prod") is None


def test_the_coordination_heartbeat_falls_within_a_quarter_cycle() -> None:
    """A replica learns of a rebalance at its next heartbeat: within a quarter interval, so
    a dead replica's shards reach the others in the cycle its session expires in."""
    from exporter.config import ClusterConfig
    from exporter.state.coordination import heartbeat_ms

    def beat(session: float, interval: float) -> int:
        return heartbeat_ms(ClusterConfig("k:9092", "k", state_session_timeout=session, interval=interval))
    assert beat(30, 30) == 1000  # the defaults: a third of the session, at most 1 s
    assert beat(1.5, 30) == 500
    assert beat(6, 1) == 250  # tests/test_replicas.py
    assert beat(6, 0.05) == 100

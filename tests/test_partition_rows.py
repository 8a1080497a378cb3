"""A group's partitions in columns (exporter/contracts/view.py PartitionRows): read back
as the PartitionViews they were made from, None kept apart from every number, the
totals the lag alerts read, and the state topic's plain form unchanged; its partitions'
pace in columns (ProgressRows) read back as the mapping it stands for."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from exporter.contracts.snapshot import GroupType, KafkaGroupState
from exporter.contracts.status import Status
from exporter.contracts.view import (
    EMPTY_ROWS,
    Filled,
    GroupProgress,
    GroupReasons,
    GroupView,
    PartitionProgress,
    PartitionRows,
    PartitionView,
    ProgressRows,
    Repeated,
    explained,
    filled,
)
from exporter.state.plain import from_plain, to_plain

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

VIEWS = (
    # committed and HW known, lagging, an owner
    PartitionView("orders", 0, 1200, None, 40, 12.5, 0.0, Status.OK, "", "app@/10.0.0.5 (m-1)"),
    # stalled, with a position from the consumer's reports, a reason and its evidence
    PartitionView("orders", 1, 7, 9, 2_000_000_000_000, 301.25, 300.0, Status.STALLED,
                  "orders[1]: committed offset frozen for 300s", "app@/10.0.0.5 (m-1)",
                  evidence="broker-side evidence only"),
    # never committed: no offset, lag unknown
    PartitionView("orders", 2, None, 0, None, None, 0.0, Status.OK, "", "app@/10.0.0.5 (m-1)"),
    # a topic the group left: shown, not judged
    PartitionView("legacy", 0, 0, None, 5000, 90.0, 0.0, Status.OK, "legacy[0]: no member subscribes",
                  "", unsubscribed=True),
)


def test_rows_read_back_as_the_views_they_were_made_from() -> None:
    rows = PartitionRows.of(VIEWS)
    assert list(rows) == list(VIEWS) and len(rows) == 4
    assert rows[1] == VIEWS[1] and rows[-1] == VIEWS[-1] and rows[1:3] == list(VIEWS[1:3])
    assert rows == VIEWS and rows != VIEWS[:3]
    # None is no number: a committed offset of 0 and a lag of 0 s stay what they are
    assert (rows[2].committed, rows[2].lag_offsets, rows[2].lag_seconds) == (None, None, None)
    assert (rows[3].committed, rows[2].position) == (0, 0)
    # numbers read back as Python's, not numpy's (the JSON API encodes them)
    assert {type(rows[0].committed), type(rows[0].lag_seconds), type(rows[3].unsubscribed)} == {
        int, float, bool}
    assert type(next(iter(rows)).committed) is int
    with pytest.raises(IndexError):
        rows[4]  # noqa: B018 - the read is the test


def test_totals_leave_out_the_topics_left_and_the_unknown() -> None:
    rows = PartitionRows.of(VIEWS)
    assert rows.total_lag() == 40 + 2_000_000_000_000
    assert rows.max_lag_seconds() == 301.25
    assert rows.unsubscribed_topics() == ["legacy"]
    unknown = PartitionRows.of([VIEWS[2]])
    assert (unknown.total_lag(), unknown.max_lag_seconds(), unknown.unsubscribed_topics()) == (None, None, [])
    assert (EMPTY_ROWS.total_lag(), EMPTY_ROWS.max_lag_seconds(), len(EMPTY_ROWS)) == (None, None, 0)
    assert not np.isnan(rows.stalled_seconds).any()


def _view(partitions: object) -> GroupView:
    return GroupView(group="g", type=GroupType.CLASSIC, state=KafkaGroupState.STABLE, status=Status.STALLED,
                     reasons=(), members=(), partitions=partitions)  # type: ignore[arg-type]


def test_a_group_view_keeps_any_sequence_of_views_as_rows_and_its_plain_form_as_views() -> None:
    v = _view(VIEWS)
    assert isinstance(v.partitions, PartitionRows) and v.partitions == VIEWS
    assert v.total_lag == 40 + 2_000_000_000_000 and v.max_lag_seconds == 301.25
    # The state topic's form is the views' own, field by field, as before rows
    plain = to_plain(v)
    assert plain[6] == tuple(to_plain(p) for p in VIEWS)
    back = from_plain(GroupView, plain)
    assert isinstance(back.partitions, PartitionRows) and back == v
    assert dataclasses.replace(v, reasons=("x",)).partitions is v.partitions


def test_a_group_s_reasons_name_its_worst_partitions_first() -> None:
    """The most severe status first, then the largest lag (unknown counts as 0), then the
    rows' own order; five at most, then how many more."""
    import random

    from exporter.contracts.snapshot import GroupSample
    from exporter.contracts.view import SEVERITY
    from exporter.evaluate.evaluator import MAX_REASONS, _group_reasons
    from exporter.evaluate.memory import GroupMemory

    rnd = random.Random(7)
    g = GroupSample(group_id="g", type=GroupType.CLASSIC, state=KafkaGroupState.EMPTY, members=(),
                    coordinator=1, committed={})
    for _ in range(200):
        views = [PartitionView("t", i, 5, None, rnd.choice([None, 0, 3, 3, 70]), None, 0.0,
                               rnd.choice(list(Status)), f"r{i}", "") for i in range(rnd.randint(0, 12))]
        bad = sorted((p for p in views if p.status != Status.OK),
                     key=lambda p: (-SEVERITY[p.status], -(p.lag_offsets or 0)))
        want = [p.reason for p in bad[:MAX_REASONS]]
        if len(bad) > MAX_REASONS:
            want.append(f"... and {len(bad) - MAX_REASONS} more partition(s)")
        got = _group_reasons(g, GroupMemory(), PartitionRows.of(views), None, None, 0.0)  # type: ignore[arg-type]
        assert list(got) == want and len(got) == len(want)


def test_progress_rows_read_as_the_mapping_of_partition_progress() -> None:
    tps = [("orders", 0), ("orders", 1), ("legacy", 0)]
    rows = ProgressRows(tps, np.array([2.5, 0.0, np.nan]), np.array([1.0, 0.0, np.nan]),
                        np.array([120.0, np.nan, np.nan]), np.array([0, 0, 7]), np.array([0, 0, 30]))
    want = {
        ("orders", 0): PartitionProgress(consume_rate=2.5, produce_rate=1.0, catchup_seconds=120.0,
                                         lost_total=0, below_log_start=0),
        ("orders", 1): PartitionProgress(consume_rate=0.0, produce_rate=0.0, catchup_seconds=None,
                                         lost_total=0, below_log_start=0),
        # rates unknown yet (NaN): None, never 0
        ("legacy", 0): PartitionProgress(consume_rate=None, produce_rate=None, catchup_seconds=None,
                                         lost_total=7, below_log_start=30),
    }
    assert rows == want and want == rows and dict(rows) == want and list(rows) == tps
    assert rows.get(("orders", 9)) is None and ("legacy", 0) in rows
    assert rows != {**want, ("orders", 1): dataclasses.replace(want[("orders", 1)], lost_total=1)}
    # the state topic's plain form is the mapping's, read back as a dict
    progress = GroupProgress(window_seconds=600.0, consume_rate=2.5, produce_rate=1.0, catchup_seconds=120.0,
                             falling_behind=False, records_lost_total=7, below_log_start=30, notes=(),
                             partitions=rows)
    plain = to_plain(progress)
    assert plain == to_plain(dataclasses.replace(progress, partitions=want))
    assert from_plain(GroupProgress, plain) == progress


def test_a_group_s_reasons_of_its_rows_read_as_their_texts() -> None:
    rows = PartitionRows.of(VIEWS)
    reasons = GroupReasons(rows, [1, 3], ["... and 1 more partition(s)"])
    want = (explained(VIEWS[1].reason, VIEWS[1].evidence), VIEWS[3].reason, "... and 1 more partition(s)")
    assert len(reasons) == 3 and reasons == want and list(reasons) == list(want) and reasons[1] == want[1]
    assert reasons != want[:2] and GroupReasons(rows, [], []) == () and not GroupReasons(rows, [], [])
    view = GroupView(group="g", type=GroupType.CLASSIC, state=KafkaGroupState.STABLE, status=Status.STALLED,
                     reasons=reasons, members=(), partitions=rows)
    assert to_plain(view) == to_plain(dataclasses.replace(view, reasons=want))
    assert from_plain(GroupView, to_plain(view)) == view


def test_a_repeated_column_reads_as_the_list_it_stands_for() -> None:
    col = Repeated(Status.STOPPED, 3)
    assert len(col) == 3 and list(col) == [Status.STOPPED] * 3 and col[-1] is Status.STOPPED
    assert col[1:] == [Status.STOPPED] * 2 and col[5:] == []
    assert col == [Status.STOPPED] * 3 and col != [Status.STOPPED] * 2
    assert col != [Status.STOPPED, Status.OK, Status.STOPPED] and set(col) == {Status.STOPPED}
    for i in (3, -4):
        with pytest.raises(IndexError):
            col[i]  # noqa: B018 - the read is the test
    # rows whose texts repeat read as the rows of lists
    n = 2
    rows = PartitionRows([("t", 0), ("t", 1)], np.array([5, 6]), filled(Filled.NO_OFFSET, n),
                         np.array([1, 0]), np.array([3.0, 0.0]), np.zeros(n), Repeated(Status.OK, n),
                         Repeated("", n), Repeated("", n), filled(Filled.FALSE, n), Repeated("", n))
    assert rows == [PartitionView("t", 0, 5, None, 1, 3.0, 0.0, Status.OK, "", ""),
                    PartitionView("t", 1, 6, None, 0, 0.0, 0.0, Status.OK, "", "")]
    # the shared columns cannot be written
    with pytest.raises(ValueError):
        filled(Filled.NO_OFFSET, n)[0] = 1
    assert filled(Filled.NO_OFFSET, n) is filled(Filled.NO_OFFSET, n) and not filled(Filled.FALSE, n).any()

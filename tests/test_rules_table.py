"""The status rules as a table: one numbered row per rule and per edge case.

Rows drive :func:`exporter.evaluate.rules.classify` with the facts the evaluator builds
for one partition (real shapes: offsets, seconds, member labels as the broker
reports them). Edge rows that need several cycles (first cycle, coordinator
move) run through the evaluator itself. Run alone: ``pytest -m unit``.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from exporter.config import Thresholds
from exporter.contracts.snapshot import GroupSample, Member, PartitionOffsets, Snapshot
from exporter.contracts.status import Status
from exporter.contracts.view import SEVERITY, STATUSES, explained
from exporter.evaluate.evaluator import Evaluator
from exporter.evaluate.memory import extend_run, lag_trend
from exporter.evaluate.rules import (
    EVIDENCE,
    INSTRUMENTATION_DOCS,
    NEEDS,
    RULES,
    Evidence,
    LaterReason,
    PartitionFacts,
    classify,
    note,
    reason_parts,
)

pytestmark = pytest.mark.unit

TH = Thresholds(stall_after=30, livelock_after=20, lag_seconds=3600, window=300, report_stale_after=30)
OWNER = "billing-7@/10.0.0.5 (consumer-billing-7-3f2a)"
BASE = PartitionFacts(
    topic="orders", partition=3, committed=150, hw=200, lag_offsets=50, lag_seconds=40.0,
    stalled_seconds=0.0, frozen_seconds=0.0, lagging=False, rewinding=False, owned=True,
    unowned_confirmed=False, owner=OWNER, group_state="stable")
REPORT = {"has_report": True, "reporter": "billing-7@host-a (consumer-billing-7-3f2a)",
          "report_silent_seconds": 3.0}
OUTSIDE = {"owned": False, "owner": "", "unowned_confirmed": True, "group_state": "empty",
           "outside": True, "stall_allowance": 60.0}
NEVER = {"never_committed": True, "committed": None, "lag_offsets": None, "lag_seconds": None,
         "new_data_seconds": None}
SPARK = {"spark": True, "query_id": "5b0e", "spark_silent_seconds": 4.0, "owner": ""}
CONNECT = {**SPARK, "spark_reporter": "Connect client", "spark_connect_client": True}

# (row, what it checks, facts changed from BASE, expected status, fragment of the reason)
ROWS: list[tuple[int, str, dict, Status, str]] = [
    (1, "healthy: lag, committing, owned", {}, Status.OK, ""),
    (2, "lag 0 is ok whatever else holds",
     {"lag_offsets": 0, "stalled_seconds": 999.0, "unowned_confirmed": True, "owned": False},
     Status.OK, ""),
    (3, "unknown HW is ok (nothing to judge)",
     {"hw": None, "lag_offsets": None, "lag_seconds": None, "stalled_seconds": 999.0},
     Status.OK, ""),
    (4, "spark_terminated", {**SPARK, "spark_terminated": True, "owned": False},
     Status.STOPPED, "orders[3]: query terminated; committed 150, HW 200, lag 50 (40s)"),
    (5, "spark_driver_gone", {**SPARK, "owned": False, "spark_silent_seconds": 45.0},
     Status.STOPPED, "driver of query 5b0e sent nothing for 45s"),
    (6, "unowned: nobody owns it two cycles in a row",
     {"owned": False, "owner": "", "unowned_confirmed": True, "frozen_seconds": 61.0,
      "group_state": "empty"},
     Status.STOPPED, "no member owns the partition (group empty); committed unchanged for 61s"),
    (7, "unowned for one cycle only (coordinator move, rebalance) is not stopped",
     {"owned": False, "owner": "", "unowned_confirmed": False, "group_state": "empty"},
     Status.OK, ""),
    (8, "unowned yields to an offset reset (a reset needs an empty group)",
     {"owned": False, "owner": "", "unowned_confirmed": True, "rewinding": True},
     Status.REWIND, "committed offset moved backwards"),
    (9, "unowned yields to the rejoin loop",
     {"owned": False, "owner": "", "unowned_confirmed": True, "rejoins": 3,
      "stalled_seconds": 30.0, "new_data_seconds": 30.0},
     Status.LIVELOCKED, "members keep leaving and rejoining (3 joins since the committed offset"),
    (10, "batch_hung", {**SPARK, "batch_running": 25.0, "running_batch_id": 8},
     Status.LIVELOCKED, "batch 8 has been running for 25 seconds while 50 records wait"),
    (11, "batch running below livelock_after", {**SPARK, "batch_running": 19.0}, Status.OK, ""),
    (12, "not_polling: fresh reports say the last poll is old", {**REPORT, "poll_age": 21.0},
     Status.LIVELOCKED,
     "owner billing-7@host-a (consumer-billing-7-3f2a) is in the group but last polled 21s ago"),
    (13, "last poll below livelock_after", {**REPORT, "poll_age": 19.0}, Status.OK, ""),
    (14, "reports_stopped: an owner whose reports went silent, committed frozen",
     {**REPORT, "poll_age": 2.0, "report_stale": True, "report_silent_seconds": 95.0,
      "stalled_seconds": 20.0},
     Status.LIVELOCKED, f"owner {OWNER} is still a member but its reports stopped 95s ago"),
    (15, "silent reports while the committed offset still moves recently",
     {**REPORT, "report_stale": True, "stalled_seconds": 10.0}, Status.OK, ""),
    (16, "rejoin_loop", {"rejoins": 2, "stalled_seconds": 31.0, "new_data_seconds": 31.0},
     Status.LIVELOCKED, "(2 joins since the committed offset stopped moving 31s ago)"),
    (17, "rejoins but the committed offset moved within stall_after",
     {"rejoins": 5, "stalled_seconds": 29.0}, Status.OK, ""),
    (18, "stalled", {"stalled_seconds": 30.0, "new_data_seconds": 30.0}, Status.STALLED,
     f"orders[3]: committed offset frozen for 30s; owner {OWNER}; committed 150, HW 200"),
    (19, "stalled while the assignment is unknown (rebalancing)",
     {"stalled_seconds": 45.0, "new_data_seconds": 40.0, "owner": ""}, Status.STALLED,
     "owner unknown (rebalancing)"),
    (20, "stalled yields to a recent rewind",
     {"stalled_seconds": 45.0, "new_data_seconds": 45.0, "rewinding": True},
     Status.REWIND, "moved backwards"),
    (21, "rewind", {"rewinding": True}, Status.REWIND,
     "orders[3]: committed offset moved backwards; committed 150, HW 200, lag 50 (40s)"),
    (22, "lag_growing", {"lagging": True}, Status.LAGGING,
     f"lag growing while committing; owner {OWNER}"),
    (23, "lagging without a known owner", {"lagging": True, "owner": ""}, Status.LAGGING,
     "owner unknown;"),
    (24, "livelocked beats stalled", {**REPORT, "poll_age": 50.0, "stalled_seconds": 50.0},
     Status.LIVELOCKED, "last polled 50s ago"),
    (25, "quiet tail: committed and HW both frozen (a burst's uncommitted tail) is not stalled",
     {"stalled_seconds": 58.0, "frozen_seconds": 58.0, "new_data_seconds": None}, Status.OK, ""),
    (26, "records arrived after the freeze, but less than stall_after ago",
     {"stalled_seconds": 58.0, "frozen_seconds": 58.0, "new_data_seconds": 20.0}, Status.OK, ""),
    (27, "lag_above_threshold", {"lag_seconds": 4000.0, "frozen_seconds": 10.0,
                                 "new_data_seconds": 10.0},
     Status.LAGGING, "orders[3]: oldest unconsumed record is 4000s old; committed 150"),
    (28, "quiet tail older than lag_seconds: told what it may be",
     {"lag_seconds": 4000.0, "stalled_seconds": 3900.0, "frozen_seconds": 3900.0},
     Status.LAGGING, "committed unchanged for 3900s and no record arrived since: read but not "
                     "committed"),
    (29, "joins on a quiet tail (scaling out while a burst's tail waits) are no rejoin loop",
     {"rejoins": 3, "stalled_seconds": 95.0, "frozen_seconds": 95.0, "new_data_seconds": None},
     Status.OK, ""),
    (30, "unowned yields to a backward move awaiting confirmation (an offset reset's empty group)",
     {"owned": False, "owner": "", "unowned_confirmed": True, "rewind_pending": True}, Status.OK, ""),
    (31, "a backward move awaiting confirmation is not a rewind yet", {"rewind_pending": True},
     Status.OK, ""),
    (32, "a Spark batch running below livelock_after is work in progress, not a stall (offsets "
         "move only when it ends)",
     {**SPARK, "batch_running": 19.0, "stalled_seconds": 40.0, "frozen_seconds": 40.0,
      "new_data_seconds": 35.0}, Status.OK, ""),
    (33, "a Spark query between batches with data waiting is not stalled (it waits for its "
         "trigger, or its progress event is still on the listener bus)",
     {**SPARK, "stalled_seconds": 40.0, "frozen_seconds": 40.0, "new_data_seconds": 35.0},
     Status.OK, ""),
    (34, "a Spark query between batches whose oldest waiting record is too old is lagging",
     {**SPARK, "stalled_seconds": 4000.0, "frozen_seconds": 4000.0, "new_data_seconds": 3900.0,
      "lag_seconds": 4000.0}, Status.LAGGING, "oldest unconsumed record is 4000s old"),
    (35, "no members, a client outside group membership commits: records waiting within its "
         "learnt cadence are not stopped",
     {**OUTSIDE, "stalled_seconds": 55.0, "frozen_seconds": 55.0, "new_data_seconds": 55.0},
     Status.OK, ""),
    (36, "outside committer whose commits stopped past its allowance while records wait: stopped",
     {**OUTSIDE, "stalled_seconds": 61.0, "frozen_seconds": 61.0, "new_data_seconds": 61.0},
     Status.STOPPED, "no member owns the partition (group empty); committed unchanged for 61s"),
    (37, "outside committer falling behind: lagging, not stopped",
     {**OUTSIDE, "stalled_seconds": 3.0, "lagging": True}, Status.LAGGING, "lag growing while committing"),
    (38, "outside committer's allowance never below stall_after",
     {**OUTSIDE, "stall_allowance": 5.0, "stalled_seconds": 29.0, "new_data_seconds": 29.0},
     Status.OK, ""),
    (39, "a topic no member of a stable group subscribes to any more is not judged (its reason "
         "comes from rules.note)",
     {"owned": False, "owner": "", "unowned_confirmed": True, "stalled_seconds": 999.0,
      "frozen_seconds": 999.0, "new_data_seconds": 999.0, "lag_seconds": 5000.0, "unsubscribed": True},
     Status.OK, ""),
    (40, "owned, never committed, not instrumented: records arrived for stall_after since the "
         "assignment",
     {**NEVER, "stalled_seconds": 31.0, "new_data_seconds": 30.0}, Status.STALLED,
     f"orders[3]: no offset committed since the member was assigned this partition 31s ago, while "
     f"records arrived; owner {OWNER}; never committed, HW 200, lag unknown"),
    (41, "owned, never committed, records arriving for less than stall_after (a consumer that "
         "just started)",
     {**NEVER, "stalled_seconds": 60.0, "new_data_seconds": 29.0}, Status.OK, ""),
    (42, "owned, never committed, no record arrived since the assignment",
     {**NEVER, "stalled_seconds": 600.0}, Status.OK, ""),
    (43, "owned, never committed, instrumented: its last poll is old",
     {**NEVER, **REPORT, "lag_offsets": 50, "lag_seconds": 40.0, "poll_age": 21.0,
      "stalled_seconds": 25.0, "new_data_seconds": 20.0},
     Status.LIVELOCKED, "last polled 21s ago; never committed, HW 200, lag 50 (40s)"),
    (44, "owned, never committed, instrumented and caught up (position at the HW)",
     {**NEVER, **REPORT, "lag_offsets": 0, "lag_seconds": 0.0, "poll_age": 1.0,
      "stalled_seconds": 600.0, "new_data_seconds": 590.0}, Status.OK, ""),
    (45, "Spark Connect: the client reports, its server has not answered for report_stale_after",
     {**CONNECT, "batch_running": 152.0, "spark_server_silent": 31.0,
      "spark_server_unreachable": True, "spark_server_error": "SparkConnectGrpcException: UNAVAILABLE"},
     Status.ERROR,
     "orders[3]: the Spark Connect server of query 5b0e has not answered its client for 31s "
     "(SparkConnectGrpcException: UNAVAILABLE); the client is alive (heartbeat 4.0s ago); "
     "whether the query runs is unknown"),
    (46, "Spark Connect: the server answers, a batch hangs: livelocked, the server's answer named",
     {**CONNECT, "batch_running": 25.0, "running_batch_id": 2, "spark_server_silent": 0.5},
     Status.LIVELOCKED,
     "batch 2 has been running for 25 seconds while 50 records wait; Connect client alive "
     "(heartbeat 4.0s ago), its server answered 0.5s ago"),
    (47, "Spark Connect: the reporting client went silent; the query may still run on the server",
     {**CONNECT, "owned": False, "spark_silent_seconds": 62.0, "spark_last_report": 1795000000.0},
     Status.ERROR,
     "orders[3]: no reports since 2026-11-18 11:06:40 UTC (62s ago) from the Spark Connect client "
     "that reported query 5b0e; the query may still run on its Connect server"),
    (48, "Spark Connect: a silent client whose server said the query terminated is stopped",
     {**CONNECT, "owned": False, "spark_terminated": True, "spark_silent_seconds": 62.0},
     Status.STOPPED, "orders[3]: query terminated"),
    (49, "Spark Connect 3.5: the listener on the server went silent with the server: stopped",
     {**SPARK, "owned": False, "spark_reporter": "listener on the Connect server",
      "spark_silent_seconds": 45.0},
     Status.STOPPED, "listener on the Connect server of query 5b0e sent nothing for 45s"),
]


@pytest.mark.parametrize(("row", "what", "changes", "status", "fragment"), ROWS,
                         ids=[f"{r[0]:02d}-{r[1]}" for r in ROWS])
def test_rule_row(row: int, what: str, changes: dict, status: Status, fragment: str) -> None:
    facts = dataclasses.replace(BASE, **changes)
    got, rule = classify(facts, TH)
    assert got == status, f"row {row} ({what}): {got} by rule {rule}"
    text = explained(*reason_parts(rule, facts, TH))
    assert fragment in text, f"row {row}: {text!r}"
    assert (text == "") == (status == Status.OK)


def test_rows_are_numbered_and_every_rule_has_a_row() -> None:
    assert [r[0] for r in ROWS] == list(range(1, len(ROWS) + 1))
    decided = set()
    for _, _, changes, _, _ in ROWS:
        decided.add(classify(dataclasses.replace(BASE, **changes), TH)[1])
    assert {name for name, _, _ in RULES} <= decided


def test_a_rule_never_holds_without_the_evidence_it_needs() -> None:
    """classify skips a rule whose evidence (NEEDS) a partition lacks: sound only if the
    rule's predicate is false without it, whatever else the facts say."""
    predicate = {name: holds for name, _, holds in RULES}
    held = set()
    for _, what, changes, _, _ in ROWS:
        facts = dataclasses.replace(BASE, **changes)
        for name, need in NEEDS.items():
            held |= {name} if predicate[name](facts, TH) else set()
            without = dataclasses.replace(facts, **{need: False})
            assert not predicate[name](without, TH), f"{name} holds without {need} ({what})"
    assert held == set(NEEDS)  # each held in some row, with its evidence


def test_a_reason_reads_as_its_template_says() -> None:
    """The numbered templates the reasons are formatted from (rules._positional) give the
    text of the named template, for every row and every rule's template."""
    from exporter.evaluate.rules import _FIELD, _REASONS, _text

    for _, _, changes, _, _ in ROWS:
        facts = dataclasses.replace(BASE, **changes)
        for rule, template in _REASONS.items():
            named = template.format(**{name: get(facts, TH) for name, get in _FIELD.items()})
            assert _text(rule, facts, TH) == named


def test_note_of_a_topic_no_member_subscribes_to() -> None:
    facts = dataclasses.replace(BASE, topic="orders-v1", partition=0, committed=600, hw=1200,
                                lag_offsets=600, lag_seconds=60.0, unsubscribed=True)
    assert note(facts) == ("orders-v1[0]: no member subscribes to orders-v1 any more; "
                           "committed 600, HW 1200, lag 600 (60s)")
    assert note(BASE) == ""


def test_classifier_runs_rules_in_severity_order() -> None:
    severities = [status.severity for _, status, _ in RULES]
    assert severities == sorted(severities, reverse=True)
    assert STATUSES == ("ok", "lagging", "rewind", "stalled", "livelocked", "stopped", "error")
    assert all(SEVERITY[s] == Status(s).severity for s in STATUSES)


# lag_trend: (was lagging, commits seen (t, committed, lag s, HW), expected); interval 1 s
TREND_ROWS = [
    ("above lag_seconds", False, ((0, 1, 1.0, 5), (1, 1, 1.0, 5), (2, 1, 4000.0, 5)), True),
    ("growing at three commits in a row, beyond the noise", False,
     ((0, 10, 1.0, 20), (1, 20, 2.0, 40), (2, 30, 3.0, 60), (3, 40, 4.0, 80)), True),
    ("growing at two commits, within the noise", False,
     ((0, 10, 1.0, 20), (1, 20, 2.0, 40), (2, 30, 3.0, 60)), False),
    ("growing at two commits, well beyond the noise", False,
     ((0, 10, 1.0, 20), (1, 20, 3.0, 40), (2, 30, 5.0, 60)), True),
    ("growing at one commit only", False, ((0, 10, 1.0, 20), (1, 20, 9.0, 40)), False),
    ("lag grows but committed frozen", False,
     ((0, 10, 1.0, 20), (1, 10, 2.0, 40), (2, 10, 3.0, 60), (3, 10, 4.0, 80)), False),
    ("lag seconds grow but no record arrives: a tail committed in steps only ages", False,
     ((0, 10, 1.0, 50), (1, 20, 3.0, 50), (2, 30, 5.0, 50), (3, 40, 7.0, 50)), False),
    ("growth by less than a quarter of the time elapsed", False,
     ((0, 10, 1.0, 20), (4, 20, 1.9, 40), (8, 30, 2.8, 60), (12, 40, 3.7, 80)), False),
    ("growth within one commit gap plus one interval (batch committer's noise)", False,
     ((0, 10, 1.0, 20), (5, 60, 2.5, 120), (10, 110, 4.0, 220), (15, 160, 6.5, 320)), False),
    ("a batch committer falling behind by more than its noise", False,
     ((0, 10, 1.0, 20), (5, 60, 4.0, 120), (10, 110, 7.0, 220), (15, 160, 10.0, 320)), True),
    ("a dip restarts the run", False,
     ((0, 10, 1.0, 20), (1, 20, 2.0, 40), (2, 30, 1.5, 60), (3, 40, 2.5, 80), (4, 50, 3.5, 100)),
     False),
    ("sticky while the lag does not shrink", True,
     ((0, 10, 5.0, 20), (1, 11, 6.0, 30), (2, 12, 6.0, 40)), True),
    ("sticky ends when the lag shrinks in seconds and in offsets", True,
     ((0, 10, 5.0, 20), (1, 11, 6.0, 30), (2, 20, 2.0, 25)), False),
    ("sticky while only the offsets shrink (a producer's pause)", True,
     ((0, 10, 5.0, 20), (1, 11, 6.0, 30), (2, 12, 7.0, 30)), True),
    ("sticky while only the seconds shrink (reading past a producer's pause)", True,
     ((0, 10, 5.0, 20), (1, 11, 6.0, 30), (2, 12, 4.0, 40)), True),
    ("sticky ends within one interval (a transaction marker left behind)", True,
     ((0, 10, 5.0, 20), (1, 11, 6.0, 30), (2, 12, 0.0, 40)), False),
    ("first cycles: not enough commits", False, ((0, 10, 5.0, 20),), False),
]


@pytest.mark.parametrize(("what", "was", "commits", "expected"), TREND_ROWS,
                         ids=[r[0] for r in TREND_ROWS])
def test_lag_trend(what: str, was: bool, commits: tuple, expected: bool) -> None:
    run = prev = None
    for t, c, lag_s, hw in commits:
        prev = run
        run = extend_run(run, t, c, lag_s, hw)
    assert run is not None
    assert lag_trend(was, run, prev, commits[-1][2], 3600, 1.0) is expected


def test_lag_trend_ends_when_records_stopped_arriving_for_a_while() -> None:
    prev = extend_run(None, 0, 10, 5.0, 20)
    run = extend_run(prev, 1, 11, 6.0, 20)
    assert lag_trend(True, run, prev, 6.0, 3600, 1.0, quiet=False) is True
    assert lag_trend(True, run, prev, 6.0, 3600, 1.0, quiet=True) is False


# -- evidence: what each non-ok reason rests on (rules.EVIDENCE) ------------------------

STALL = {"stalled_seconds": 40.0, "frozen_seconds": 40.0, "new_data_seconds": 35.0}
UNOWNED = {"owned": False, "owner": "", "unowned_confirmed": True, "frozen_seconds": 61.0,
           "group_state": "empty"}

# (what, facts changed from BASE, expected status, what the evidence part says)
EVIDENCE_ROWS: list[tuple[str, dict, Status, str]] = [
    ("a hung handler in a client that heartbeats and a consumer polling without committing: "
     "both named, and what tells them apart",
     STALL, Status.STALLED,
     "evidence: broker-side evidence only (membership, commits, HW): a handler hung in a client "
     "that keeps heartbeating without a poll timeout (sarama, franz-go) and a consumer that "
     "polls without committing look the same; its own reports would tell them apart "
     f"({INSTRUMENTATION_DOCS})"),
    ("an instrumented consumer that polls and does not commit: its reports say which",
     {**STALL, **REPORT, "poll_age": 2.0}, Status.STALLED,
     "evidence: the consumer's own reports show it polling (last poll 2s ago): it reads but "
     "does not commit"),
    ("nobody owns it: a crash and a poll-timeout leave with a live process look the same",
     UNOWNED, Status.STOPPED,
     "evidence: broker-side evidence only: a consumer that crashed or closed and one that left "
     "the group on its poll timeout (max.poll.interval.ms) while its process lives look the same"),
    ("nobody owns it, and its consumer still reports: alive, out of the group",
     {**UNOWNED, **REPORT, "report_silent_seconds": 1.5}, Status.STOPPED,
     "evidence: broker-side membership and the consumer's own reports, the last 1.5s ago"),
    ("the last owner and how long ago it left are named",
     {**UNOWNED, "departure": f"last owner {OWNER} left 18s ago"}, Status.STOPPED,
     f"no member owns the partition (group empty; last owner {OWNER} left 18s ago); committed "
     "unchanged for 61s"),
    ("not polling: the consumer's own reports",
     {**STALL, **REPORT, "poll_age": 25.0}, Status.LIVELOCKED,
     "evidence: the consumer's own reports (its last poll) and its membership from the broker"),
    ("a rejoin loop: joins seen from the broker, a crash loop looks the same",
     {**STALL, "rejoins": 3}, Status.LIVELOCKED,
     "evidence: broker-side evidence only (joins and commits): a consumer kicked out on its poll "
     "timeout and rejoining, and members restarting in a crash loop, look the same"),
    ("a hung Spark batch: heartbeats prove the reporting process, not the batch",
     {**SPARK, "batch_running": 25.0}, Status.LIVELOCKED,
     "evidence: the Spark listener's heartbeats: they show the process that reports alive (the "
     "driver, or under Spark Connect the client, which also reports the server's answers), not "
     "the batch"),
    ("a silent Spark Connect client: the query's state is unknown, and what tells",
     {**CONNECT, "owned": False, "spark_silent_seconds": 62.0}, Status.ERROR,
     "evidence: a Spark Connect client's reports: the server runs the query apart from the "
     "client that reports it, so without the client's reports, or the server's answers to it, "
     "the query's state is unknown; the server tells (spark.streams.get on the query's session)"),
    ("lagging rests on commits and high watermarks",
     {"lag_seconds": 4000.0}, Status.LAGGING,
     "evidence: committed offsets and high watermarks read from the broker"),
    ("a rewind rests on the committed offsets", {"rewinding": True}, Status.REWIND,
     "evidence: the committed offsets read from the broker"),
]


@pytest.mark.parametrize(("what", "changes", "status", "fragment"), EVIDENCE_ROWS,
                         ids=[r[0][:40] for r in EVIDENCE_ROWS])
def test_reason_names_its_evidence(what: str, changes: dict, status: Status, fragment: str) -> None:
    facts = dataclasses.replace(BASE, **changes)
    got, rule = classify(facts, TH)
    assert got == status, what
    text = explained(*reason_parts(rule, facts, TH))
    assert fragment in text, (what, text)
    assert text.count("; evidence: ") == 1, text


def test_every_rule_has_evidence_worded_for_its_status() -> None:
    """A reason can be built for every rule with every kind of evidence: the table is worded
    once per status, and no status lacks a wording."""
    for _name, status, _ in RULES:
        for kind in Evidence:
            assert (status, kind) in EVIDENCE, (status, kind)


# -- edge rows over several cycles, through the evaluator -----------------------------

T0 = 1_800_000_000.0
TP = ("orders", 3)


def _offsets(hw: int) -> PartitionOffsets:
    return PartitionOffsets(leader=1, replicas=3, isr=3, log_start=0, hw=hw, lso=hw, leo=hw)


MEMBER = Member(member_id="consumer-billing-7-3f2a", client_id="billing-7", host="/10.0.0.5",
                assignment=(TP,))


def _cycle(ev: Evaluator, i: int, committed: int, hw: int, members: tuple[Member, ...]) -> str:
    snap = Snapshot(cluster="c", taken_at=T0 + 10 * i, duration=0.01, partitions={TP: _offsets(hw)},
                    groups={"g": GroupSample(group_id="g", type="classic",
                                             state="stable" if members else "empty", members=members,
                                             coordinator=1, committed={TP: committed})})
    return ev.evaluate(snap).groups["g"].status


def test_edge_first_cycle_of_an_old_frozen_group_is_ok() -> None:
    """The exporter cannot know how long an offset was frozen before it started."""
    ev = Evaluator("c", TH, interval=10)
    assert _cycle(ev, 0, 150, 10_000, (MEMBER,)) == Status.OK


def test_edge_coordinator_move_shows_the_group_empty_for_one_cycle() -> None:
    ev = Evaluator("c", TH, interval=10)
    # a consumer keeping 5 records (about 5 s) behind; the group looks empty at cycle 2
    got = [_cycle(ev, i, 195 + 10 * i, 200 + 10 * i, () if i == 2 else (MEMBER,))
           for i in range(5)]
    assert got == ["ok"] * 5
    # while two empty cycles in a row are stopped
    got = [_cycle(ev, i, 235, 300, ()) for i in range(5, 7)]
    assert got == ["ok", "stopped"]


def test_edge_joins_before_the_freeze_are_no_rejoin_loop() -> None:
    """A group that rebalanced twice (two new members) while committing, then whose consumer
    was killed: stopped, not livelocked; the same joins after the freeze are a loop."""
    ev = Evaluator("c", TH, interval=10)
    gen = [dataclasses.replace(MEMBER, member_id=f"consumer-billing-7-{k}") for k in range(4)]
    got = [_cycle(ev, i, 100 + 10 * i, 105 + 10 * i, (gen[min(i, 2)],)) for i in range(4)]
    # killed at 40 s: the offset freezes at 130 while records keep arriving
    got += [_cycle(ev, i, 130, 105 + 10 * i, ()) for i in range(4, 10)]
    assert got[:4] == ["ok"] * 4 and got[-1] == "stopped", got
    assert "livelocked" not in got, got

    ev = Evaluator("c", TH, interval=10)
    got = [_cycle(ev, i, 100 + 10 * i, 105 + 10 * i, (gen[0],)) for i in range(4)]
    # frozen at 130 from 30 s on; a member comes back under a new id every other cycle
    got += [_cycle(ev, i, 130, 105 + 10 * i, (gen[1 + (i // 2) % 3],) if i % 2 else ())
            for i in range(4, 10)]
    assert got[-1] == "livelocked", got


def test_edge_kip848_partition_in_flight_while_reconciling_is_not_stopped() -> None:
    """KIP-848 scale-in: the partition's old owner has left and the remaining member has not
    taken it over yet, while the coordinator reconciles; once the group says stable and
    still nobody owns it, it is stopped (two cycles)."""
    other = dataclasses.replace(MEMBER, assignment=(("orders", 0),))

    def cycle(ev: Evaluator, i: int, state: str) -> str:
        snap = Snapshot(cluster="c", taken_at=T0 + 10 * i, duration=0.01,
                        partitions={TP: _offsets(300 + 10 * i)},
                        groups={"g": GroupSample(group_id="g", type="consumer", state=state,
                                                 members=(other,), coordinator=1, epoch=7,
                                                 committed={TP: 288})})
        return ev.evaluate(snap).groups["g"].status

    ev = Evaluator("c", TH, interval=10)
    assert [cycle(ev, i, s) for i, s in enumerate(("reconciling", "unknown", "assigning"))] == ["ok"] * 3
    ev = Evaluator("c", TH, interval=10)
    assert [cycle(ev, i, "stable") for i in range(2)] == ["ok", "stopped"]


def test_edge_burst_tail_is_not_stalled_but_a_consumer_stuck_in_it_is() -> None:
    """A burst of 3,000 records every 60 s (3 s cycles). The healthy consumer reads each
    burst at once but commits only while records arrive, so the burst's last 40 records
    stay uncommitted until the next burst. The stuck one stops in the middle of a burst."""
    th = dataclasses.replace(TH, stall_after=30)
    healthy, stuck = Evaluator("c", th, interval=3), Evaluator("c", th, interval=3)
    got_healthy, got_stuck = [], []
    for i in range(80):  # 240 s, bursts at 0, 60, 120, 180 s
        t, burst = 3 * i, (3 * i) // 60
        hw = 3000 * (burst + 1)
        committed = hw - 40 if t % 60 >= 3 else hw - 3000 - 40 if burst else 0
        got_healthy.append(_cycle_at(healthy, t, committed, hw))
        got_stuck.append(_cycle_at(stuck, t, min(committed, 4500), hw))
    assert set(got_healthy) == {"ok"}, got_healthy
    first = got_stuck.index("stalled")
    # stuck at 4500 since t=63; records arrived after it froze at t=120 (last quiet sample
    # 117); stalled once they waited stall_after
    assert 3 * first == 147, (first, got_stuck)


def test_edge_tail_arriving_after_the_last_commit_is_not_evidence() -> None:
    """Bursts of 1,000 records every 60 s (3 s cycles) that take 9 s to arrive; the consumer
    commits what it read while records arrive, so its last commit (at 6 s) leaves 200 records,
    100 of which arrive after that commit. Records that stop arriving within two cycles of
    the freeze are a tail, not evidence of a stuck consumer; a consumer stuck in the same
    place while records keep arriving for stall_after is stalled, as early as if there were
    no tail allowance."""
    th = dataclasses.replace(TH, stall_after=30)
    healthy, stuck = Evaluator("c", th, interval=3), Evaluator("c", th, interval=3)

    def hw_at(t: int) -> int:
        return 1000 * (t // 60) + {0: 400, 3: 800, 6: 900}.get(t % 60, 1000)

    got_healthy, got_stuck = [], []
    for i in range(60):  # 180 s
        t = 3 * i
        committed = 1000 * (t // 60) + {0: 0, 3: 400}.get(t % 60, 800)
        got_healthy.append(_cycle_at(healthy, t, committed, hw_at(t)))
        # stuck at 1800 from 66 s on while a steady stream arrives (20 records a second)
        got_stuck.append(_cycle_at(stuck, t, min(committed, 1800), hw_at(t) + max(0, t - 66) * 20))
    assert set(got_healthy) == {"ok"}, got_healthy
    # froze at 66 s and records kept arriving for stall_after: they count from the last sample
    # without them (66 s), as if there had been no tail allowance; stalled 30 s later
    assert 3 * got_stuck.index("stalled") == 96, got_stuck


def test_edge_producer_hiccup_does_not_restart_the_evidence_clock() -> None:
    """A steady producer (20 records a second, 3 s cycles) that pauses once for a cycle while
    the consumer is stuck: the records before and after the pause are one flow, so the stall
    dates from the freeze, not from the pause (which made it one pause late in loaded runs)."""
    th = dataclasses.replace(TH, stall_after=30)
    ev, got = Evaluator("c", th, interval=3), []
    for i in range(30):  # 90 s; the consumer commits at HW until 30 s, then never again
        hw = 60 * i - (60 if i >= 13 else 0)  # nothing arrived between 36 and 39 s
        got.append(_cycle_at(ev, 3 * i, min(hw, 600), hw))
    assert got[:21] == ["ok"] * 21 and got[21] == "stalled", got  # 63 s: 30 s after the first lag at 33 s

    # the same pause but long (half of stall_after or more) ends a burst: the evidence restarts
    ev, got = Evaluator("c", th, interval=3), []
    for i in range(40):  # nothing arrived between 36 and 54 s
        hw = 60 * i - (360 if i >= 18 else 60 * (i - 12) if i > 12 else 0)
        got.append(_cycle_at(ev, 3 * i, min(hw, 600), hw))
    assert got.index("stalled") == 28, got  # records after the last quiet sample (51 s): 51 + 30 = 81 s


def _cycle_at(ev: Evaluator, t: float, committed: int, hw: int) -> str:
    snap = Snapshot(cluster="c", taken_at=T0 + t, duration=0.01, partitions={TP: _offsets(hw)},
                    groups={"g": GroupSample(group_id="g", type="classic", state="stable", members=(MEMBER,),
                                             coordinator=1, committed={TP: committed})})
    return ev.evaluate(snap).groups["g"].status


# -- who left, and when (exporter/evaluate/departures.py), through the evaluator ---------

def _view(ev: Evaluator, i: int, committed: int, hw: int, members: tuple[Member, ...],
          state: str | None = None):
    snap = Snapshot(cluster="c", taken_at=T0 + 10 * i, duration=0.01, partitions={TP: _offsets(hw)},
                    groups={"g": GroupSample(group_id="g", type="classic",
                                             state=state or ("stable" if members else "empty"),
                                             members=members, coordinator=1,
                                             committed={TP: committed})})
    return ev.evaluate(snap).groups["g"]


def test_departure_the_last_owner_and_how_long_ago_it_left() -> None:
    """The owner leaves (a poll timeout, a crash: the broker shows the same): the partition's
    reason names it and the time since the first sample without it, which grows."""
    ev = Evaluator("c", TH, interval=10.0)
    for i in range(3):
        assert _view(ev, i, 100, 150 + i, (MEMBER,)).status == Status.OK
    # a classic group rebalancing publishes no assignment: the member's last one is kept
    rebalancing = dataclasses.replace(MEMBER, assignment=())
    _view(ev, 3, 100, 153, (rebalancing,), state="preparingrebalance")
    reasons = [_view(ev, i, 100, 150 + i, ()).reasons[0] for i in range(4, 8)]
    assert "stopped" not in reasons[0]  # one empty cycle is not yet stopped
    assert f"(group empty; last owner {OWNER} left 20s ago); committed unchanged" in reasons[2]
    assert f"last owner {OWNER} left 30s ago" in reasons[3]
    assert "left the group on its poll timeout (max.poll.interval.ms) while its process lives" \
        in reasons[3]


def test_departure_a_group_empty_since_before_lagwatch_names_nobody() -> None:
    ev = Evaluator("c", TH, interval=10.0)
    v = [_view(ev, i, 100, 150 + i, ()) for i in range(3)][-1]
    assert v.status == Status.STOPPED
    assert "(group empty; no member seen leaving since lagwatch watched the group)" in v.reasons[0]


def test_departure_the_owner_left_while_others_stay() -> None:
    """A partition that lost its owner while another member stays: the one seen owning it."""
    other = Member(member_id="consumer-billing-9-77aa", client_id="billing-9", host="/10.0.0.9",
                   assignment=(("orders", 4),))
    ev = Evaluator("c", TH, interval=10.0)
    for i in range(3):
        _view(ev, i, 100, 150 + i, (MEMBER, other))
    v = [_view(ev, i, 100, 150 + i, (other,)) for i in range(3, 6)][-1]
    assert v.status == Status.STOPPED
    assert f"(group stable; last owner {OWNER} left 20s ago)" in v.reasons[0]


@pytest.mark.parametrize("rule", [name for name, _, _ in RULES])
def test_a_reason_written_for_many_rows_is_each_row_s_own(rule: str) -> None:
    """LaterReason.texts (a saved view writes every row's reason at once) equals
    LaterReason.text row by row, on rows with and without offsets, lags and owners."""
    rnd = random.Random(rule)
    for departure, new_data in (("", None), ("last owner billing-7 left 40s ago", 12.5)):
        reason = LaterReason(rule, TH, 400.0, new_data, departure, "empty", 2)
        rows = [(("orders", i), rnd.choice([None, 5, 150]), rnd.choice([None, 0, 50]),
                 rnd.choice([None, 0.5, 40.0]), rnd.choice([0.0, 9.99, 1234.5]), rnd.choice(["", OWNER]))
                for i in range(40)]
        assert reason.texts(*map(list, zip(*rows, strict=True))) == [reason.text(*row) for row in rows]

"""Status rules: one pure predicate per rule, run in severity order by :func:`classify`.

Each rule answers one question about one partition with lag > 0 (lag 0, or an
unknown high watermark, is always ``ok``), from the :class:`PartitionFacts` of
this cycle. Rules are in the style of Burrow's evaluator (small named checks,
https://github.com/linkedin/Burrow/wiki/Consumer-Lag-Evaluation-Rules) but are
run every cycle against the current high watermark, not only when a commit
arrives, so a group that stops committing is noticed while its lag grows.

The classifier walks :data:`RULES` from the most to the least severe status and
takes the first rule that holds. Where a less severe status must win over a
more severe one, the more severe rule says so itself (``unowned`` yields to an
offset reset and to a rejoin loop), so each rule can be read on its own.
Reason texts are built in one place, :func:`reason_parts`.
"""

from __future__ import annotations

import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from exporter.config import Thresholds
from exporter.contracts.status import Status


@dataclass(slots=True, kw_only=True)
class PartitionFacts:
    """Everything the rules may look at for one partition in one cycle. Read-only by
    contract, not frozen: one is built for every partition a rule may hold for, every
    cycle, and a frozen dataclass's ``__init__`` costs three times as much."""

    topic: str
    partition: int
    committed: int | None  # None: owned by a member that never committed an offset for it
    hw: int | None
    lag_offsets: int | None
    lag_seconds: float | None
    # Evidence the memory step keeps (exporter/evaluate/memory.py, one function each):
    stalled_seconds: float  # committed frozen while lag > 0, from the later of the two: stall_clock
    frozen_seconds: float  # committed unchanged (whether or not there was lag)
    new_data_seconds: float | None = None  # since records first arrived after the freeze: new_data
    lagging: bool  # the lag trend at commits: commit_trend, lag_trend
    rewinding: bool  # the committed offset moved backwards recently (confirmed): rewind_evidence
    rewind_pending: bool = False  # it moved backwards this cycle; confirmed or not at the next
    owned: bool  # a member (or a live Spark driver) owns the partition
    unowned_confirmed: bool  # nobody owned it for enough cycles in a row: ownership
    owner: str = ""  # "client@host (member)" of the owning member, "" when unknown
    # Nobody owns it: who left, and when (exporter/evaluate/departures.py), "" when unknown
    departure: str = ""
    # An empty group whose committed offsets move: a client outside group membership
    # (assign()) consumes it, and may wait ``stall_allowance`` (its learnt commit cadence,
    # bounded: :func:`exporter.evaluate.memory.outside_allowance`) between commits.
    outside: bool = False
    stall_allowance: float = 0.0
    # The group's members are stable and none subscribes to this topic any more: its
    # committed offset is history, shown but not judged.
    unsubscribed: bool = False
    # A member owns the partition and no offset was ever committed for it: the lag is the
    # member's reported position's (instrumented) or unknown, ``stalled_seconds`` counts
    # from the assignment and ``new_data_seconds`` from the first records after it.
    never_committed: bool = False
    group_state: str = ""
    rejoins: int = 0  # joins into the group since the committed offset froze (within the window)
    # from the owner's own reports (instrumented consumers)
    has_report: bool = False
    report_stale: bool = False
    report_silent_seconds: float = 0.0
    poll_age: float | None = None
    reporter: str = ""  # "client@host (member)" as the report names it
    # Spark queries
    spark: bool = False
    spark_terminated: bool = False
    spark_silent_seconds: float = 0.0
    query_id: str = ""
    batch_running: float | None = None
    running_batch_id: int = 0
    # Spark Connect: who reports (the "driver", a "Connect client", or the "listener on the
    # Connect server"), and, from a client's reports, how long the server has not answered it
    spark_reporter: str = "driver"
    spark_connect_client: bool = False
    spark_server_silent: float | None = None
    spark_server_unreachable: bool = False  # silent past report_stale_after (the evaluator's)
    spark_server_error: str = ""
    spark_last_report: float = 0.0  # epoch s of the reporter's last report


Predicate = Callable[[PartitionFacts, Thresholds], bool]


# -- error ----------------------------------------------------------------------------

def spark_server_unreachable(f: PartitionFacts, th: Thresholds) -> bool:
    """Spark Connect: the client that reports the query is alive, but the server that runs
    it has not answered the client about it for ``report_stale_after``. The server is down
    or out of the client's reach: whether the query runs is unknown, and a heartbeat of the
    client says nothing about a batch on the server (no ``batch_hung``)."""
    return f.spark and f.owned and f.spark_server_unreachable and not f.spark_terminated


def spark_client_gone(f: PartitionFacts, th: Thresholds) -> bool:
    """Spark Connect: the client whose listener reported the query has been silent for
    ``report_stale_after``. The query runs on the server, not in that client, and may still
    run there: unknown, not ``stopped`` (unless the server said it terminated)."""
    return f.spark and not f.owned and f.spark_connect_client and not f.spark_terminated


# -- stopped ------------------------------------------------------------------------

def spark_terminated(f: PartitionFacts, th: Thresholds) -> bool:
    """The Spark query terminated (its listener said so) and left records unread."""
    return f.spark and f.spark_terminated


def spark_driver_gone(f: PartitionFacts, th: Thresholds) -> bool:
    """The Spark driver stopped sending heartbeats for ``report_stale_after``."""
    return f.spark and not f.owned


def stall_limit(f: PartitionFacts, th: Thresholds) -> float:
    """How long records may wait for a commit: ``stall_after``, or longer for a client
    outside group membership that commits at a slower learnt cadence."""
    return max(th.stall_after, f.stall_allowance)


def unowned(f: PartitionFacts, th: Thresholds) -> bool:
    """Nobody has owned the partition for two cycles in a row (one empty cycle may be a
    rebalance or a coordinator failover). It yields to an offset reset, which needs an
    empty group, to a rejoin loop, which empties the group between rejoins, and to a
    client outside group membership whose commits still move (records waited for less
    than its allowance): nobody consuming is what ``stopped`` means, not no members.
    The count of cycles: :func:`exporter.evaluate.memory.ownership`."""
    return (f.unowned_confirmed and not f.rewinding and not f.rewind_pending
            and not (f.outside and f.stalled_seconds < stall_limit(f, th))
            and not _any_livelock(f, th))


# -- livelocked ---------------------------------------------------------------------

def batch_hung(f: PartitionFacts, th: Thresholds) -> bool:
    """A Spark micro-batch has run longer than ``livelock_after`` while the driver still
    sends heartbeats (a hung batch emits no progress events at all)."""
    return f.spark and f.batch_running is not None and f.batch_running >= th.livelock_after


def not_polling(f: PartitionFacts, th: Thresholds) -> bool:
    """The owner is still a member, its reports are fresh, and they say it last polled
    more than ``livelock_after`` ago: it heartbeats but does not poll (precise)."""
    return (f.owned and f.has_report and not f.report_stale and f.poll_age is not None
            and f.poll_age >= th.livelock_after)


def reports_stopped(f: PartitionFacts, th: Thresholds) -> bool:
    """The owner is still a member but its reports went silent while the committed offset
    stayed frozen for ``livelock_after``: its process is wedged, reporter thread included.
    The frozen time: :func:`exporter.evaluate.memory.stall_clock`."""
    return (bool(f.owner) and f.has_report and f.report_stale
            and f.stalled_seconds >= th.livelock_after)


def rejoin_loop(f: PartitionFacts, th: Thresholds) -> bool:
    """Members keep leaving and rejoining (two joins or more since the committed offset
    froze, within ``window``) while it stays frozen for ``stall_after``: the ``max.poll.interval.ms`` kick-out
    loop, seen from the broker without instrumentation. Classic groups show it as new
    member ids; KIP-848 groups, whose members rejoin with the same id, as group epoch
    bumps with the same members (:func:`exporter.evaluate.memory.remember_members`). Like ``stalled``
    it needs records that arrived after the offset froze and waited ``stall_after``: a
    group scaling out while a quiet partition holds a burst's uncommitted tail shows the
    same joins and the same frozen offset, and is healthy. Joins before the freeze (a
    group's start, an earlier scale-out) say nothing about why it froze: a consumer
    killed minutes after a rebalance is stopped, not looping."""
    return (f.rejoins >= 2 and f.stalled_seconds >= th.stall_after and f.new_data_seconds is not None
            and f.new_data_seconds >= th.stall_after)


_LIVELOCK_RULES: tuple[Predicate, ...] = (batch_hung, not_polling, reports_stopped, rejoin_loop)


def _any_livelock(f: PartitionFacts, th: Thresholds) -> bool:
    return any(rule(f, th) for rule in _APPLICABLE_LIVELOCK[f.spark, f.has_report])


# -- stalled, rewind, lagging ----------------------------------------------------------

def stalled(f: PartitionFacts, th: Thresholds) -> bool:
    """The committed offset has been frozen for ``stall_after`` with lag > 0 while a member
    owns the partition and new records kept arriving (it polls but does not commit, or
    processes very slowly). Records must have arrived after the offset froze, and
    ``stall_after`` ago at least: with no new data, the same picture is also what a healthy
    consumer leaves when it commits only when records arrive (the tail of a burst), so a
    quiet partition is judged by the age of its lag instead (``lag_above_threshold``).
    An offset reset restarts the clock and is reported as ``rewind`` first.

    Never a Spark query: its offsets move only when a micro-batch ends. While a batch
    runs the query works on the waiting records (past ``livelock_after``: ``batch_hung``);
    between batches it waits for its trigger by design (a 60 s trigger leaves records
    waiting for up to a minute), or its last batch's progress event is still on Spark's
    asynchronous listener bus. A query falling behind is ``lagging`` by its lag.

    The two clocks are kept in memory: :func:`exporter.evaluate.memory.stall_clock` and
    :func:`exporter.evaluate.memory.new_data`."""
    limit = stall_limit(f, th)
    return (f.stalled_seconds >= limit and f.new_data_seconds is not None
            and f.new_data_seconds >= limit and not f.rewinding and not f.spark)


def never_committed(f: PartitionFacts, th: Thresholds) -> bool:
    """A member has owned the partition for ``stall_after`` without committing any offset
    for it while records arrived for ``stall_after``: a consumer wedged on its first batch
    (poison pill at start), or one that never commits. Its lag may be unknown (no committed
    offset, no reported position): the evidence is the assignment's age and the records,
    kept in memory by :func:`exporter.evaluate.memory.remember_uncommitted`."""
    return (f.never_committed and f.stalled_seconds >= th.stall_after and f.new_data_seconds is not None
            and f.new_data_seconds >= th.stall_after)


def rewind(f: PartitionFacts, th: Thresholds) -> bool:
    """The committed offset moved backwards (an offset reset); held for a few cycles so
    that scrapes see it. Decided in memory: :func:`exporter.evaluate.memory.rewind_evidence`
    (confirmed at the next sample, a member's late commit excepted:
    :func:`exporter.evaluate.memory.late_commit`)."""
    return f.rewinding


def lag_above_threshold(f: PartitionFacts, th: Thresholds) -> bool:
    """The oldest unconsumed record is older than ``lag_seconds``."""
    return f.lag_seconds is not None and f.lag_seconds > th.lag_seconds


def lag_growing(f: PartitionFacts, th: Thresholds) -> bool:
    """Lag seconds grew at each of the last two commits or more, by a quarter of the time
    elapsed and by more than a consumer keeping up wanders (one commit gap plus one
    interval); sticky until the lag shrinks. Decided in memory, at commits:
    :func:`exporter.evaluate.memory.commit_trend` and :func:`exporter.evaluate.memory.lag_trend`."""
    return f.lagging


# The classifier's table, most severe status first; within a status, the first rule
# that holds names the reason.
RULES: tuple[tuple[str, Status, Predicate], ...] = (
    ("spark_server_unreachable", Status.ERROR, spark_server_unreachable),
    ("spark_client_gone", Status.ERROR, spark_client_gone),
    ("spark_terminated", Status.STOPPED, spark_terminated),
    ("spark_driver_gone", Status.STOPPED, spark_driver_gone),
    ("unowned", Status.STOPPED, unowned),
    ("batch_hung", Status.LIVELOCKED, batch_hung),
    ("not_polling", Status.LIVELOCKED, not_polling),
    ("reports_stopped", Status.LIVELOCKED, reports_stopped),
    ("rejoin_loop", Status.LIVELOCKED, rejoin_loop),
    ("never_committed", Status.STALLED, never_committed),
    ("stalled", Status.STALLED, stalled),
    ("rewind", Status.REWIND, rewind),
    ("lag_above_threshold", Status.LAGGING, lag_above_threshold),
    ("lag_growing", Status.LAGGING, lag_growing),
)


# The evidence a rule cannot hold without: a Spark query's (``f.spark``) or the owner's
# own reports (``f.has_report``). Each such rule's predicate checks it first; classify
# skips the rules whose evidence a partition lacks (most partitions have neither), and
# tests/test_rules_table.py holds each of them false without it.
NEEDS: dict[str, str] = {
    "spark_server_unreachable": "spark", "spark_client_gone": "spark", "spark_terminated": "spark",
    "spark_driver_gone": "spark", "batch_hung": "spark", "not_polling": "has_report",
    "reports_stopped": "has_report",
}


def _applicable(spark: bool, has_report: bool) -> tuple[tuple[str, Status, Predicate], ...]:
    have = {"spark": spark, "has_report": has_report}
    return tuple(r for r in RULES if r[0] not in NEEDS or have[NEEDS[r[0]]])


_APPLICABLE = {(s, r): _applicable(s, r) for s in (False, True) for r in (False, True)}
_APPLICABLE_LIVELOCK = {key: tuple(p for _name, _status, p in rules if p in _LIVELOCK_RULES)
                        for key, rules in _APPLICABLE.items()}


def classify(f: PartitionFacts, th: Thresholds) -> tuple[Status, str | None]:
    """(status, name of the rule that decided it); ``(OK, None)`` when no rule holds or the
    topic is one no member subscribes to any more (:func:`note` says so). An unknown lag is
    judged only for a partition owned and never committed (:func:`never_committed`)."""
    # lag 0, or unknown (unknown high watermark; never committed and not instrumented)
    if f.unsubscribed or (not f.lag_offsets and not (f.never_committed and f.lag_offsets is None)):
        return Status.OK, None
    for name, status, holds in _APPLICABLE[f.spark, f.has_report]:
        if holds(f, th):
            return status, name
    return Status.OK, None


# -- evidence --------------------------------------------------------------------------

class Evidence(StrEnum):
    """What a status rests on: what lagwatch saw, not what it infers."""

    BROKER = "broker"  # membership, committed offsets and high watermarks, read from the brokers
    REPORTS = "reports"  # the consumer's own reports (instrumented consumers), beside the broker's
    SPARK = "spark"  # the Spark listener's events and heartbeats


# Where a reader learns what instrumentation adds (the reasons name it where it would help).
INSTRUMENTATION_DOCS = "https://github.com/lagwatch/lagwatch/blob/main/docs/instrumentation.md"

# What each status says about its evidence, worded once per status and evidence: what the
# evidence shows, and where it cannot tell two causes apart, both and what would tell them
# apart. docs/statuses.md ("Evidence") has the same table for readers.
EVIDENCE: dict[tuple[Status, Evidence], str] = {
    (Status.ERROR, Evidence.BROKER): "broker-side evidence only: the group could not be read",
    (Status.ERROR, Evidence.REPORTS): "broker-side evidence only: the group could not be read",
    (Status.ERROR, Evidence.SPARK): (
        "a Spark Connect client's reports: the server runs the query apart from the client that "
        "reports it, so without the client's reports, or the server's answers to it, the "
        "query's state is unknown; the server tells (spark.streams.get on the query's session)"),
    (Status.STOPPED, Evidence.BROKER): (
        "broker-side evidence only: a consumer that crashed or closed and one that left the "
        "group on its poll timeout (max.poll.interval.ms) while its process lives look the "
        f"same; its own reports would tell them apart ({INSTRUMENTATION_DOCS})"),
    (Status.STOPPED, Evidence.REPORTS): (
        "broker-side membership and the consumer's own reports, the last {report_silent} ago: "
        "a process that still reports is alive but out of the group, one whose reports "
        "stopped too is likely gone"),
    (Status.STOPPED, Evidence.SPARK): (
        "the Spark listener's events and heartbeats: they show the process that reports alive, "
        "not the query; a classic driver runs both, so its silence is the query's end"),
    (Status.LIVELOCKED, Evidence.BROKER): (
        "broker-side evidence only (joins and commits): a consumer kicked out on its poll "
        "timeout and rejoining, and members restarting in a crash loop, look the same; its "
        f"own reports would tell them apart ({INSTRUMENTATION_DOCS})"),
    (Status.LIVELOCKED, Evidence.REPORTS): (
        "the consumer's own reports (its last poll) and its membership from the broker"),
    (Status.LIVELOCKED, Evidence.SPARK): (
        "the Spark listener's heartbeats: they show the process that reports alive (the driver, "
        "or under Spark Connect the client, which also reports the server's answers), not the "
        "batch"),
    (Status.STALLED, Evidence.BROKER): (
        "broker-side evidence only (membership, commits, HW): a handler hung in a client that "
        "keeps heartbeating without a poll timeout (sarama, franz-go) and a consumer that polls "
        f"without committing look the same; its own reports would tell them apart "
        f"({INSTRUMENTATION_DOCS})"),
    (Status.STALLED, Evidence.REPORTS): (
        "the consumer's own reports show it polling (last poll {poll_age:.0f}s ago): it reads "
        "but does not commit"),
    (Status.STALLED, Evidence.SPARK): "the query's progress events and high watermarks",
    (Status.REWIND, Evidence.BROKER): "the committed offsets read from the broker",
    (Status.REWIND, Evidence.REPORTS): "the committed offsets read from the broker",
    (Status.REWIND, Evidence.SPARK): "the query's progress events (its end offsets)",
    (Status.LAGGING, Evidence.BROKER): "committed offsets and high watermarks read from the broker",
    (Status.LAGGING, Evidence.REPORTS): "committed offsets and high watermarks read from the broker",
    (Status.LAGGING, Evidence.SPARK): "the query's progress events and high watermarks",
}

# Rules whose evidence is the consumer's own reports, whatever else holds.
_REPORT_RULES = frozenset({"not_polling", "reports_stopped"})


def evidence_of(rule: str, f: PartitionFacts) -> Evidence:
    """The Spark listener's for a query; the reports' for the rules that read them, wherever
    the owner's reports are fresh, and for a partition nobody owns whose consumer reported
    (whether its reports go on says whether its process lives); else the broker's alone."""
    if f.spark:
        return Evidence.SPARK
    if rule in _REPORT_RULES or (f.has_report and (not f.report_stale or rule == "unowned")):
        return Evidence.REPORTS
    return Evidence.BROKER


# -- reasons ---------------------------------------------------------------------------

_REASONS = {
    "spark_server_unreachable": ("{where}: the Spark Connect server of query {query_id} has not "
                                 "answered its client for {server_silent}{server_error}; the "
                                 "client is alive (heartbeat {spark_silent} ago); whether the "
                                 "query runs is unknown; {nums}"),
    "spark_client_gone": "{where}: {client_gone}; {nums}",
    "spark_terminated": "{where}: query terminated; {nums}",
    "spark_driver_gone": "{where}: {reporter} of query {query_id} sent nothing for {spark_silent}; {nums}",
    "unowned": ("{where}: no member owns the partition (group {group_state}{departure}); "
                "committed unchanged for {frozen:.0f}s; {nums}"),
    "batch_hung": ("{where}: batch {batch_id} has been running for {running:.0f} seconds while "
                   "{lag} records wait; {reporter_alive}; {nums}"),
    "not_polling": "{where}: owner {reporter} is in the group but last polled {poll_age:.0f}s ago; {nums}",
    "reports_stopped": ("{where}: owner {owner} is still a member but its reports stopped "
                        "{report_silent} ago; {nums}"),
    "rejoin_loop": ("{where}: members keep leaving and rejoining ({rejoins} joins since "
                    "the committed offset stopped moving {stalled:.0f}s ago); owner {owner_or_unknown}; "
                    "{nums}"),
    "never_committed": ("{where}: no offset committed since the member was assigned this partition "
                        "{stalled:.0f}s ago, while records arrived; owner {owner}; {nums}"),
    "stalled": "{where}: committed offset frozen for {stalled:.0f}s; owner {owner_or_rebalancing}; {nums}",
    "rewind": "{where}: committed offset moved backwards; {nums}",
    "lag_above_threshold": "{where}: oldest unconsumed record is {lag_age} old{quiet}; {nums}",
    "lag_growing": "{where}: lag growing while committing; owner {owner_or_unknown}; {nums}",
}


def note(f: PartitionFacts) -> str:
    """What an ``ok`` partition's row still has to say: a topic the group left."""
    if not f.unsubscribed:
        return ""
    return (f"{f.topic}[{f.partition}]: no member subscribes to {f.topic} any more; committed "
            f"{f.committed}, HW {f.hw}, lag {f.lag_offsets} ({fmt_seconds(f.lag_seconds)})")


def fmt_seconds(v: float | None) -> str:
    if v is None:
        return "unknown"
    return f"{v:.0f}s" if v >= 10 else f"{v:.1f}s"


def reason_parts(rule: str | None, f: PartitionFacts, th: Thresholds) -> tuple[str, str]:
    """(what holds, with the numbers; what the status rests on) for the rule that decided a
    partition's status; ("", "") for none. Kept apart in a PartitionView: the evidence is
    one text per status and evidence, stored once for all the partitions it applies to."""
    if rule is None:
        return "", ""
    return _text(rule, f, th), evidence_text(rule, f)


class LaterReason:
    """The reason of a partition judged in columns, written when it is read
    (:class:`exporter.contracts.view.Reason`): what its template reads beyond the row's
    own columns is kept here, the rest comes from the row, so the text is the one
    :func:`reason_parts` writes for the same facts."""

    __slots__ = ("departure", "frozen_seconds", "group_state", "new_data_seconds", "rejoins", "rule", "th")

    def __init__(self, rule: str, th: Thresholds, frozen_seconds: float, new_data_seconds: float | None,
                 departure: str, group_state: str, rejoins: int) -> None:
        self.rule, self.th = rule, th
        self.frozen_seconds, self.new_data_seconds = frozen_seconds, new_data_seconds
        self.departure, self.group_state, self.rejoins = departure, group_state, rejoins

    def aged(self, frozen_seconds: float, new_data_seconds: float | None, departure: str) -> LaterReason:
        """The same reason at a later cycle in which nothing but time moved (a group at
        rest: exporter/evaluate/rest.py): its ages, and the departure text naming them."""
        return LaterReason(self.rule, self.th, frozen_seconds, new_data_seconds, departure, self.group_state,
                           self.rejoins)

    def text(self, tp: tuple[str, int], committed: int | None, lag_offsets: int | None,
             lag_seconds: float | None, stalled_seconds: float, owner: str) -> str:
        return self.texts([tp], [committed], [lag_offsets], [lag_seconds], [stalled_seconds], [owner])[0]

    def texts(self, tps: Sequence[tuple[str, int]], committed: Sequence[int | None],
              lag_offsets: Sequence[int | None], lag_seconds: Sequence[float | None],
              stalled_seconds: Sequence[float], owners: Sequence[str]) -> list[str]:
        """:meth:`text` of each of many rows: one facts object, its row's fields set in
        turn (a saved view writes every row's reason; building the facts was most of it)."""
        f = PartitionFacts(topic="", partition=0, committed=None, hw=None, lag_offsets=None, lag_seconds=None,
                           stalled_seconds=0.0, frozen_seconds=self.frozen_seconds,
                           new_data_seconds=self.new_data_seconds, lagging=False, rewinding=False,
                           owned=False, unowned_confirmed=False, departure=self.departure,
                           group_state=self.group_state, rejoins=self.rejoins)
        template, getters = _POSITIONAL[self.rule]
        th, out = self.th, []
        for (f.topic, f.partition), c, lo, ls, f.stalled_seconds, f.owner in zip(
                tps, committed, lag_offsets, lag_seconds, stalled_seconds, owners, strict=True):
            f.committed, f.lag_offsets, f.lag_seconds = c, lo, ls
            # a row with a reason has a lag: its HW is its committed offset plus its lag
            f.hw = None if c is None or lo is None else c + lo
            out.append(template.format(*[get(f, th) for get in getters]))
        return out


def status_of(rule: str) -> Status:
    """The status a rule of :data:`RULES` decides."""
    return _STATUS_OF[rule]


def broker_evidence(status: Status) -> str:
    """What ``status`` rests on for a partition without a Spark query or reports: the
    brokers' evidence alone (:func:`evidence_text` of such a partition)."""
    return EVIDENCE[status, Evidence.BROKER]


def evidence_text(rule: str, f: PartitionFacts) -> str:
    """What the status ``rule`` decides for ``f`` rests on (one text per status and
    evidence, the same object for every partition it applies to)."""
    template = EVIDENCE[_STATUS_OF[rule], evidence_of(rule, f)]
    if template not in _EVIDENCE_FIELDS:
        _EVIDENCE_FIELDS[template] = _fields(template)
    if not _EVIDENCE_FIELDS[template]:  # most say no number: the text as it is
        return template
    return template.format(report_silent=fmt_seconds(f.report_silent_seconds), poll_age=f.poll_age or 0.0)


def _nums(f: PartitionFacts) -> str:
    if f.never_committed:
        lag = "unknown" if f.lag_offsets is None else f"{f.lag_offsets} ({fmt_seconds(f.lag_seconds)})"
        return f"never committed, HW {f.hw}, lag {lag}"
    return f"committed {f.committed}, HW {f.hw}, lag {f.lag_offsets} ({fmt_seconds(f.lag_seconds)})"


def _quiet(f: PartitionFacts, th: Thresholds) -> str:
    if f.new_data_seconds is not None or f.frozen_seconds < th.stall_after:
        return ""
    return (f"; committed unchanged for {f.frozen_seconds:.0f}s and no record arrived since: "
            "read but not committed (commits only with new records?) or stuck on them")


# What each field of a reason's template says, computed only for the fields it names.
_FIELD: dict[str, Callable[[PartitionFacts, Thresholds], object]] = {
    "where": lambda f, th: f"{f.topic}[{f.partition}]", "nums": lambda f, th: _nums(f),
    "lag": lambda f, th: f.lag_offsets, "query_id": lambda f, th: f.query_id,
    "spark_silent": lambda f, th: fmt_seconds(f.spark_silent_seconds),
    "group_state": lambda f, th: f.group_state, "frozen": lambda f, th: f.frozen_seconds,
    "departure": lambda f, th: f"; {f.departure}" if f.departure else "",
    "batch_id": lambda f, th: f.running_batch_id, "running": lambda f, th: f.batch_running or 0.0,
    "poll_age": lambda f, th: f.poll_age or 0.0,
    "owner": lambda f, th: f.owner, "report_silent": lambda f, th: fmt_seconds(f.report_silent_seconds),
    "rejoins": lambda f, th: f.rejoins, "window": lambda f, th: th.window,
    "stalled": lambda f, th: f.stalled_seconds,
    "owner_or_rebalancing": lambda f, th: f.owner or "unknown (rebalancing)",
    "owner_or_unknown": lambda f, th: f.owner or "unknown",
    "lag_age": lambda f, th: fmt_seconds(f.lag_seconds), "quiet": _quiet,
    "reporter": lambda f, th: f.spark_reporter if f.spark else f.reporter,
    "reporter_alive": lambda f, th: _reporter_alive(f),
    "server_silent": lambda f, th: fmt_seconds(f.spark_server_silent),
    "server_error": lambda f, th: f" ({f.spark_server_error})" if f.spark_server_error else "",
    "client_gone": lambda f, th: client_gone(f.query_id, f.spark_last_report, f.spark_silent_seconds),
}


def client_gone(query_id: str, last_report: float, silent: float) -> str:
    """What is known of a query whose Spark Connect client stopped reporting (the reason of
    ``spark_client_gone``, and the note of such a query with nothing waiting)."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last_report))
    return (f"no reports since {since} ({fmt_seconds(silent)} ago) from the Spark Connect client "
            f"that reported query {query_id}; the query may still run on its Connect server")


def _reporter_alive(f: PartitionFacts) -> str:
    """Whose liveness a Spark heartbeat shows: the reporting process's, not the query's."""
    alive = f"{f.spark_reporter} alive (heartbeat {fmt_seconds(f.spark_silent_seconds)} ago)"
    if f.spark_connect_client and f.spark_server_silent is not None:
        alive += f", its server answered {fmt_seconds(f.spark_server_silent)} ago"
    return alive


def _fields(template: str) -> tuple[str, ...]:
    return tuple(name for _text, name, _spec, _conv in string.Formatter().parse(template) if name)


def _positional(template: str) -> tuple[str, tuple[Callable[[PartitionFacts, Thresholds], object], ...]]:
    """A reason's template with its named fields numbered, and the getters of the numbers
    in order: formatting from a list skips building a dict of fields per partition."""
    names: list[str] = []
    out: list[str] = []
    for literal, name, spec, conv in string.Formatter().parse(template):
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if name:
            if name not in names:
                names.append(name)
            conversion, format_spec = f"!{conv}" if conv else "", f":{spec}" if spec else ""
            out.append(f"{{{names.index(name)}{conversion}{format_spec}}}")
    return "".join(out), tuple(_FIELD[name] for name in names)


_POSITIONAL = {rule: _positional(t) for rule, t in _REASONS.items()}
_EVIDENCE_FIELDS: dict[str, tuple[str, ...]] = {}
_STATUS_OF = {name: status for name, status, _ in RULES}


def _text(rule: str, f: PartitionFacts, th: Thresholds) -> str:
    """The reason's own part: the partition, what holds, the numbers (its template in
    :data:`_REASONS`, its fields in :data:`_FIELD`)."""
    template, getters = _POSITIONAL[rule]
    return template.format(*[get(f, th) for get in getters])

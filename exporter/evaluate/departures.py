"""Who left a group, and when: the members lagwatch saw leave, kept in the group's memory.

From the broker, a member that leaves looks the same whatever made it leave: a crash (its
session timed out), a clean close, or a consumer whose process lives on but which left
the group when it did not poll within ``max.poll.interval.ms`` (kafka-python, aiokafka,
the Java client). What lagwatch can say is who left and when it first saw them gone: the
reason of a partition nobody owns names its last owner, or the group's last member to
leave when the owner is not known (a classic group publishes no assignment while it
rebalances), and how long ago.

Per group, the members seen last cycle (with the last assignment each was seen holding)
and the last :data:`MAX_DEPARTURES` departures; nothing per partition. The times are the
first sample without the member: it left within the interval before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from exporter.contracts.snapshot import TP, Member
from exporter.evaluate.latest import Latest

# Departures remembered per group: enough for the owners of a group's partitions to be
# found after a scale-in, bounded whatever the churn.
MAX_DEPARTURES = 16


@dataclass(frozen=True, slots=True)
class Departure:
    """A member seen leaving: who, what it owned, and the first sample without it."""

    member_id: str
    client_id: str
    host: str
    assignment: tuple[TP, ...]  # the last assignment it was seen holding
    gone_at: float

    def label(self) -> str:
        return f"{self.client_id or '?'}@{self.host or '?'} ({self.member_id})"


def new_departures() -> Latest[Departure]:
    return Latest(maxlen=MAX_DEPARTURES)


def remember_departures(seen: dict[str, Member], departed: Latest[Departure],
                        members: Iterable[Member], now: float) -> dict[str, Member]:
    """The members seen now (to pass back next cycle); the ones seen last cycle and gone now
    are appended to ``departed``. A member seen without an assignment (a classic group
    rebalancing publishes none) keeps the last one it was seen with."""
    current: dict[str, Member] = {}
    for m in members:
        old = seen.get(m.member_id)
        current[m.member_id] = old if (old is not None and not m.assignment and old.assignment
                                       and old.client_id == m.client_id) else m
    for mid, m in seen.items():
        if mid not in current:
            departed.append(Departure(mid, m.client_id, m.host, tuple(m.assignment), now))
    return current


def last_owner(departed: Iterable[Departure], tp: TP, empty: bool) -> Departure | None:
    """The latest departure of a member seen owning ``tp``; in an empty group without one,
    the last member to leave."""
    latest: Departure | None = None
    for d in reversed(tuple(departed)):
        if tp in d.assignment:
            return d
        if latest is None:
            latest = d
    return latest if empty else None


NOBODY_SEEN = "no member seen leaving since lagwatch watched the group"


def departure_text(departed: Iterable[Departure], tp: TP, empty: bool, now: float) -> str:
    """What the reason of a partition nobody owns says about who left: its last owner, else
    (an empty group) the group's last member to leave or that lagwatch saw nobody leave;
    "" in a group with members none of which was seen leaving it."""
    d = last_owner(departed, tp, empty)
    if d is None:
        return NOBODY_SEEN if empty else ""
    who = "last owner" if tp in d.assignment else "last member to leave"
    ago = now - d.gone_at
    return f"{who} {d.label()} left {ago:.0f}s ago" if ago >= 10 else \
        f"{who} {d.label()} left {ago:.1f}s ago"

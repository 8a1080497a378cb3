"""Which consumer report speaks for which group member.

Python reporters know their member id. A JVM ``ConsumerInterceptor`` cannot:
Kafka gives interceptors the consumer's configuration but no handle on the
consumer, so its reports carry an empty member id. They are matched to the
members the broker describes by client id and host:

* the broker gives a member's host as Java's ``InetAddress.toString()`` of the
  connection's peer address, ``/10.0.0.5``; the interceptor reports
  ``hostname/10.0.0.5`` with the local address it routes to the cluster by, so
  the two compare as IP addresses (IPv6 zone ids and IPv4-mapped forms are
  normalised);
* a report that stopped arriving while another with the same client id and
  host keeps arriving is from a process that is gone (a restarted container
  keeps its address) and is ignored;
* a member and a report that are each other's only candidate match;
* several members with one client id on one host (two JVMs both defaulting to
  ``consumer-<group>-1``, say) are told apart by their partitions: they match
  when each is the other's unique best by overlap between the report's
  partitions and the member's assignment;
* whatever is still ambiguous stays unmatched: the evaluator then falls back
  to the latest report that names the partition.

Behind NAT the broker sees another address and nothing matches by host; such
reports are still used per partition, as above.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable

from exporter.contracts.reports import ConsumerReport
from exporter.contracts.snapshot import Member
from exporter.evaluate.constants import GONE_AFTER_INTERVALS

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def host_address(host: str) -> IpAddress | None:
    """The IP address in ``/10.0.0.5``, ``app-7/10.0.0.5``, ``[::1]`` or ``fe80::1%eth0``; else None."""
    text = host.rsplit("/", 1)[-1].strip().removeprefix("[").removesuffix("]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def same_host(member_host: str, report_host: str) -> bool:
    a, b = host_address(member_host), host_address(report_host)
    if a is not None or b is not None:
        return a == b
    return bool(member_host) and member_host.strip("/").lower() == report_host.strip("/").lower()


def _live(candidates: list[ConsumerReport]) -> list[ConsumerReport]:
    newest = max(r.received_at for r in candidates)
    return [r for r in candidates if newest - r.received_at <= GONE_AFTER_INTERVALS * r.interval]


def _overlap(m: Member, r: ConsumerReport) -> int:
    return len(set(m.assignment) & (r.positions.keys() | r.committed.keys()))


def _unique_best(scores: dict[int, int]) -> int | None:
    """Index with the highest positive score, if no other has it."""
    if not scores:
        return None
    best = max(scores.values())
    winners = [i for i, s in scores.items() if s == best]
    return winners[0] if best > 0 and len(winners) == 1 else None


def match_reports(members: Iterable[Member], reports: Iterable[ConsumerReport]
                  ) -> dict[str, ConsumerReport]:
    """Member id -> the report that speaks for it.

    A matched memberless report is returned with the member's id filled in, so
    reasons and the members table name the member as the broker knows it.
    """
    members = list(members)
    out: dict[str, ConsumerReport] = {}
    memberless: list[ConsumerReport] = []
    for r in reports:
        if r.member_id:
            out[r.member_id] = r
        else:
            memberless.append(r)
    if not memberless:
        return out
    # candidates[i] = indexes of the memberless reports member i could be
    candidates: dict[int, list[int]] = {}
    for i, m in enumerate(members):
        if m.member_id in out:
            continue
        cands = [j for j, r in enumerate(memberless)
                 if r.client_id == m.client_id and same_host(m.host, r.host)]
        if cands:
            live = {id(r) for r in _live([memberless[j] for j in cands])}
            candidates[i] = [j for j in cands if id(memberless[j]) in live]
    claimed_by: dict[int, list[int]] = {}
    for i, cands in candidates.items():
        for j in cands:
            claimed_by.setdefault(j, []).append(i)
    for i, cands in candidates.items():
        chosen: int | None = None
        if len(cands) == 1 and claimed_by[cands[0]] == [i]:
            chosen = cands[0]
        else:
            j = _unique_best({j: _overlap(members[i], memberless[j]) for j in cands})
            if j is not None and _unique_best(
                    {k: _overlap(members[k], memberless[j]) for k in claimed_by[j]}) == i:
                chosen = j
        if chosen is not None:
            out[members[i].member_id] = dataclasses.replace(memberless[chosen],
                                                            member_id=members[i].member_id)
    return out

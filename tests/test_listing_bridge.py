"""Groups missing from a ListGroups answer for a cycle or two (a broker restarting or a
coordinator failing over answers without the groups it is still loading, and without an
error) are bridged from the last listing; a group the coordinator says is gone goes at once."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.config import ClusterConfig
from exporter.contracts.errors import ErrorRecord
from exporter.contracts.sampling import ListedGroup
from exporter.contracts.snapshot import GroupSample, KafkaGroupState
from exporter.kafka.broker_requests import Committed, DescribedGroup, DescribedMember
from exporter.kafka.sampler import GROUP_ID_NOT_FOUND, LISTING_GRACE_CYCLES, Sampler

pytestmark = pytest.mark.unit


@pytest.fixture
def sampler() -> Sampler:
    # librdkafka connects lazily: nothing listens on this port and nothing is sent.
    s = Sampler(ClusterConfig(name="c", bootstrap_servers="127.0.0.1:1", client={}))
    yield s
    s.close()


def _listing(*gids: str) -> dict[str, ListedGroup]:
    return {g: ListedGroup(group_id=g, type="classic", state="stable") for g in gids}


def test_a_group_missing_for_fewer_than_the_grace_cycles_is_kept(sampler: Sampler) -> None:
    last = _listing("orders", "billing")
    for _ in range(LISTING_GRACE_CYCLES - 1):
        last = sampler._bridge(last, _listing("orders"))
        assert sorted(last) == ["billing", "orders"]
    assert sorted(sampler._bridge(last, _listing("orders"))) == ["orders"]


def test_a_group_back_in_the_listing_starts_its_grace_afresh(sampler: Sampler) -> None:
    last = _listing("orders", "billing")
    for listed in (("orders",), ("orders", "billing"), ("orders",), ("orders",)):
        last = sampler._bridge(last, _listing(*listed))
    assert "billing" in last


def test_a_bridged_group_the_coordinator_calls_dead_goes_at_once(sampler: Sampler) -> None:
    sampler._bridge(_listing("orders", "gone", "streams-app"), _listing("orders"))
    load = ErrorRecord(stage="describe_group", group="orders", code=14,
                       message="orders: COORDINATOR_LOAD_IN_PROGRESS")
    errors = [ErrorRecord(stage="describe_group", group="streams-app", code=GROUP_ID_NOT_FOUND,
                          message="streams-app: GroupIdNotFoundError (69)"), load]
    groups = {"orders": GroupSample(group_id="orders", type="classic", state="stable"),
              "gone": GroupSample(group_id="gone", type="classic", state="dead"),
              "streams-app": GroupSample(group_id="streams-app", type="streams", state="unknown",
                                         error="describe: GroupIdNotFoundError (69)")}
    assert sorted(sampler._drop_gone(groups, errors)) == ["orders"]
    assert errors == [load]


def test_a_deleted_group_is_recognised_by_its_error_code_not_its_text(sampler: Sampler) -> None:
    """The code decides: a message that names GROUP_ID_NOT_FOUND with another code keeps its
    group, a code 69 with any message drops it."""
    sampler._bridge(_listing("orders", "renamed", "deleted"), _listing("orders"))
    misleading = ErrorRecord(stage="offset_fetch", group="renamed", code=15,
                             message="renamed: GROUP_ID_NOT_FOUND GroupIdNotFound (a quoted text)")
    errors = [misleading,
              ErrorRecord(stage="describe_group", group="deleted", code=GROUP_ID_NOT_FOUND, message="?")]
    groups = {g: GroupSample(group_id=g, type="consumer", state="unknown", error="describe: ?")
              for g in ("orders", "renamed", "deleted")}
    assert sorted(sampler._drop_gone(groups, errors)) == ["orders", "renamed"]
    assert errors == [misleading]
    assert GROUP_ID_NOT_FOUND == 69  # Kafka's protocol error code, not a local number


class _Requests:
    """BrokerRequests' batched calls, answered from what each group is, and the groups each
    describe asked for."""

    def __init__(self) -> None:
        self.described: list[str] = []

    def describe_classic(self, ids: list[str]) -> dict[str, DescribedGroup]:
        self.described += ids
        member = DescribedMember(member_id="m-1", member_epoch=-1, client_id="c", host="/h",
                                 assignment=(("t", 0),))
        return {g: DescribedGroup(group_id=g, state=KafkaGroupState.STABLE if g == "stable" else
                                  KafkaGroupState.EMPTY, group_epoch=-1, coordinator=1,
                                  members=(member,) if g == "stable" else ()) for g in ids}

    def describe(self, kind: str, ids: list[str]) -> dict:
        raise AssertionError(f"no {kind} group was listed")

    def share_offsets(self, ids: list[str]) -> dict:
        raise AssertionError("no share group was listed")

    def offset_fetch(self, ids: list[str], weight: dict[str, int]) -> dict[str, Committed]:
        return {g: Committed(offsets={("t", 0): 5}) for g in ids}

    def take_failures(self) -> list[str]:
        return []

    def close(self) -> None:
        pass


def test_a_group_the_listing_saw_empty_is_not_described(sampler: Sampler) -> None:
    """A classic group this cycle's listing says is Empty reads as its describe would (no
    members, its coordinator), without one; a stable group and a group bridged from an
    earlier listing (a deleted one is told by its describe) are described."""
    listed = {g: ListedGroup(group_id=g, type="classic", state=state, coordinator=1)
              for g, state in (("empty", "Empty"), ("stable", "Stable"), ("bridged", "Empty"))}
    requests = _Requests()
    sampler.broker_requests = requests  # type: ignore[assignment]
    groups = sampler._read_groups(listed, frozenset({"empty"}), [])
    assert sorted(requests.described) == ["bridged", "stable"]
    assert groups["empty"] == GroupSample(group_id="empty", type="classic", state="empty", coordinator=1,
                                          committed={("t", 0): 5})
    assert groups["empty"] == dataclasses.replace(groups["bridged"], group_id="empty")
    assert [m.member_id for m in groups["stable"].members] == ["m-1"]

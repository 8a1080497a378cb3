"""Groups missing from a ListGroups answer for a cycle or two (a broker restarting or a
coordinator failing over answers without the groups it is still loading, and without an
error) are bridged from the last listing; a group the coordinator says is gone goes at once."""

from __future__ import annotations

import pytest

from exporter.config import ClusterConfig
from exporter.contracts.errors import ErrorRecord
from exporter.contracts.sampling import ListedGroup
from exporter.contracts.snapshot import GroupSample
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

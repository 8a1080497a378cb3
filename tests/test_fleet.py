"""Trust on a realistic fleet, 5-minute variant of ``python -m bench.fleet`` (issue #13).

One run of the fleet benchmark (bench/fleet.py, devenv/fleet_workloads.py, profile ``small``):
one broker, one group of every healthy kind (steady, bursty, quiet topic with bursts,
idle, auto-commit, cooperative-sticky and KIP-848 groups scaling 1->4->1, transactional
read_committed with aborts, compacted topic read across its offset gaps, rolling deploys
with static membership and surge, Kafka Streams, share group, Spark query) and of every bad
kind (slow, polls without committing, wedged instrumented consumer, max.poll loop classic and
KIP-848, killed classic and KIP-848, offsets reset backwards, records deleted under a group,
hung Spark batch), all at once against one exporter (interval 3 s, stall-after and
livelock-after 30 s: production-like, not test-sized) and a real Prometheus with a copy of
the shipped rules whose ``for:`` durations are divided by 10 (the shipped ones are minutes long).

Every bound is the README's threshold for the status + 2 cycles + a 5 s margin
(``devenv.fleet_workloads.Params.bound``): the first cycle after the threshold starts up to
one interval later and the two-cycle rules (`stopped`, `lagging`) need one more; the margin
covers the cycle's own duration on this loaded 2-core machine (0.35 to 2.6 s at most in the
1-broker runs while developing, more with other tests running) plus the recorder's 1 s reading
period. The run waits (with a deadline) for every bad group that turned to be detected or to
pass its bound.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.fleet import Options, RunResult, run
from devenv.fleet_workloads import env_ok

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

HEALTHY_KINDS = {"steady", "bursty", "idle", "autocommit", "scaling", "transactional", "compacted",
                 "rolling deploy", "streams", "share", "spark"}
BAD_KINDS = {"slow", "nocommit", "wedged", "max.poll loop", "killed", "rewind", "retention", "spark"}


@pytest.fixture(scope="module")
def fleet() -> Iterator[RunResult]:
    # `make test` installs Java and pyspark: a missing one is a broken set-up, not a skip
    missing = [k for k, ok in env_ok().items() if not ok]
    assert not missing, f"the fleet needs {', '.join(missing)}"
    res = run(Options(duration=300, brokers=1, faults=False, profile="small", alert_for_divisor=10,
                      interval=3, stall_after=30, livelock_after=30, quiet=True))
    print("\n" + res.report)
    yield res


def _explain(res: RunResult) -> str:
    return "\n" + res.report


def test_every_kind_ran_and_every_bad_group_turned(fleet: RunResult) -> None:
    healthy = {r.kind for r in fleet.results if r.healthy}
    bad = {r.kind for r in fleet.results if not r.healthy}
    assert healthy >= HEALTHY_KINDS, HEALTHY_KINDS - healthy
    assert bad >= BAD_KINDS, BAD_KINDS - bad
    assert {r.gtype for r in fleet.results} >= {"classic", "consumer", "streams", "share", "spark"}
    assert not fleet.harness_notes, fleet.harness_notes  # no process died on its own, no action failed
    assert [r.group for r in fleet.results if not r.healthy and r.turn is None] == [], _explain(fleet)
    # every group was judged: it got an assignment and was sampled
    assert [r.group for r in fleet.results if r.samples == 0] == [], _explain(fleet)


def test_no_false_positive_on_healthy_groups(fleet: RunResult) -> None:
    wrong = [f"{e.group}: {e.status} for {e.seconds:.0f}s: {e.reason}"
             for r in fleet.results if r.healthy for e in r.wrong]
    assert wrong == [], "\n".join(wrong) + _explain(fleet)


def test_bad_groups_are_ok_before_they_turn(fleet: RunResult) -> None:
    wrong = [f"{e.group}: {e.status} for {e.seconds:.0f}s: {e.reason}" for r in fleet.results
             if not r.healthy for e in r.wrong if r.turn is None or e.start < r.turn]
    assert wrong == [], "\n".join(wrong) + _explain(fleet)


def test_every_bad_group_detected_within_its_bound(fleet: RunResult) -> None:
    late = [f"{r.group} ({r.expect}): {'missed' if r.delay is None else f'{r.delay:.1f}s'} > {r.bound:.1f}s"
            for r in fleet.results if not r.healthy and not r.within_bound]
    assert late == [], "\n".join(late) + _explain(fleet)


def test_no_alert_for_healthy_groups(fleet: RunResult) -> None:
    firing = [(a["alert"], a["group"]) for a in fleet.healthy_alerts("firing")]
    assert firing == [], f"{firing}{_explain(fleet)}"


def test_every_bad_group_raises_its_alert(fleet: RunResult) -> None:
    """With `for:` divided by 10 the expected alerts have time to fire within the run (the
    longest, StoppedWithLag's 15 min, becomes 90 s; the groups turn bad 70-110 s in). An alert
    is judged once it is due: status seen + its `for:` + two evaluations before the run's end."""
    missing = []
    for r in fleet.results:
        if r.healthy:
            continue
        fired = {a for a, states in r.alerts.items() if "firing" in states}
        due = [a for a in r.alerts_due if a in r.expected_alerts]
        if due and not fired & set(due):
            missing.append(f"{r.group} ({r.expect}): none of {due}; saw {sorted(r.alerts)}")
        missing += [f"{r.group}: {a} after the records were deleted" for _t, a in r.alert_marks
                    if a in r.alerts_due and a not in fired]
    assert missing == [], "\n".join(missing) + _explain(fleet)
    # ... and the short run leaves time for most of them
    assert sum(1 for r in fleet.results if not r.healthy and r.alerts_due) >= 8, _explain(fleet)

"""The worker's pipe carries typed messages (exporter/contracts/worker.py): a real worker
process, with nothing listening at its bootstrap address, answers each request with the
reply of its type, and its failed cycle is an error record of the metadata stage."""

from __future__ import annotations

import pickle
import random

import pytest

from exporter.config import ClusterConfig, Thresholds
from exporter.contracts.errors import ErrorStage
from exporter.contracts.sampling import MEMORY_FIELDS, ListedGroup, MemoryChanges, SamplerMemory
from exporter.contracts.snapshot import GroupType, KafkaGroupState
from exporter.contracts.worker import SampleReply, SampleRequest, TimestampsReply, TimestampsRequest
from exporter.kafka.worker import KafkaWorker

pytestmark = pytest.mark.unit


def test_a_worker_answers_typed_requests_with_typed_replies() -> None:
    cfg = ClusterConfig(name="c", bootstrap_servers="127.0.0.1:1", client={}, request_timeout=1.0,
                        reports_enabled=False)
    worker = KafkaWorker(cfg, Thresholds())
    try:
        memory = SamplerMemory(absent={"orders": 1})
        sent: list[SampleRequest] = []
        call = worker._call
        worker._call = lambda msg, timeout: (sent.append(msg), call(msg, timeout))[1]  # type: ignore[method-assign]
        reply = worker.sample(memory)
        assert isinstance(reply, SampleReply)
        assert not reply.snapshot.ok
        assert [e.stage for e in reply.snapshot.errors] == [ErrorStage.METADATA]
        assert reply.snapshot.errors[0].group is None
        # Nothing changed in the memory (nothing was listed: the cycle failed before).
        assert reply.memory_changes == MemoryChanges({}, {})
        # The memory goes to a worker that does not hold it, once: then the worker's own.
        worker.sample(memory)
        assert [m.memory for m in sent] == [memory, None]
        assert worker.timestamps([]) == {}
        assert worker.restarts == 0 and worker.proc is not None and worker.proc.poll() is None
    finally:
        worker.kill()


def test_the_messages_survive_the_pipe_encoding() -> None:
    for msg in (SampleRequest(SamplerMemory(weight={"g": 3})), TimestampsRequest([(("t", 0), 5)]),
                TimestampsReply(found={("t", 0, 5): 1.5}), TimestampsReply(found={}, error="timed out")):
        assert pickle.loads(pickle.dumps(msg)) == msg


def test_a_cycles_memory_changes_make_the_runners_copy_the_workers_memory() -> None:
    """What a cycle changed (SamplerMemory.changes_since), applied to the runner's copy,
    gives the memory the worker holds after it: entries added, replaced and removed in
    every map, seeded at random, through the pipe's pickling."""
    rnd = random.Random(7)

    def listed(gid: str) -> ListedGroup:
        return ListedGroup(group_id=gid, type=rnd.choice(list(GroupType)),
                           state=rnd.choice(list(KafkaGroupState)), coordinator=rnd.randrange(3))

    values = {"last_listed": listed, "absent": lambda _g: rnd.randrange(1, 4),
              "group_topics": lambda _g: {f"t{rnd.randrange(4)}" for _ in range(rnd.randrange(3))},
              "weight": lambda _g: rnd.randrange(100), "coordinators": lambda _g: rnd.randrange(3)}
    assert set(values) == set(MEMORY_FIELDS)
    worker = SamplerMemory()
    runner = SamplerMemory()
    for _cycle in range(30):
        before = worker.copy()
        for name, value in values.items():
            kept = getattr(worker, name)
            for gid in [f"g{rnd.randrange(40)}" for _ in range(rnd.randrange(12))]:
                if rnd.random() < 0.3:
                    kept.pop(gid, None)
                else:
                    kept[gid] = value(gid)
        if rnd.random() < 0.2:  # a map replaced whole, as a listing replaces last_listed
            worker.last_listed = dict(worker.last_listed)
        changes = pickle.loads(pickle.dumps(worker.changes_since(before)))
        runner.apply(changes)
        assert runner == worker
        assert worker.changes_since(worker.copy()) == MemoryChanges({}, {})

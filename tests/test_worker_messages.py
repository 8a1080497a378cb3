"""The worker's pipe carries typed messages (exporter/contracts/worker.py): a real worker
process, with nothing listening at its bootstrap address, answers each request with the
reply of its type, and its failed cycle is an error record of the metadata stage."""

from __future__ import annotations

import pickle

import pytest

from exporter.config import ClusterConfig, Thresholds
from exporter.contracts.errors import ErrorStage
from exporter.contracts.sampling import SamplerMemory
from exporter.contracts.worker import SampleReply, SampleRequest, TimestampsReply, TimestampsRequest
from exporter.kafka.worker import KafkaWorker

pytestmark = pytest.mark.unit


def test_a_worker_answers_typed_requests_with_typed_replies() -> None:
    cfg = ClusterConfig(name="c", bootstrap_servers="127.0.0.1:1", client={}, request_timeout=1.0,
                        reports_enabled=False)
    worker = KafkaWorker(cfg, Thresholds())
    try:
        memory = SamplerMemory(absent={"orders": 1})
        reply = worker.sample(memory)
        assert isinstance(reply, SampleReply)
        assert not reply.snapshot.ok
        assert [e.stage for e in reply.snapshot.errors] == [ErrorStage.METADATA]
        assert reply.snapshot.errors[0].group is None
        # The memory sent comes back (nothing was listed: the cycle failed before).
        assert reply.memory is not None and reply.memory.absent == {"orders": 1}
        assert worker.timestamps([]) == {}
        assert worker.restarts == 0 and worker.proc is not None and worker.proc.poll() is None
    finally:
        worker.kill()


def test_the_messages_survive_the_pipe_encoding() -> None:
    for msg in (SampleRequest(SamplerMemory(weight={"g": 3})), TimestampsRequest([(("t", 0), 5)]),
                TimestampsReply(found={("t", 0, 5): 1.5}), TimestampsReply(found={}, error="timed out")):
        assert pickle.loads(pickle.dumps(msg)) == msg

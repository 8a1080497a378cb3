"""The Kafka worker process of a real exporter against the real broker: an exception while
sampling costs one cycle and keeps the process, a process that dies is counted exactly once
and replaced (and forgets nothing: the main process holds a copy of its memory), and a
shutdown (also by a signal to the whole process group) is quiet."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from devenv.kafka import KafkaCluster
from devenv.procs import children
from tests.conftest import commit_offsets, create_topic, exporter_config, produce, unique, wait_for
from tests.support.exporter_proc import ExporterProcess, value

FAULTS = Path(__file__).resolve().parent / "faults"  # sitecustomize.py: the injected exception


def errors(exp: ExporterProcess, stage: str) -> float | None:
    return value(exp.metrics(), "lagwatch_errors_total", cluster="test", stage=stage)


def up(exp: ExporterProcess) -> float | None:
    return value(exp.metrics(), "lagwatch_up", cluster="test")


def cycles(exp: ExporterProcess) -> float:
    return value(exp.metrics(), "lagwatch_cycles_total", cluster="test") or 0


def the_worker(exp: ExporterProcess) -> int:
    kids = wait_for(lambda: children(exp.proc.pid), 30, "the Kafka worker process")
    assert len(kids) == 1, kids
    return kids[0]


def test_sampling_exception_keeps_the_worker_and_a_crash_counts_once(kafka: KafkaCluster,
                                                                       tmp_path: Any) -> None:
    flag = tmp_path / "raise"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(FAULTS), os.environ.get("PYTHONPATH")])),
           "LAGWATCH_TEST_SAMPLE_FAULT": str(flag)}
    with ExporterProcess(None, config=exporter_config(tmp_path, kafka.bootstrap_servers), env=env) as exp:
        exp.wait_ready()
        worker = the_worker(exp)
        assert errors(exp, "sample_exception") == 0

        flag.touch()  # from now on sample() raises ValueError inside the worker
        wait_for(lambda: (errors(exp, "sample_exception") or 0) >= 2 and up(exp) == 0, 30,
                 "two failed cycles counted as sample_exception, lagwatch_up 0")
        flag.unlink()
        wait_for(lambda: up(exp) == 1, 30, "lagwatch_up 1 once sample() works again")
        assert children(exp.proc.pid) == [worker], "the worker process was replaced"
        assert errors(exp, "worker_crash") == 0
        log = exp.output()
        assert any("cannot sample: sample_exception: ValueError: injected by tests/faults" in ln
                   for ln in log.splitlines()), log
        assert "Kafka worker process died" not in log

        # A worker that really dies: counted once as worker_crash, replaced, and up again.
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: errors(exp, "worker_crash") == 1 and up(exp) == 1, 60,
                 "the crash counted and a new worker sampling")
        new = wait_for(lambda: [p for p in children(exp.proc.pid) if p != worker], 30, "a new worker")
        assert len(new) == 1
        seen = cycles(exp)
        wait_for(lambda: cycles(exp) >= seen + 3, 30, "three more cycles")
        m = exp.metrics()
        assert value(m, "lagwatch_errors_total", cluster="test", stage="worker_crash") == 1
        assert value(m, "lagwatch_errors_total", cluster="test", stage="cycle") == 0
        assert "Kafka worker process died (exit code -9)" in exp.output()

        # A native crash (librdkafka has segfaulted around failovers) leaves the stack of
        # every thread of the worker in the log, to tell which request was in flight.
        os.kill(new[0], signal.SIGSEGV)
        wait_for(lambda: errors(exp, "worker_crash") == 2 and up(exp) == 1, 60,
                 "the segfault counted and a new worker sampling")
        # the count can be served before the crash's line is flushed to the log: wait for it
        def logged() -> str | None:
            out = exp.output()
            return out if "Kafka worker process died (exit code -11)" in out else None

        log = wait_for(logged, 30, "the segfault's line in the log")
        assert "Fatal Python error: Segmentation fault" in log and "most recent call first" in log, log


def test_sigterm_shuts_down_quietly(kafka: KafkaCluster, tmp_path: Any) -> None:
    with ExporterProcess(None, config=exporter_config(tmp_path, kafka.bootstrap_servers)) as exp:
        exp.wait_ready()
        worker = the_worker(exp)
        # A terminal, `timeout` or a service manager signals the whole process group, and
        # the worker may get it first: it is not a crash, the worker keeps serving.
        os.kill(worker, signal.SIGTERM)
        seen = cycles(exp)
        wait_for(lambda: cycles(exp) >= seen + 2, 30, "two more cycles after SIGTERM to the worker")
        assert children(exp.proc.pid) == [worker]
        # Shut down while a cycle is waiting for the worker: stop it so a request hangs there.
        os.kill(worker, signal.SIGSTOP)
        wait_for(lambda: (value(exp.metrics(), "lagwatch_data_age_seconds", cluster="test") or 0) > 3,
                 30, "a cycle stuck in the stopped worker")
        t0 = time.monotonic()
        exp.proc.send_signal(signal.SIGTERM)
        rc = exp.proc.wait(30)
        took = time.monotonic() - t0
        log = exp.output()
    assert rc == 0, log
    assert took < 10, took
    after = log[log.index("shutting down"):]
    assert " ERROR " not in after and " WARNING " not in after, after
    for quiet in ("Kafka worker process died", "cannot sample", "worker_crash", "Traceback"):
        assert quiet not in log, log
    wait_for(lambda: not alive(worker), 10, "the worker to end with the exporter")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie is dead, waiting for whoever reaps it


def test_a_worker_crash_while_a_group_is_missing_from_the_listing_forgets_nothing(
        kafka: KafkaCluster, tmp_path: Any) -> None:
    """The worker holds nothing the main process does not (issue 25): the listing grace, the
    group topics and the coordinators are copied in the main process, each cycle's changes
    applied, and go to a new worker with its first request. The replacement of a
    crashed worker first lists without the group (as a coordinator still loading answers),
    and the group stays: its series never vanish and its stall clock runs on."""
    topic = create_topic(kafka, unique("stateless"), partitions=1)
    produce(kafka, topic, {0: 20})
    group = unique("stateless")
    commit_offsets(kafka.bootstrap_servers, group, topic, {0: 5})  # lag 15, nobody consumes
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(FAULTS), os.environ.get("PYTHONPATH")])),
           "LAGWATCH_TEST_HIDE_FIRST_LISTING": group}
    with ExporterProcess(None, config=exporter_config(tmp_path, kafka.bootstrap_servers), env=env) as exp:
        exp.wait_ready()

        def stalled() -> float | None:
            return value(exp.metrics(), "kafka_consumergroup_stalled_seconds", group=group)

        before = wait_for(lambda: (s := stalled()) is not None and s > 3 and s, 60,
                          "the group's stall clock running")
        os.kill(the_worker(exp), signal.SIGKILL)
        # Every published record, from the crash until the new worker's third cycle.
        seen: list[float | None] = []
        crashed_at: float | None = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = exp.metrics()
            seen.append(value(m, "kafka_consumergroup_stalled_seconds", group=group))
            n = value(m, "lagwatch_cycles_total", cluster="test") or 0
            if crashed_at is None and value(m, "lagwatch_errors_total", cluster="test",
                                            stage="worker_crash") == 1:
                crashed_at = n
            if crashed_at is not None and n >= crashed_at + 3:
                break
            time.sleep(0.1)
        assert errors(exp, "worker_crash") == 1
        assert None not in seen, f"the group vanished after the worker crash: {seen}"
        assert min(seen) >= before, f"the stall clock restarted: {before} then {seen}"
        assert seen[-1] > before + 2, f"the stall clock stopped: {before} then {seen}"

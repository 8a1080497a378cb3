"""The per-partition families rendered beside the evaluation, chunk by chunk in the Kafka
worker (exporter/expose/partition_lines.py), are the bytes the main process renders
itself: the oracle is ``render_cluster`` without them. Every recording of
tests/recordings/, the lively cluster of tests/test_columns.py and the benchmark's shapes
(large enough to span chunks and to deflate) go through both, in full and bounded detail;
the chunks are pickled as over the worker's pipe. The worker's own handling (a cycle's
chunks only, a failure said and the next cycle whole) and the runner's fallbacks are
held here too."""

from __future__ import annotations

import pickle
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bench.footprint import snapshot
from exporter import recording
from exporter.config import Thresholds, build_config
from exporter.contracts.snapshot import Snapshot
from exporter.contracts.view import ClusterView, GroupView
from exporter.contracts.worker import (
    PartitionLinesChunk,
    PartitionLinesReply,
    PartitionLinesRequest,
    SampleReply,
    WorkerCounters,
)
from exporter.evaluate import evaluator as evaluator_module
from exporter.evaluate.evaluator import Evaluator
from exporter.expose import partition_lines
from exporter.expose.families import CycleFamilies
from exporter.expose.labels import group_labels
from exporter.expose.partition_lines import NAMES, PartitionLines
from exporter.expose.render import _per_partition, chunk_of, render_cluster
from exporter.expose.scrape import body_of, view_chunks
from exporter.expose.textformat import Packed
from exporter.kafka.worker import WorkerCrashed, _Clients
from exporter.runner import ClusterRunner, _LinesFeed
from exporter.store import ClusterRecord, SelfStats, Store, initial_record
from tests.test_columns import RECORDINGS, _LiveRun
from tests.test_rest import _Run

pytestmark = pytest.mark.unit


def _body(view: ClusterView, exposition: tuple) -> bytes:
    return body_of(view_chunks([ClusterRecord(view=view, stats=SelfStats(), exposition=exposition)]))


class _Beside:
    """The runner's part and the worker's, in one process: chunks pickled as on the pipe."""

    def __init__(self, cluster: str, bounded: bool) -> None:
        self.cluster, self.bounded = cluster, bounded
        self.cycle = 0
        self.labels: list[str] = []
        self.lines = PartitionLines(0)
        self.largest = 0  # the most rows a chunk held
        self.texts = 0  # the most seconds texts a cycle kept

    def begin(self) -> None:
        self.cycle += 1
        self.labels, self.lines = [], PartitionLines(self.cycle)

    def judged(self, views: list[GroupView]) -> None:
        chunk = pickle.loads(pickle.dumps(chunk_of(self.cycle, self.cluster, views, self.bounded)))
        self.labels += chunk.labels
        self.largest = max(self.largest, len(chunk.tps))
        self.lines.add(chunk)
        self.texts = max(self.texts, len(self.lines.texts))


def _replay(cycles, ev: Evaluator, cluster: str) -> tuple[int, int, int, int]:  # noqa: ANN001
    """Both ways, full and bounded, every cycle; (views compared, bodies deflated, the
    most rows a chunk held, the most seconds texts a cycle kept)."""
    full, bounded = _Beside(cluster, False), _Beside(cluster, True)
    compared = packed = 0
    for snap, consumer, spark, exact_ts, now in cycles:
        full.begin()
        bounded.begin()

        def both(views: list[GroupView]) -> None:
            full.judged(views)
            bounded.judged(views)

        view = ev.evaluate(snap, consumer, spark, exact_ts, now=now, judged=both)
        if not snap.ok:
            assert not full.labels
            continue
        assert full.labels == [group_labels(view, g) for g in view.groups]  # every group, in order
        for side, b in ((full, False), (bounded, True)):
            bodies = pickle.loads(pickle.dumps(side.lines.bodies()))
            packed += sum(isinstance(x, Packed) for x in bodies)
            beside = render_cluster(view, bounded=b, lines=lambda bodies=bodies: bodies)
            assert _body(view, beside) == _body(view, render_cluster(view, bounded=b))
        compared += 1
    return compared, packed, full.largest, full.texts


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name.split(".")[0])
def test_a_recording_renders_the_same_lines_beside_the_evaluation(path: Path) -> None:
    rec = recording.load(path)
    head = rec.header
    ev = Evaluator(head["cluster"], rec.thresholds, rec.interval, int(head["history_points"]),
                   int(head["max_group_partitions"]), rec.group_thresholds)
    compared, *_ = _replay([(c.snap, c.consumer, c.spark, c.exact_ts, c.now) for c in rec.cycles], ev,
                          head["cluster"])
    assert compared > 0


def test_a_cluster_in_use_renders_the_same_lines_beside_the_evaluation() -> None:
    run = _LiveRun(1)
    th = Thresholds(stall_after=20, livelock_after=20, lag_seconds=120, window=300, report_stale_after=20)
    rnd = random.Random(1)
    now, timeline = 1_767_225_600.0, []
    for i in range(120):
        now += rnd.uniform(0.7, 1.6)
        timeline.append(run.cycle(i, now))
    compared, *_ = _replay(timeline, Evaluator("live", th, 1.0), "live")
    assert compared > 100


@pytest.mark.parametrize(("live", "kept"), [(True, 4), (True, None), (False, None)],
                         ids=["live-4-texts", "live", "behind"])
def test_the_benchmark_shapes_render_the_same_lines_in_chunks_deflated(
        live: bool, kept: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with a cycle's seconds texts bounded to 4 (partition_lines.TEXTS_KEPT): past
    the bound a value is formatted each time it is met, the same bytes."""
    if kept is not None:
        monkeypatch.setattr(partition_lines, "TEXTS_KEPT", kept)
    ev = Evaluator("bench", Thresholds(), 15.0)
    timeline = [(snapshot(120, 50, c, 1_000_000.0 + 15 * c, live=live), {}, {}, {}, 1_000_000.0 + 15 * c)
                for c in range(4)]
    compared, packed, _, texts = _replay(timeline, ev, "bench")  # 6,000 rows: two chunks a cycle
    assert compared == 4
    assert packed >= 4  # the families past PACK_ABOVE went deflated through the pipe
    assert texts > 1 and (kept is None or texts == kept)


def test_a_cluster_at_rest_is_handed_on_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups at rest count toward a chunk as the groups judged do: a cluster at rest is not
    sent to the worker as one chunk of every group at the end (a million rows, once)."""
    monkeypatch.setattr(evaluator_module, "CHUNK_ROWS", 12)
    run = _Run(1)  # 24 groups of 3 partitions on idle and written topics, most at rest
    th = Thresholds(stall_after=30, livelock_after=30, lag_seconds=600, window=600, report_stale_after=30)
    now, timeline = 1_767_225_600.0, []
    for i in range(120):
        now += 1.0
        timeline.append(run.cycle(i, now))
    ev = Evaluator("syn", th, 1.0)
    compared, _, largest, _ = _replay(timeline, ev, "syn")
    assert compared > 100 and ev.resting()  # groups were at rest
    # at most the groups at rest short of a chunk and a judged chunk, each with its last
    # group's rows past the chunk's (every group at once: 72 rows here)
    assert largest <= 2 * (12 + 3), largest


def _chunk(cycle: int, gid: str, n: int = 3) -> PartitionLinesChunk:
    col = np.arange(n, dtype=np.int64).tobytes()
    return PartitionLinesChunk(cycle, [f'cluster="c",group="{gid}"'], [n], [("t", p) for p in range(n)],
                               col, col, col, np.arange(n, dtype=float).tobytes(), np.zeros(n).tobytes())


def _text(reply: PartitionLinesReply) -> bytes:
    assert reply.bodies is not None
    return b"".join(b if isinstance(b, bytes) else b"".join(b.pieces()) for b in reply.bodies)


def test_the_worker_renders_only_the_chunks_of_the_cycle_asked_for() -> None:
    w = _Clients(SimpleNamespace(name="c"), None, None, None)  # type: ignore[arg-type]
    w.render(_chunk(1, "old"))
    w.render(_chunk(2, "a"))
    w.render(_chunk(2, "b"))
    text = _text(w.answer(PartitionLinesRequest(2)))
    assert b'group="a"' in text and b'group="b"' in text and b'group="old"' not in text
    assert text.count(b"\n") == 2 * 3 * 5  # two groups of three partitions, five families
    assert _text(w.answer(PartitionLinesRequest(3))) == b""  # no chunk: no line
    assert len(w.answer(PartitionLinesRequest(3)).bodies or ()) == len(NAMES)


def test_a_chunk_the_worker_cannot_render_fails_its_cycle_alone() -> None:
    w = _Clients(SimpleNamespace(name="c"), None, None, None)  # type: ignore[arg-type]
    bad = _chunk(1, "a")
    w.render(PartitionLinesChunk(1, bad.labels, [4], bad.tps, bad.committed, bad.position,
                                 bad.lag_offsets, bad.lag_seconds, bad.stalled_seconds))
    w.render(_chunk(1, "b"))
    reply = w.answer(PartitionLinesRequest(1))
    assert reply.bodies is None and reply.error and "ValueError" in reply.error
    w.render(_chunk(2, "c"))
    assert b'group="c"' in _text(w.answer(PartitionLinesRequest(2)))


class _Worker:
    """A worker that takes chunks, or is gone, or died."""

    def __init__(self, running: bool = True, dies: bool = False) -> None:
        self.running, self.dies, self.sent = running, dies, 0

    def send_lines(self, chunk: PartitionLinesChunk) -> bool:
        if self.dies:
            raise WorkerCrashed("Kafka worker process died (exit code -9); restarting")
        self.sent += 1
        return self.running

    def partition_lines(self, cycle: int) -> PartitionLinesReply | None:
        return PartitionLinesReply((b"x",) * len(NAMES)) if self.running else None


def _runner(worker: _Worker) -> SimpleNamespace:
    r = SimpleNamespace(worker=worker, cfg=SimpleNamespace(name="c"), bounded=False, crashes=[])
    r._worker_crashed = r.crashes.append
    return r


def test_the_runner_renders_the_lines_itself_where_the_worker_did_not() -> None:
    view = ClusterView(cluster="c", up=True, sampled_at=1.0, sample_duration=0.1, partitions={}, groups={})
    ok = _LinesFeed(_runner(_Worker()), 1)  # type: ignore[arg-type]
    ok.send([])
    assert ok.collector(view)() == (b"x",) * len(NAMES)
    capped = _LinesFeed(_runner(_Worker()), 1)  # type: ignore[arg-type]
    assert capped.collector(ClusterView(cluster="c", up=True, sampled_at=1.0, sample_duration=0.1,
                                        partitions={}, groups={}, dropped_group_partitions=5))() is None
    gone = _LinesFeed(_runner(_Worker(running=False)), 1)  # type: ignore[arg-type]
    gone.send([])
    gone.send([])
    assert gone.collector(view)() is None and gone.runner.worker.sent == 1  # nothing after a refusal
    r = _runner(_Worker(dies=True))
    dead = _LinesFeed(r, 1)  # type: ignore[arg-type]
    dead.send([])
    assert dead.collector(view)() is None and len(r.crashes) == 1  # counted once, as a crash


def test_the_five_families_are_the_renderer_s_own() -> None:
    assert tuple(f.name for f in _per_partition(CycleFamilies.new())) == NAMES


def test_the_worker_s_modules_import_no_numpy() -> None:
    """The worker's interpreter stays about 10 MB smaller without numpy: the chunks'
    columns cross as bytes (exporter/contracts/worker.py)."""
    code = ("import sys\n"
            "from exporter.kafka import worker, sampler, timestamps\n"
            "from exporter.expose import partition_lines\n"
            "from exporter.reports import reader\n"
            "from exporter.state import topic, coordination\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy')[:3])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_cycle_that_raised_leaves_its_lines_out_of_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """The feed's numbers: a cycle whose evaluation raised after its first chunk went left
    that chunk in the worker; the next cycle's chunks carry another number, so the worker
    starts afresh (a repeated number would serve the first chunk's lines twice)."""
    config = build_config({"clusters": [{"name": "c", "bootstrap_servers": "127.0.0.1:1"}]}, {})
    runner = ClusterRunner(config.clusters[0], config, Store([initial_record("c", frozenset())]))
    sent: list[int] = []
    snap = Snapshot(cluster="c", taken_at=1.0, duration=0.1, partitions={}, groups={})
    monkeypatch.setattr(runner.worker, "sample",
                        lambda memory=None: SampleReply(snap, {}, {}, WorkerCounters()))
    monkeypatch.setattr(runner.worker, "send_lines", lambda chunk: sent.append(chunk.cycle) or True)
    monkeypatch.setattr(runner.worker, "partition_lines", lambda cycle: None)
    calls = [0]

    def evaluate(*a: object, judged=None, **k: object) -> ClusterView:  # noqa: ANN001
        calls[0] += 1
        judged([])
        if calls[0] == 1:
            raise RuntimeError("a bug")
        return ClusterView(cluster="c", up=True, sampled_at=1.0, sample_duration=0.1, partitions={},
                           groups={})

    monkeypatch.setattr(runner.evaluator, "evaluate", evaluate)
    monkeypatch.setattr(runner, "state", None)
    assert not runner.cycle() and runner.cycle()
    assert len(sent) == 2 and sent[0] != sent[1]

"""``make demo`` (python -m devenv.demo): every status on a live picture, nothing left behind.

The demo runs as a real subprocess in its own process group; Ctrl-C is
simulated the way a terminal sends it (SIGINT to the whole foreground process
group). Every process the demo started is recorded from /proc while it runs
and must be gone afterwards, as must every directory on its TEMPDIRS lines.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT_DIR, wait_for

ROW = re.compile(r"^\s+(\S+)\s+(classic|consumer|spark)\s+(?:\x1b\[[0-9;]*m)?"
                 r"(ok|lagging|stalled|livelocked|stopped|rewind|error)\b")
# The Acceptance asks for ok, lagging and livelocked; the demo has stalled and stopped too.
WANTED = {("orders-service", "ok"), ("payments-reconciler", "lagging"),
          ("invoice-renderer", "livelocked"), ("audit-archiver", "stalled"),
          ("nightly-report", "stopped")}


class Demo:
    def __init__(self, *args: str) -> None:
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devenv.demo", *args], cwd=ROOT_DIR, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.t0, line.rstrip("\n")))

    def text(self) -> str:
        return "\n".join(line for _t, line in self.lines)

    def first_seen(self) -> dict[tuple[str, str], float]:
        """(group, status) -> seconds since start of its first appearance in a table."""
        out: dict[tuple[str, str], float] = {}
        for t, line in list(self.lines):
            m = ROW.match(line)
            if m:
                out.setdefault((m.group(1), m.group(3)), t)
        return out

    def tempdirs(self) -> list[Path]:
        return [Path(p) for _t, line in list(self.lines) if line.startswith("TEMPDIRS ")
                for p in line.split()[1:]]

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C

    def wait_stopped(self, timeout: float) -> int:
        """The demo's exit code once it exits; past ``timeout``, a failure that says where
        it is stuck: its Python stacks (devenv/demo.py dumps them on SIGUSR1), its output
        with the seconds since its start, and the processes under it."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kids = descendants(self.proc.pid)
            os.kill(self.proc.pid, signal.SIGUSR1)
            time.sleep(2)
            lines = "\n".join(f"{t:7.1f} {line}" for t, line in list(self.lines))
            tree = "\n".join(f"{pid} {c[:200]}" for pid, (_s, c) in kids.items())
            raise AssertionError(f"the demo did not stop within {timeout:g} s:\n{lines}\n"
                                 f"--- processes under it ---\n{tree}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a live process, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), fields[0], int(fields[19])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """pid -> (start time, command line) of every live descendant of ``root``."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[int, str]] = {}
    for pid in _all_pids():
        st = _stat(pid)
        if st:
            children.setdefault(st[0], []).append(pid)
            info[pid] = (st[2], "")
    out: dict[int, tuple[int, str]] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out[pid] = (info[pid][0], _cmdline(pid))
        todo.extend(children.get(pid, []))
    return out


def still_alive(procs: dict[int, tuple[int, str]]) -> list[str]:
    alive = []
    for pid, (start, cmd) in procs.items():
        st = _stat(pid)
        if st and st[2] == start and st[1] != "Z":
            alive.append(f"{pid}: {cmd[:200]}")
    return alive


def strays(demo_pid: int, tempdirs: list[Path]) -> list[str]:
    """Any process anywhere that belongs to this demo: its broker JVM or a user of its files."""
    marks = [f"-Dlagwatch.owner={demo_pid} "] + [str(d) for d in tempdirs]
    out = []
    for pid in _all_pids():
        cmd = _cmdline(pid) + " "
        st = _stat(pid)
        if st and st[1] != "Z" and any(m in cmd for m in marks):
            out.append(f"{pid}: {cmd[:200]}")
    return out


def assert_left_nothing(demo: Demo, seen: dict[int, tuple[int, str]]) -> None:
    dirs = demo.tempdirs()
    assert dirs, f"no TEMPDIRS line:\n{demo.text()}"
    assert still_alive(seen) == [], "processes of the demo still running"
    assert strays(demo.proc.pid, dirs) == [], "processes of the demo still running"
    assert [d for d in dirs if d.exists()] == [], "temporary directories left behind"


@pytest.fixture
def demo_runs() -> Iterator[list[Demo]]:
    runs: list[Demo] = []
    yield runs
    for d in runs:  # only when a test failed half-way
        d.kill()
        for p in d.tempdirs():
            shutil.rmtree(p, ignore_errors=True)


def test_demo_shows_every_status_and_ctrl_c_cleans_up(
        demo_runs: list[Demo]) -> None:
    demo = Demo("--table-every", "2", "--duration", "400")
    demo_runs.append(demo)

    def statuses() -> bool:
        if demo.proc.poll() is not None:
            raise AssertionError(f"demo exited {demo.proc.returncode}:\n{demo.text()}")
        return demo.first_seen().keys() >= WANTED

    try:
        wait_for(statuses, 120, "ok, lagging, livelocked, stalled, stopped in the demo's table",
                 interval=0.5)
    except AssertionError:
        raise AssertionError(f"{demo.first_seen()}\n{demo.text()[-6000:]}") from None
    seen = {k: round(t, 1) for k, t in demo.first_seen().items() if k in WANTED}
    print("first seen in the table (s since start):", seen)
    # the healthy group is never anything but ok
    assert {s for (g, s) in demo.first_seen() if g == "orders-service"} == {"ok"}
    text = demo.text()
    for url in ("status page   http://127.0.0.1:", "/metrics", "/api/v1/clusters/demo/groups"):
        assert url in text, text
    if shutil.which("prometheus") or os.path.exists("/usr/bin/prometheus"):
        assert "alerts        http://127.0.0.1:" in text
        wait_for(lambda: "target lagwatch up" in demo.text(), 30, "Prometheus scraping the exporter")

    children = descendants(demo.proc.pid)
    cmds = [c for _s, c in children.values()]
    assert any(f"-Dlagwatch.owner={demo.proc.pid}" in c for c in cmds), cmds
    assert any("-m exporter" in c for c in cmds), cmds
    assert sum("-m devenv.scenario_consumer" in c for c in cmds) == 4, cmds

    demo.ctrl_c()
    t_int = time.monotonic()
    code = demo.wait_stopped(60)
    print(f"stopped {time.monotonic() - t_int:.1f}s after Ctrl-C")
    demo.reader.join(5)
    assert code == 0, demo.text()[-3000:]
    assert "nothing left running" in demo.text()
    assert_left_nothing(demo, children)


def test_sigterm_while_kafka_starts_leaves_nothing(demo_runs: list[Demo]) -> None:
    demo = Demo()
    demo_runs.append(demo)

    def broker_spawned() -> dict[int, tuple[int, str]] | None:
        if demo.proc.poll() is not None:
            raise AssertionError(f"demo exited {demo.proc.returncode}:\n{demo.text()}")
        kids = descendants(demo.proc.pid)
        return kids if any("kafka.Kafka" in c for _s, c in kids.values()) else None

    children = wait_for(broker_spawned, 90, "the demo's broker JVM", interval=0.1)
    demo.proc.send_signal(signal.SIGTERM)
    code = demo.wait_stopped(60)
    demo.reader.join(5)
    assert code == 0, demo.text()
    assert "SIGTERM: stopping" in demo.text()
    assert_left_nothing(demo, children)


@pytest.mark.unit
def test_a_signal_during_the_brokers_metadata_poll_ends_the_wait(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's handler raises Interrupted wherever the main thread is. In
    KafkaCluster.wait_ready's metadata poll, which retries on Exception, it must end the
    wait: swallowed there, the demo ran on after its one SIGTERM until the broker was up."""
    from confluent_kafka import admin

    from devenv.demo import Interrupted
    from devenv.kafka import Broker, KafkaCluster

    class SignalledAdmin:
        def __init__(self, _conf: dict[str, Any]) -> None:
            pass

        def list_topics(self, timeout: float) -> None:
            raise Interrupted("SIGTERM")

    monkeypatch.setattr(admin, "AdminClient", SignalledAdmin)
    with socket.socket() as listening, subprocess.Popen(["sleep", "60"]) as alive:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        broker = Broker(1, listening.getsockname()[1], 0, tmp_path, proc=alive)
        try:
            with pytest.raises(Interrupted):
                KafkaCluster(brokers=[broker]).wait_ready(timeout=2)
        finally:
            alive.kill()


@pytest.mark.unit
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_signal_whose_raise_python_ignores_still_stops_the_demo() -> None:
    """A SIGTERM that lands in code whose exceptions Python prints and ignores (a weakref
    callback of importlib's module locks, a ``__del__``) loses its Interrupted. The latch
    keeps the signal, so the demo's next ``check`` raises it; once stopping, it is ignored."""
    from devenv.demo import Interrupted, SignalLatch

    latch = SignalLatch()

    class SignalledWhileCollected:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGUSR2)

    previous = signal.signal(signal.SIGUSR2, latch)
    try:
        latch.check()  # nothing received yet
        SignalledWhileCollected()  # its __del__ runs the handler; the raise is ignored
        assert latch.received == ["SIGUSR2"]
        with pytest.raises(Interrupted, match="SIGUSR2"):
            latch.check()
        latch.stopping = True
        signal.raise_signal(signal.SIGUSR2)  # during the cleanup: no raise, nothing kept
        assert latch.received == ["SIGUSR2"]
    finally:
        signal.signal(signal.SIGUSR2, previous)


@pytest.mark.unit
def test_a_kept_signal_ends_the_wait_for_the_brokers_start(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal kept by the latch ends DemoCluster.wait_ready at its next poll, not when
    the broker is up: the demo stops while Kafka still starts."""
    from devenv import demo
    from devenv.kafka import Broker

    monkeypatch.setattr(demo.LATCH, "received", ["SIGTERM"])
    with socket.socket() as listening, subprocess.Popen(["sleep", "60"]) as alive:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        broker = Broker(1, listening.getsockname()[1], 0, tmp_path, proc=alive)
        try:
            with pytest.raises(demo.Interrupted, match="SIGTERM"):
                demo.DemoCluster(brokers=[broker]).wait_ready(timeout=3)
        finally:
            alive.kill()

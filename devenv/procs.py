"""What /proc says about a process (its children, CPU, memory and open files), and how to
stop one (benchmarks, tests)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def terminate(proc: subprocess.Popen, timeout: float = 20) -> int:
    """SIGTERM, ``timeout`` seconds to exit, then SIGKILL; the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode


def children(pid: int) -> list[int]:
    """Direct children of every thread of ``pid`` (the exporter's Kafka worker is started
    by a sampler thread, so the main thread's list alone would miss it)."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def cpu_seconds(pid: int | str, task: int | None = None) -> float:
    """User and system CPU seconds of process ``pid`` (a number, or "self") so far, or of
    its thread ``task`` alone (``utime`` and ``stime`` in ``/proc``)."""
    stat = Path(f"/proc/{pid}") / ("stat" if task is None else f"task/{task}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command, which may hold ")"
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int, field: str = "VmRSS") -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))

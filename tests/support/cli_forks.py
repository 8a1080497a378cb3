"""``python -m exporter ARGS`` many times over, at the cost of one interpreter start.

A server process imports the CLI once, then forks a child per run: the child runs the
package's ``__main__`` as ``python -m exporter`` does (:func:`runpy.run_module`), with
the run's own argv, environment, stdout and stderr files, and exits with the status the
interpreter gives (``SystemExit`` code, 1 and a traceback for an uncaught exception). A
fresh interpreter differs only in what importing prints: tests/test_config_errors.py
keeps one case in a fresh ``python -m exporter`` for that.

    python -m tests.support.cli_forks   (one JSON request a line on stdin, one reply a line)
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _exit_status(e: SystemExit) -> int:
    """The status the interpreter exits with for ``raise SystemExit(e.code)``."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


def _child(req: dict[str, Any]) -> None:
    """In the forked child: become ``python -m exporter *argv``; never returns."""
    os.environ.clear()
    os.environ.update(req["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.argv = ["", *req["argv"]]
    status = 0
    try:
        runpy.run_module("exporter", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        status = _exit_status(e)
    except BaseException:  # noqa: BLE001 - the interpreter's own handling of an uncaught one
        traceback.print_exc()
        status = 1
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        f.flush()
    os._exit(status)


def _run(req: dict[str, Any]) -> int | None:
    """Fork one run and wait for it; None when it outlived ``req["timeout"]`` (killed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(req)
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.005)


def serve() -> None:
    import exporter.cli  # noqa: F401 - imported once, before any fork

    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the children's stdout is their own file
    replies.write("ready\n")
    for line in sys.stdin:
        replies.write(json.dumps({"rc": _run(json.loads(line))}) + "\n")


@dataclass
class Result:
    rc: int | None  # None: still running at the timeout, killed
    stdout: str
    stderr: str


class CliForks:
    """The test side: one server process; :meth:`run` one run at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.cli_forks"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"

    def run(self, argv: list[str], env: dict[str, str], out: Path, timeout: float) -> Result:
        """``python -m exporter *argv`` with ``env``; its stdout and stderr kept in ``out``."""
        req = {"argv": argv, "env": env, "stdout": str(out / "stdout"), "stderr": str(out / "stderr"),
               "timeout": timeout}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        rc = json.loads(self.proc.stdout.readline())["rc"]
        return Result(rc, (out / "stdout").read_text(), (out / "stderr").read_text())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


if __name__ == "__main__":
    serve()

"""Run tests/support/spark_driver.py (a PySpark driver with a LagListener) under a given interpreter."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from devenv.kafka import die_with_parent

DRIVER = Path(__file__).resolve().parent / "spark_driver.py"


class SparkDriverProcess:
    """One driver process; ``call`` sends a request and waits (bounded) for its reply."""

    def __init__(self, python: Path, bootstrap: str, jars: list[Path], heartbeat: float,
                 start_timeout: float = 120) -> None:
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix="lagwatch-spark-driver-", suffix=".log", delete=False)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        self.proc = subprocess.Popen(
            [str(python), str(DRIVER), "--bootstrap", bootstrap, "--heartbeat", str(heartbeat),
             "--jars", ",".join(str(j) for j in jars)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            cwd=tempfile.gettempdir(), env=env, preexec_fn=die_with_parent)
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.hello: dict[str, Any] = self._reply("start", start_timeout)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@ "):
                self._replies.put(json.loads(line[3:]))
        self._replies.put(None)  # EOF: the driver exited

    def _reply(self, what: str, timeout: float) -> Any:
        try:
            rep = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"spark driver: no reply to {what} in {timeout}s\n"
                                 f"{self.output()}") from None
        if rep is None:
            raise AssertionError(f"spark driver exited ({self.proc.wait()}) during {what}\n"
                                 f"{self.output()}")
        if "error" in rep:
            raise AssertionError(f"spark driver: {what} failed:\n{rep['error']}")
        return rep["ok"]

    def call(self, cmd: str, timeout: float = 60, **kwargs: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kwargs}) + "\n")
        self.proc.stdin.flush()
        return self._reply(cmd, timeout)

    def output(self, tail: int = 8000) -> str:
        return Path(self.log.name).read_text(errors="replace")[-tail:]

    def close(self, timeout: float = 90) -> dict[str, Any]:
        """Stop queries and listeners, then the driver; returns the listeners' counters."""
        try:
            counters = self.call("close", timeout=timeout)["counters"]
            self.proc.wait(timeout)
            return counters
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            # The JVM needs no care: pyspark's gateway exits when its parent's pipe closes.
            os.unlink(self.log.name)

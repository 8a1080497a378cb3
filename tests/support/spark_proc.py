"""Run tests/support/spark_driver.py (a PySpark driver with a LagListener) under a given interpreter."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devenv.kafka import die_with_parent, free_port

DRIVER = Path(__file__).resolve().parent / "spark_driver.py"


class SparkDriverProcess:
    """One driver process; ``call`` sends a request and waits (bounded) for its reply."""

    def __init__(self, python: Path, bootstrap: str, jars: list[Path], heartbeat: float,
                 start_timeout: float = 120, remote: str | None = None, listener: bool = True,
                 server_log: Callable[[], str] | None = None) -> None:
        """``server_log``: the tail of a Connect server's log, shown when the driver fails."""
        self._server_log = server_log
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix="lagwatch-spark-driver-", suffix=".log", delete=False)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
        self.proc = subprocess.Popen(
            [str(python), str(DRIVER), "--bootstrap", bootstrap, "--heartbeat", str(heartbeat),
             "--jars", ",".join(str(j) for j in jars), *(["--remote", remote] if remote else []),
             *([] if listener else ["--no-listener"])],
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
                                 f"{self.output()}{self._more()}") from None
        if rep is None:
            raise AssertionError(f"spark driver exited ({self.proc.wait()}) during {what}\n"
                                 f"{self.output()}{self._more()}")
        if "error" in rep:
            raise AssertionError(f"spark driver: {what} failed:\n{rep['error']}")
        return rep["ok"]

    def _more(self) -> str:
        if self._server_log is None:
            return ""
        return f"\n--- Spark Connect server log (tail) ---\n{self._server_log()}"

    def call(self, cmd: str, timeout: float = 60, **kwargs: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kwargs}) + "\n")
        self.proc.stdin.flush()
        return self._reply(cmd, timeout)

    def kill(self) -> None:
        """SIGKILL: the process vanishes without a word to Spark or to Kafka."""
        self.proc.kill()
        self.proc.wait()

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


CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServer:
    """A Spark Connect server on loopback: ``SparkConnectServer`` through the spark-submit of
    ``python``'s pyspark (the way sbin/start-connect-server.sh runs it), with the Kafka
    connector and, for 3.5, the Connect jar (devenv/jars.py). Its Python workers, and under
    3.5 the client's listeners, run with ``python``."""

    def __init__(self, python: Path, jars: list[Path], start_timeout: float = 180) -> None:
        home = Path(subprocess.run(
            [str(python), "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
            capture_output=True, text=True, check=True, cwd=tempfile.gettempdir()).stdout.strip())
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix="lagwatch-spark-connect-", suffix=".log", delete=False)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        # SETUPTOOLS_USE_DISTUTILS: pyspark 3.5 imports distutils, which setuptools' shim
        # answers by importing pkg_resources, about a fifth of the imports of a 3.5 listener's
        # process, which must connect back within 10 s (tests/support/spark_driver.py).
        env.update(SPARK_HOME=str(home), PYSPARK_PYTHON=str(python),
                   SETUPTOOLS_USE_DISTUTILS="stdlib")
        conf = {"spark.connect.grpc.binding.port": self.port,
                "spark.connect.grpc.binding.address": "127.0.0.1",  # 4.x; 3.5 binds every address
                "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
                "spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}
        cmd = [str(home / "bin" / "spark-submit"), "--class", CONNECT_SERVER, "--master", "local[2]",
               *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
               "--jars", ",".join(str(j) for j in jars)]
        # its own process group: the JVM and the Python workers it starts die together
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=tempfile.gettempdir(), preexec_fn=die_with_parent,
                                     start_new_session=True)
        self._wait_started(start_timeout)

    def _wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while "Spark Connect server started at" not in self.output(200_000):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"Spark Connect server did not start:\n{self.output()}")
            time.sleep(0.2)

    def output(self, tail: int = 8000) -> str:
        return Path(self.log.name).read_text(errors="replace")[-tail:]

    def kill(self) -> None:
        """SIGKILL to the server and every process it started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        os.unlink(self.log.name)

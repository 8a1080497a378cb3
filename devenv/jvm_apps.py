"""Run the JVM programs of devenv/jvm (a plain KafkaConsumer, a Kafka Streams app), with or
without lagwatch's consumer interceptor, for the tests and the overhead benchmark.

They are compiled once into ``.cache/`` against Kafka Streams' kafka-clients (4.2.1) and
run against any kafka-clients version's jars (the programs use only APIs 3.x has too).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from devenv.jars import CACHE, CLIENTS_KAFKA_VERSION, interceptor_jar, kafka_libs, kafka_streams_libs
from devenv.kafka import die_with_parent, java_binary
from devenv.procs import terminate

SOURCES = Path(__file__).resolve().parent / "jvm"
INTERCEPTOR = "dev.lagwatch.interceptor.LagwatchConsumerInterceptor"
JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC")


def compiled() -> Path:
    """Directory of the compiled programs (rebuilt when a source changes)."""
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    out = CACHE / f"jvm-apps-{digest}"
    if not out.exists():
        cp = f"{kafka_streams_libs()}/*:{interceptor_jar()}"
        tmp = Path(tempfile.mkdtemp(prefix="jvm-apps-", dir=CACHE))
        javac = Path(java_binary()).resolve().parent / "javac"
        subprocess.run([str(javac), "-nowarn", "-d", str(tmp), "-cp", cp, *map(str, sources)],
                       check=True)
        try:
            tmp.rename(out)
        except OSError:  # compiled meanwhile by another process
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def classpath(kafka_version: str = CLIENTS_KAFKA_VERSION, streams: bool = False) -> str:
    libs = kafka_streams_libs(kafka_version) if streams else kafka_libs(kafka_version)
    return f"{libs}/*:{interceptor_jar()}:{compiled()}"


class JvmApp:
    """One program as a child process; its stdout lines are collected with their arrival time."""

    def __init__(self, main: str, *args: str, kafka_version: str = CLIENTS_KAFKA_VERSION,
                 streams: bool = False, jvm_opts: tuple[str, ...] = ()) -> None:
        self.name = main
        self.lines: list[tuple[float, str]] = []
        self.stderr = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix=f"lagwatch-{main}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [java_binary(), *JVM_OPTS, *jvm_opts, "-cp", classpath(kafka_version, streams), main, *args],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, preexec_fn=die_with_parent)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.strip()))

    def find(self, word: str) -> list[str] | None:
        """Fields after ``word`` on the first line that starts with it."""
        for _t, line in list(self.lines):
            if line.split(" ", 1)[0] == word:
                return line.split()[1:]
        return None

    def event(self, word: str, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.find(word)
            if got is not None:
                return got
            if self.proc.poll() is not None and self.find(word) is None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode} before {word}:\n"
                                     f"{self.output()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not print {word} within {timeout}s:\n{self.output()[-3000:]}")

    def stats(self) -> list[list[str]]:
        return [line.split()[1:] for _t, line in list(self.lines) if line.startswith("STAT ")]

    def output(self) -> str:
        return Path(self.stderr.name).read_text(errors="replace")

    def stop(self) -> None:
        terminate(self.proc, 15)
        self.stderr.close()
        if os.path.exists(self.stderr.name):
            os.unlink(self.stderr.name)

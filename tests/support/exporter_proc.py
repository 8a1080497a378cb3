"""Run the real exporter (``python -m exporter``) as a subprocess and read what it serves."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from devenv.kafka import die_with_parent, free_port
from devenv.procs import terminate

ROOT = Path(__file__).resolve().parents[2]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


SAMPLE_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def parse_metrics(text: str, only: frozenset[str] | None = None) -> Samples:
    """Every sample of an exposition, keyed by name and labels. With ``only``, just the
    samples of those names: the other lines, comments included, are dropped before the
    parse, which is prometheus_client's pure-Python one and costs per line."""
    if only is not None:  # lines end at "\n" alone: a label value may hold "\r" or "\u2028"
        text = "".join(f"{line}\n" for line in text.split("\n")
                       if (m := SAMPLE_NAME.match(line)) and m.group() in only)
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def select(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    want = set(labels.items())
    return {lab: v for (n, lab), v in samples.items() if n == name and want <= lab}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    got = select(samples, name, **labels)
    if len(got) > 1:
        raise AssertionError(f"{name}{labels} matches {len(got)} series")
    return next(iter(got.values()), None)


class ExporterProcess:
    def __init__(self, bootstrap: str | None, *args: str, config: str | None = None,
                 env: dict[str, str] | None = None, record: str | None = None,
                 port: int | None = None) -> None:
        self.port = port or free_port()  # a port of its own, or (a restart) its predecessor's
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the process
            prefix="lagwatch-exporter-", suffix=".log",
                                               delete=False)
        cmd = [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{self.port}", *args]
        if bootstrap:
            cmd += ["--bootstrap-servers", bootstrap]
        if config:
            cmd += ["--config", config]
        if record:  # tests/support/recorded.py: evaluator inputs for the replay fixtures
            cmd += ["--record", record]
        self.record = record
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, preexec_fn=die_with_parent)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def get(self, path: str, headers: dict[str, str] | None = None, timeout: float = 5
            ) -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def wait_ready(self, timeout: float = 180) -> ExporterProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited {self.proc.returncode}:\n{self.output()}")
            try:
                if self.get("/readyz", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"exporter not ready after {timeout}s:\n{self.output()[-4000:]}")

    def wait_listening(self, timeout: float = 30) -> ExporterProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited {self.proc.returncode}:\n{self.output()}")
            try:
                self.get("/healthz", timeout=2)
                return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"exporter not listening after {timeout}s:\n{self.output()[-4000:]}")

    def metrics(self, only: frozenset[str] | None = None) -> Samples:
        code, body, _ = self.get("/metrics")
        assert code == 200, body
        return parse_metrics(body.decode(), only)

    def api(self, path: str) -> Any:
        code, body, _ = self.get("/api/v1/" + path.lstrip("/"))
        assert code == 200, (code, body)
        return json.loads(body)

    def stop(self) -> int:
        code = terminate(self.proc)
        self.log.close()
        return code

    def __enter__(self) -> ExporterProcess:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop()
        if exc_type is not None:  # show what the exporter said when a test failed
            print(f"--- exporter log ({' '.join(self.cmd[2:])}) ---\n{self.output()[-6000:]}")
        os.unlink(self.log.name)


def group_offsets(samples: Samples, group: str, family: str, topics: Iterable[str] | None = None
                  ) -> dict[tuple[str, int], float]:
    out = {}
    for lab, v in select(samples, family, group=group).items():
        d = dict(lab)
        if topics is None or d["topic"] in topics:
            out[(d["topic"], int(d["partition"]))] = v
    return out

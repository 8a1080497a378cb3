"""Run Debian's real Prometheus (``/usr/bin/prometheus``) on loopback for end-to-end tests.

    with PrometheusProcess(workdir, targets={"lagwatch": ["127.0.0.1:9308"]},
                           rule_files=[rules]) as prom:
        prom.wait_ready()
        prom.query("up")

The configuration is checked with ``promtool check config`` (which also checks
the rule files) before the server starts; the server gets its own storage
directory under ``workdir`` and dies with the process that started it.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from devenv.kafka import die_with_parent, free_port
from devenv.procs import terminate

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
class PromQLError(AssertionError):
    """Prometheus answered a query with an error (bad PromQL, evaluation error, ...)."""


def promtool(*args: str) -> str:
    """Run promtool; fail with its output unless it exits 0."""
    r = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"promtool {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


def finite(value: str) -> bool:
    """A sample value as Prometheus serialises it ("1.5", "NaN", "+Inf") is a finite number."""
    return math.isfinite(float(value))


class PrometheusProcess:
    def __init__(self, workdir: Path | str, targets: Mapping[str, Iterable[str]],
                 rule_files: Iterable[Path | str] = (), scrape_interval: str = "1s",
                 evaluation_interval: str = "1s") -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config = {
            "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                       "evaluation_interval": evaluation_interval},
            "rule_files": [str(Path(f).resolve()) for f in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(addrs)}]}
                               for job, addrs in targets.items()],
        }
        self.config_file = self.dir / "prometheus.yml"
        self.config_file.write_text(yaml.safe_dump(self.config, sort_keys=False))
        promtool("check", "config", str(self.config_file))
        self.log_file = self.dir / "prometheus.log"
        self.cmd = [PROMETHEUS, f"--config.file={self.config_file}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"]
        with open(self.log_file, "wb") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)

    # -- process ---------------------------------------------------------------
    def output(self, tail: int = 4000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 120) -> PrometheusProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}:\n{self.output()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(self.base + "/-/ready", timeout=2) as r:
                if r.status == 200:
                    return self
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready after {timeout}s:\n{self.output()}")

    def stop(self) -> int | None:
        return terminate(self.proc)

    def __enter__(self) -> PrometheusProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP API --------------------------------------------------------------
    def api(self, path: str, params: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
            post: bool = False) -> Any:
        """GET (or form POST) /api/v1/<path>; the ``data`` of a success, else PromQLError."""
        query = urllib.parse.urlencode(list(params.items()) if isinstance(params, Mapping)
                                       else list(params or []))
        url = f"{self.base}/api/v1/{path.lstrip('/')}"
        if post:
            req = urllib.request.Request(url, data=query.encode(),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        else:
            req = urllib.request.Request(url + ("?" + query if query else ""))
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace")
            raise PromQLError(f"{path} {dict(params or {})}: HTTP {e.code}: {body}") from None
        if doc.get("status") != "success":
            raise PromQLError(f"{path} {dict(params or {})}: {doc}")
        return doc["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query: the result vector (scalars and strings are wrapped as one sample)."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", params, post=True)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        if data["resultType"] != "vector":
            raise PromQLError(f"{expr!r}: unexpected result type {data['resultType']}")
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0
                    ) -> list[dict[str, Any]]:
        data = self.api("query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                        "step": f"{step:g}"}, post=True)
        if data["resultType"] != "matrix":
            raise PromQLError(f"{expr!r}: unexpected result type {data['resultType']}")
        return data["result"]

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        """What Grafana's ``label_values(<match>, <label>)`` variable query asks Prometheus for."""
        return self.api(f"label/{urllib.parse.quote(label)}/values",
                        [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")])

    def alerts(self) -> list[dict[str, Any]]:
        return self.api("alerts")["alerts"]

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]


RULES = Path(__file__).resolve().parents[2] / "alerts" / "lagwatch.rules.yml"


def fast_rules(path: Path) -> Path:
    """The shipped alerts, expressions and keep_firing_for untouched, with ``for: 0s``:
    firing from their first true evaluation, as they would after their ``for:``."""
    real = yaml.safe_load(RULES.read_text())
    for g in real["groups"]:
        for r in g["rules"]:
            if "alert" in r:
                r["for"] = "0s"
    path.write_text(yaml.safe_dump(real, sort_keys=False))
    promtool("check", "rules", str(path))
    return path


def firing_evaluations(prom: PrometheusProcess, start: float, end: float) -> dict[tuple[str, str], int]:
    """Per firing group alert, the evaluations in [start, end] it was firing at."""
    out: dict[tuple[str, str], int] = {}
    for s in prom.query_range('ALERTS{alertstate="firing", group!=""}', start, end, step=1.0):
        out[(s["metric"]["alertname"], s["metric"]["group"])] = len(s["values"])
    return out

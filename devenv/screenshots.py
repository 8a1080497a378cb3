"""Pictures for the README from a real run: the status page and Prometheus graphing lagwatch.

    python -m devenv.screenshots [--out docs/images]

Starts ``make demo``'s environment (``python -m devenv.demo``: a local Kafka, the demo
workload, lagwatch and Prometheus), waits until every demo group shows its status and
Prometheus holds a few minutes of samples, then photographs both pages with headless
Chromium. Grafana cannot be installed here; Prometheus's own graph page stands in.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from devenv.demo import CLUSTER

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = {"ok", "lagging", "livelocked", "stalled", "stopped"}
QUERY = "max by (group) (kafka_consumergroup_lag_seconds)"


def _json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def _statuses(exporter: str) -> set[str]:
    try:
        groups = _json(f"{exporter}/api/v1/clusters/{CLUSTER}/groups")
    except (OSError, ValueError):
        return set()
    return {g["status"] for g in groups} if isinstance(groups, list) else set()


def _wait_banner(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    exporter = prometheus = ""
    end = time.monotonic() + timeout
    assert proc.stdout
    for line in proc.stdout:
        if m := re.search(r"status page\s+(\S+)/$", line.rstrip()):
            exporter = m.group(1)
        if m := re.search(r"Prometheus\s+(http://[^/\s]+)", line):
            prometheus = m.group(1)
        if exporter and prometheus:
            return exporter, prometheus
        if time.monotonic() > end:
            break
    raise SystemExit("the demo did not print its URLs")


def _shoot(url: str, out: Path, size: str, budget_ms: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        raise SystemExit("no chromium on PATH (make system-packages installs it)")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={size}", f"--virtual-time-budget={budget_ms}",
                    f"--screenshot={out}", url], check=True, capture_output=True, timeout=120)
    print(f"wrote {out} ({out.stat().st_size} bytes) from {url}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    ap.add_argument("--history", type=float, default=240, help="seconds of samples to graph")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "devenv.demo", "--duration", "900",
                             "--table-every", "60"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        exporter, prometheus = _wait_banner(proc, 300)
        deadline = time.monotonic() + 300
        while not _statuses(exporter) >= EXPECTED:
            if time.monotonic() > deadline:
                raise SystemExit(f"statuses seen: {_statuses(exporter)}")
            time.sleep(2)
        time.sleep(args.history)
        _shoot(f"{exporter}/", args.out / "status-page.png", "1280,500", 3000)
        q = urllib.parse.urlencode({"g0.expr": QUERY, "g0.tab": "0", "g0.range_input": "5m",
                                    "g0.stacked": "0", "g0.show_exemplars": "0"})
        _shoot(f"{prometheus}/graph?{q}", args.out / "prometheus-lag-seconds.png", "1280,1000", 15000)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The Alertmanager example's inhibit rules in a real Alertmanager (alerts/alertmanager.yml).

Starts Debian's prometheus-alertmanager on loopback, posts alerts and polls their states,
so it is not a `unit` test (tests/test_alerts.py holds the static and amtool checks).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from devenv.kafka import free_port
from tests.test_alerts import AM_CONFIG, tool


def _http(url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        raw = r.read()
    return json.loads(raw) if raw.strip() else None


def test_alertmanager_inhibition_rules_live(tmp_path: Path) -> None:
    """Post alerts to a real Alertmanager running the example's inhibit rules."""
    binary = tool("prometheus-alertmanager")
    cfg = yaml.safe_load(AM_CONFIG.read_text())
    # Same routes and inhibit rules; receivers without integrations, so nothing is sent out.
    cfg["receivers"] = [{"name": r["name"]} for r in cfg["receivers"]]
    (tmp_path / "am.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "am.log").open("w"))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/-/ready", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "am.log").read_text()
                assert time.monotonic() < deadline, "alertmanager not ready"
                time.sleep(0.2)

        def alert(name: str, severity: str, **labels: str) -> dict[str, Any]:
            return {"labels": {"alertname": name, "severity": severity, **labels},
                    "annotations": {"summary": "test."}}

        sent = {
            "unreachable": alert("KafkaConsumerLagClusterUnreachable", "critical", cluster="prod",
                                 job="lagwatch", instance="lw-1:9308"),
            "prod_lag": alert("KafkaConsumerGroupLagHigh", "warning", cluster="prod", group="orders"),
            "prod_livelock": alert("KafkaConsumerGroupLivelocked", "critical", cluster="prod",
                                   group="payments"),
            "staging_lag": alert("KafkaConsumerGroupLagHigh", "warning", cluster="staging",
                                 group="orders"),
            "staging_livelock": alert("KafkaConsumerGroupLivelocked", "critical", cluster="staging",
                                      group="payments"),
            "staging_stalled": alert("KafkaConsumerGroupStalled", "warning", cluster="staging",
                                     group="payments"),
            "staging_rewind": alert("KafkaConsumerGroupRewind", "info", cluster="staging",
                                    group="payments"),
            "staging_growing": alert("KafkaConsumerGroupLagGrowing", "warning", cluster="staging",
                                     group="billing"),
            "dev_stale": alert("KafkaConsumerLagDataStale", "warning", cluster="dev",
                               job="lagwatch", instance="lw-2:9308"),
            "dev_spark": alert("KafkaConsumerSparkQueryLagHigh", "warning", cluster="dev",
                               group="clicks"),
            "down_no_cluster": alert("KafkaConsumerLagExporterDown", "critical", job="lagwatch",
                                     instance="lw-3:9308"),
        }
        _http(f"{base}/api/v2/alerts", list(sent.values()))
        expected = {
            "unreachable": "active",
            "prod_lag": "suppressed",        # cluster unreachable
            "prod_livelock": "suppressed",   # also a lag alert of that cluster
            "staging_lag": "active",         # other cluster, other group
            "staging_livelock": "active",
            "staging_stalled": "suppressed", # critical of the same cluster+group
            "staging_rewind": "active",      # info is not inhibited by critical
            "staging_growing": "active",     # another group
            "dev_stale": "active",
            "dev_spark": "suppressed",       # data stale
            "down_no_cluster": "active",     # no cluster label: silences nothing
        }
        by_key = {tuple(sorted(a["labels"].items())): k for k, a in sent.items()}
        deadline = time.monotonic() + 20
        while True:
            got = {}
            for a in _http(f"{base}/api/v2/alerts"):
                labels = dict(a["labels"])
                key = by_key.get(tuple(sorted(labels.items())))
                if key:
                    got[key] = (a["status"]["state"], a["status"]["inhibitedBy"])
            if {k: s for k, (s, _) in got.items()} == expected or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert {k: s for k, (s, _) in got.items()} == expected, got
        assert all(got[k][1] for k, s in expected.items() if s == "suppressed"), got
    finally:
        proc.terminate()
        proc.wait(10)

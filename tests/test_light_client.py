"""The light install: a consumer application with only `lagwatch-client` (and what it pulls in)
reports to a real broker, and the real exporter accepts its reports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from devenv.kafka import KafkaCluster, die_with_parent
from tests.conftest import create_topic, produce, unique, wait_for
from tests.support.dists import Dist, distributions, fresh_venv, pip_install, run
from tests.support.exporter_proc import ExporterProcess

APP = Path(__file__).resolve().parent / "support" / "client_app.py"


def test_light_client_alone_reports_to_the_exporter(dists: dict[str, Dist], kafka: KafkaCluster,
                                                    exporter: ExporterProcess,
                                                    tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "app")
    pip_install(python, dists["lagwatch-client"].wheel)
    assert distributions(python) == {"lagwatch-client", "confluent-kafka"}
    # The exporter's side is absent; the listener's progress parsing works without pyspark,
    # and the listener itself says it needs the driver's pyspark.
    probe = run(python, "-c", """if True:
        import importlib.util, json, spark_metrics
        print([m for m in ("exporter", "prometheus_client", "yaml", "bcrypt", "pyspark")
               if importlib.util.find_spec(m)])
        info = spark_metrics.parse_progress({"id": "q", "runId": "r", "batchId": 3, "sources": [
            {"description": "KafkaV2[Subscribe[t]]", "endOffset": {"t": {"0": 5}}}]})
        print(json.dumps(info.end_offsets))
        try:
            spark_metrics.LagListener
        except ImportError as e:
            print(e.name)
    """).stdout.splitlines()
    assert probe == ["[]", '{"t": {"0": 5}}', "pyspark"], probe

    topic = create_topic(kafka, unique("light"), partitions=2)
    group = unique("light-app")
    produce(kafka, topic, {0: 6, 1: 4})
    app = subprocess.Popen([str(python), str(APP), kafka.bootstrap_servers, topic, group, "10", "0:2,1:3"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, cwd=tmp_path, preexec_fn=die_with_parent)
    try:
        assert app.stdout is not None
        line = app.stdout.readline()
        assert line == "READY\n", (line, app.communicate(timeout=30))

        docs: list[Any] = []

        def reported() -> Any:
            code, body, _ = exporter.get(f"/api/v1/clusters/test/groups/{group}")
            if code != 200:
                return None
            g = json.loads(body)
            docs.append(g)
            parts = {p["partition"]: p for p in g["partitions"] if p["topic"] == topic}
            # positions exist only in the application's reports: the exporter decoded them
            pos = {p: v["position_offset"] for p, v in parts.items()}
            return g if pos == {0: 6, 1: 4} and g["members"] else None

        try:
            g = wait_for(reported, 30, f"{group}'s reported positions on the exporter")
        except AssertionError as e:
            raise AssertionError(f"{e}\nlast document: {docs[-1:]}") from None
        assert {p["partition"]: p["committed_offset"] for p in g["partitions"]} == {0: 2, 1: 3}
        member = g["members"][0]
        assert member["last_poll_age_seconds"] is not None and member["last_poll_age_seconds"] < 5
        out, err = app.communicate("", timeout=30)  # stdin closes: the app closes its consumer
        assert app.returncode == 0 and out == "ERRORS 0\n", (out, err)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()

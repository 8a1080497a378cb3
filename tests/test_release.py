"""Release hygiene: one version, `python -m build` artifacts that twine accepts and that install
and run in fresh virtualenvs (offline, from the wheelhouse `make setup` fills)."""

from __future__ import annotations

import re
import sys
import tarfile
import tomllib
from pathlib import Path

import exporter
import lagwatch_client
from tests.conftest import ROOT_DIR
from tests.support.dists import Dist, distributions, fresh_venv, pip_install, run

VERSION = lagwatch_client.__version__


def test_one_version_source(dists: dict[str, Dist]) -> None:
    for project in (ROOT_DIR / "pyproject.toml", ROOT_DIR / "client" / "pyproject.toml"):
        meta = tomllib.loads(project.read_text())
        assert "version" not in meta["project"] and "version" in meta["project"]["dynamic"]
        assert meta["tool"]["setuptools"]["dynamic"]["version"] == {
            "attr": "lagwatch_client.__version__"}
    assert exporter.__version__ == VERSION and re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    assert dists["lagwatch"].wheel.name == f"lagwatch-{VERSION}-py3-none-any.whl"
    assert dists["lagwatch"].sdist.name == f"lagwatch-{VERSION}.tar.gz"
    assert dists["lagwatch-client"].wheel.name == f"lagwatch_client-{VERSION}-py3-none-any.whl"
    assert dists["lagwatch-client"].sdist.name == f"lagwatch_client-{VERSION}.tar.gz"
    changelog = (ROOT_DIR / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(VERSION)}\]", changelog, re.M), \
        f"CHANGELOG.md has no section for {VERSION}"


def test_twine_accepts_both_distributions(dists: dict[str, Dist]) -> None:
    files = [f for d in dists.values() for f in (d.sdist, d.wheel)]
    out = run(sys.executable, "-m", "twine", "check", "--strict", *files).stdout
    assert out.count("PASSED") == 4, out


def _names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as tar:
        return {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}


def test_sdists_hold_what_they_should(dists: dict[str, Dist]) -> None:
    main = _names(dists["lagwatch"].sdist)
    for f in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "exporter/cli.py",
              "lagwatch_client/wire.py", "spark_metrics/listener.py",
              "alerts/lagwatch.rules.yml", "alerts/runbook.md",
              "dashboards/lagwatch-overview.json"):
        assert f in main, f
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in main)
    client = _names(dists["lagwatch-client"].sdist)
    assert {"pyproject.toml", "README.md", "LICENSE", "lagwatch_client/consumer.py",
            "spark_metrics/listener.py"} <= client
    assert not any(n.startswith(("exporter/", "tests/")) for n in client), sorted(client)


def test_wheel_and_sdist_install_and_run_in_fresh_venvs(dists: dict[str, Dist],
                                                        tmp_path: Path) -> None:
    for kind in ("wheel", "sdist"):  # the sdist is built by pip with setuptools from the wheelhouse
        python = fresh_venv(tmp_path / kind)
        pip_install(python, getattr(dists["lagwatch"], kind))
        assert distributions(python) == {"lagwatch", "confluent-kafka", "prometheus-client",
                                         "pyyaml", "bcrypt", "kafka-python", "numpy", "isal", "orjson"}
        # Kafka's message definitions travel as package data: importing the protocol loads them
        loaded = run(python, "-c", "from exporter.kafka.messages import StreamsGroupDescribeRequest as R;"
                     "print(R.API_KEY)").stdout
        assert loaded == "89\n", (kind, loaded)
        version = run(python.parent / "lagwatch", "--version").stdout
        assert version == f"lagwatch {VERSION}\n", (kind, version)
        usage = run(python, "-m", "exporter", "--help").stdout
        assert usage.startswith("usage: lagwatch") and "--bootstrap-servers" in usage, usage
        where = run(python, "-c", "import exporter; print(exporter.__file__)").stdout
        assert where.startswith(str(tmp_path / kind)), where

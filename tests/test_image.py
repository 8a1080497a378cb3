"""The container image, built without a Docker daemon and run against the real test broker.

``tools/build-image`` builds the top-level Dockerfile on two debootstrapped Debian bookworm bases,
one without and one with Debian's ``python3-pip`` (where PEP 668 makes pip refuse to uninstall
the system pip). For each, the tests read the image's config, look inside its root filesystem,
and run its ENTRYPOINT with ``buildah run`` (chroot isolation, host network, the image's own user
and environment) against the session broker, then scrape ``/metrics`` from the host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import lagwatch_client
from devenv.kafka import KafkaCluster, free_port
from tests.conftest import commit_offsets, create_topic, produce, unique, wait_for
from tests.support.exporter_proc import group_offsets, parse_metrics, select, value
from tests.support.image_build import (
    BASES,
    BUILDAH,
    RUN,
    TAGS,
    alive,
    buildah,
    built,
    config,
    find_exporter,
    http_get,
    ids,
    kill_run,
    working_container,
)

pytestmark = [
    pytest.mark.image,
    # Without `make setup`, a cold build debootstraps the base rootfs first (minutes).
    pytest.mark.timeout(1800),
]

USER_ID = 10001
MAX_IMAGE_BYTES = 250 * 1000 * 1000  # 149 MB when written; pyspark alone would add > 300 MB
FORBIDDEN_DISTS = {"pip", "setuptools", "wheel", "pyspark", "py4j", "spark-metrics", "spark_metrics",
                   "grafanalib", "pytest", "hypothesis", "ruff"}
BUILD_TOOLS = ("pip", "pip3", "gcc", "cc", "c++", "g++", "make", "ld", "curl")


@pytest.fixture(scope="module", params=BASES)
def image(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """The image built on each base (once per session, shared with other modules): tag, inspect JSON."""
    return TAGS[request.param], built(request.param)


@pytest.fixture
def container(image: tuple[str, dict[str, Any]]) -> Iterator[tuple[str, Path]]:
    with working_container(image[0], "lagwatch-image-test") as c:
        yield c


def env_of(image: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in config(image)["Env"])


def site_packages(root: Path) -> list[Path]:
    pats = ("usr/lib/python3*/site-packages", "usr/lib/python3/dist-packages",
            "usr/local/lib/python3*/site-packages", "opt/lagwatch/lib/python3*/site-packages")
    return [p for pat in pats for p in root.glob(pat)]


def distributions(sp: Path) -> set[str]:
    names = {p.name.split("-")[0].lower().replace("_", "-") for p in sp.glob("*.dist-info")}
    return names | {p.name.lower() for p in sp.iterdir() if p.is_dir() and not p.name.endswith("-info")}


def tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


def test_image_config_has_entrypoint_cmd_port_healthcheck_user(image: tuple[str, dict[str, Any]]) -> None:
    cfg = config(image[1])
    assert cfg["Entrypoint"] == ["lagwatch"]
    assert cfg["Cmd"] == ["--listen", "0.0.0.0:9308"]
    assert "9308/tcp" in cfg["ExposedPorts"]
    assert cfg["User"] == f"{USER_ID}:{USER_ID}"
    assert cfg["Labels"]["org.opencontainers.image.version"] == lagwatch_client.__version__
    test = cfg["Healthcheck"]["Test"]
    assert test[0] == "CMD" and test[1] == "/opt/lagwatch/bin/python" and "urllib.request" in test[-1]
    assert cfg["Healthcheck"]["Interval"] > 0 and cfg["Healthcheck"]["Retries"] > 0
    env = env_of(image[1])
    assert env["LAGWATCH_HEALTHCHECK_URL"] == "http://127.0.0.1:9308/healthz"
    assert env["PATH"].startswith("/opt/lagwatch/bin:")
    secretish = [k for k in env if any(w in k.upper() for w in ("PASSWORD", "SECRET", "TOKEN", "SASL"))]
    assert not secretish, f"secrets in the image environment: {secretish}"
    # Multi-stage: none of the builder's steps (venv, pip install) is in the final image's history.
    history = " ".join(h.get("created_by", "") for h in image[1]["History"])
    assert "pip install" not in history and "python3 -m venv" not in history


def test_image_holds_the_exporter_and_no_build_tools(container: tuple[str, Path]) -> None:
    name, root = container
    bin_dirs = [root / d for d in ("usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin",
                                   "opt/lagwatch/bin")]
    present = [str(d / t) for d in bin_dirs for t in BUILD_TOOLS if (d / t).exists()]
    assert not present, f"build tools in the final image: {present}"

    venv = list(root.glob("opt/lagwatch/lib/python3*/site-packages"))
    assert len(venv) == 1, venv
    have = distributions(venv[0])
    assert {"lagwatch", "exporter", "confluent-kafka", "prometheus-client", "pyyaml"} <= have, have
    for sp in site_packages(root):
        bad = FORBIDDEN_DISTS & distributions(sp)
        assert not bad, f"{sp.relative_to(root)} holds {sorted(bad)}"
    assert not list(root.glob("usr/share/python-wheels/*.whl")), "ensurepip's pip wheel is in the image"
    # Debian's installer packages (on the bookworm-pip base) are purged through dpkg, not deleted
    # behind its back.
    installed = {e.split("\n", 1)[0].removeprefix("Package: ")
                 for e in (root / "var/lib/dpkg/status").read_text().split("\n\n")
                 if "\nStatus: install ok installed" in e}
    assert "python3" in installed
    assert not installed & {"python3-pip", "python3-setuptools", "python3-wheel"}, installed
    for leftover in ("root/.cache/pip", "src", "tmp/wheels", "tmp/requirements.txt"):
        assert not (root / leftover).exists(), f"/{leftover} from the build stage is in the final image"
    size = tree_bytes(root)
    assert size < MAX_IMAGE_BYTES, f"image root filesystem is {size / 1e6:.0f} MB"

    # What the image's user gets: the exporter imports, pip does not.
    r = buildah(*RUN, name, "--", "python", "-c",
                "import confluent_kafka, prometheus_client, yaml, exporter.cli; import pip", check=False)
    assert r.returncode != 0 and "No module named 'pip'" in r.stderr, r.stdout + r.stderr
    r = buildah(*RUN, name, "--", "lagwatch", "--version")
    assert r.stdout.strip() == f"lagwatch {lagwatch_client.__version__}"


def test_entrypoint_serves_real_lag_from_the_broker(image: tuple[str, dict[str, Any]],
                                                    container: tuple[str, Path],
                                                    kafka: KafkaCluster, tmp_path: Path) -> None:
    name, root = container
    topic = create_topic(kafka, unique("image"), partitions=3)
    produce(kafka, topic, {0: 10, 1: 20, 2: 5})
    group = unique("image-g")
    commit_offsets(kafka.bootstrap_servers, group, topic, {0: 4, 1: 20, 2: 2})

    port = free_port()
    listen = f"127.0.0.1:{port}"
    base = f"http://{listen}"
    cfg = config(image[1])
    health = cfg["Healthcheck"]["Test"][1:]
    # The health check reads its URL from the environment; point it at this run's port.
    buildah("config", "--env", f"LAGWATCH_HEALTHCHECK_URL={base}/healthz", name)
    r = buildah(*RUN, name, "--", *health, check=False)
    assert r.returncode != 0, "the health check passes with no server listening"

    # ENTRYPOINT + default CMD + this run's arguments. (`docker run IMAGE ARGS` replaces CMD; keeping
    # it here also checks that the default CMD parses. The later --listen wins.)
    cmd = [*BUILDAH, *RUN, name, "--", *cfg["Entrypoint"], *cfg["Cmd"],
           "--bootstrap-servers", kafka.bootstrap_servers, "--listen", listen, "--interval", "1"]
    log = tmp_path / "lagwatch.log"
    pid = None
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def output() -> str:
        return log.read_text(errors="replace")[-4000:]

    try:
        def started() -> int | None:
            assert proc.poll() is None, f"buildah run exited {proc.returncode}:\n{output()}"
            return find_exporter(proc.pid, listen)

        pid = wait_for(started, 60, "the exporter process under buildah run")
        uids, gids = ids(pid)
        assert uids == {USER_ID} and gids == {USER_ID}, (uids, gids)
        # buildah bind-mounts the container's rootfs elsewhere for the chroot: same directory inode.
        inside, image_root = os.stat(f"/proc/{pid}/root"), root.stat()
        assert (inside.st_dev, inside.st_ino) == (image_root.st_dev, image_root.st_ino), \
            "the exporter does not run on the image's root filesystem"

        wait_for(lambda: http_get(base + "/healthz", 2)[0] == 200, 60, f"/healthz\n{output()}")
        assert buildah(*RUN, name, "--", *health, check=False).returncode == 0, "health check fails"

        want_committed = {(topic, 0): 4, (topic, 1): 20, (topic, 2): 2}

        def scraped() -> Any:
            code, body = http_get(base + "/metrics")
            assert code == 200, body
            m = parse_metrics(body.decode())
            got = group_offsets(m, group, "kafka_consumergroup_committed_offset", [topic])
            return m if got == want_committed else None

        m = wait_for(scraped, 90, f"the group's committed offsets on /metrics\n{output()}")
        assert value(m, "lagwatch_up", cluster="default") == 1
        assert group_offsets(m, group, "kafka_consumergroup_lag_offsets", [topic]) == {
            (topic, 0): 6, (topic, 1): 0, (topic, 2): 3}
        hw = {int(dict(lab)["partition"]): v
              for lab, v in select(m, "kafka_partition_high_watermark_offset", topic=topic).items()}
        assert hw == {0: 10, 1: 20, 2: 5}
        assert value(m, "kafka_consumergroup_lag_offsets_sum", group=group) == 9
        assert http_get(base + "/readyz")[0] == 200

        # Stop it the way a container runtime does: SIGTERM to the entrypoint process.
        os.kill(pid, signal.SIGTERM)
        assert proc.wait(30) == 0, output()
        assert "shutting down" in output()
        assert not alive(pid)
    finally:
        kill_run(proc, pid)

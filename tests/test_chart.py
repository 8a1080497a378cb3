"""The Helm chart (deploy/lagwatch) and the plain manifests rendered from it (deploy/manifests).

Helm is built from its Go module by tools/install-helm (Debian has no package). Rendered objects
are validated by maintained validators, not by hand: the built-in kinds by kubernetes-validate
(the Kubernetes OpenAPI schemas, strict: unknown fields are errors) for the oldest and newest
Kubernetes the chart supports; the Prometheus Operator kinds, for which no such schema package
exists, by tools/crcheck, which decodes them strictly into the operator's own Go API types (unknown
fields and wrong structure are errors; unlike the CRD schema it lets a number pass for a string and
does not check patterns such as the duration format); and the rules of the PrometheusRule by
promtool. Last, the container the chart declares (its args,
env, mounts, user, ports and probes) runs from the built image against the session broker, is
probed on the chart's probe paths and scraped the way its ServiceMonitor says.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bcrypt
import kubernetes_validate
import pytest
import yaml

from devenv.kafka import KafkaCluster, free_port
from exporter.config import build_config
from tests.conftest import commit_offsets, create_topic, produce, unique, wait_for
from tests.support.exporter_proc import group_offsets, parse_metrics, value
from tests.support.image_build import (
    BUILDAH,
    RUN,
    TAGS,
    built,
    config,
    find_exporter,
    http_get,
    ids,
    kill_run,
    working_container,
)

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "lagwatch"
EXAMPLES = sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
RULES = ROOT / "alerts" / "lagwatch.rules.yml"
DASHBOARDS = sorted((ROOT / "dashboards").glob("lagwatch-*.json"))
# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.25.0", kubernetes_validate.utils.latest_version())
CR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
EVERYTHING = ["serviceMonitor.enabled=true", "podMonitor.enabled=true", "prometheusRule.enabled=true",
              "dashboards.enabled=true", "serviceAccountToken.enabled=true"]


@pytest.fixture(scope="module")
def helm() -> str:
    # Built once by `make setup`; a fresh build takes minutes on a busy machine.
    r = subprocess.run([str(ROOT / "tools" / "install-helm")], capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture(scope="module")
def crcheck() -> str:
    r = subprocess.run([str(ROOT / "tools" / "build-crcheck")], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def render(helm: str, *sets: str, values: list[Path] | None = None, check: bool = True
           ) -> subprocess.CompletedProcess[str]:
    cmd = [helm, "template", "lagwatch", str(CHART)]
    for v in values or []:
        cmd += ["-f", str(v)]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, f"helm template {' '.join(cmd[4:])}: {r.stderr}"
    return r


def objects(helm: str, *sets: str, values: list[Path] | None = None) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(helm, *sets, values=values).stdout) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def config_text(docs: list[dict[str, Any]]) -> str:
    """lagwatch's configuration file as the chart's ConfigMap holds it."""
    return next(d for d in docs if d["metadata"]["name"] == "lagwatch-config")["data"]["lagwatch.yml"]


def validate(docs: list[dict[str, Any]], crcheck: str, tmp_path: Path) -> list[str]:
    """Every object through a validator that knows its kind; returns the errors."""
    errors = []
    crs = [d for d in docs if d["kind"] in CR_KINDS]
    for d in docs:
        if d["kind"] in CR_KINDS:
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(d, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{d['kind']} {d['metadata']['name']} (Kubernetes {version}): "
                              f"{'.'.join(map(str, e.path))}: {e.message}")
    if crs:
        path = tmp_path / f"crs-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump_all(crs))
        r = subprocess.run([crcheck, str(path)], capture_output=True, text=True, timeout=60)
        valid = r.stdout.count(": valid ")
        if r.returncode != 0 or valid != len(crs):
            errors.append(f"crcheck ({valid} of {len(crs)} valid): {r.stdout}{r.stderr}")
    return errors


# -- lint and render ---------------------------------------------------------------------------

@pytest.mark.parametrize("values", [None, *EXAMPLES], ids=lambda v: v.name if v else "defaults")
def test_helm_lint_passes_strict(helm: str, values: Path | None) -> None:
    cmd = [helm, "lint", "--strict", str(CHART)] + (["-f", str(values)] if values else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "1 chart(s) linted, 0 chart(s) failed" in r.stdout, r.stdout + r.stderr
    assert "[ERROR]" not in r.stdout and "[WARNING]" not in r.stdout, r.stdout


@pytest.mark.parametrize("case", ["defaults", "everything", "existing-configmap", "replicas",
                                  *(p.name for p in EXAMPLES)])
def test_rendered_objects_are_valid_kubernetes_objects(helm: str, crcheck: str, tmp_path: Path,
                                                       case: str) -> None:
    sets: list[str] = []
    values: list[Path] = []
    if case == "everything":
        sets = EVERYTHING
    elif case == "replicas":
        sets = [*EVERYTHING, "replicaCount=3"]
    elif case == "existing-configmap":
        sets = ["existingConfigMap=my-lagwatch-config", "existingConfigMapKey=config.yaml"]
    elif case != "defaults":
        values = [ROOT / "deploy" / "examples" / case]
    docs = objects(helm, *sets, values=values)
    kinds = sorted(d["kind"] for d in docs)
    assert {"Deployment", "Service", "ServiceAccount"} <= set(kinds), kinds
    assert validate(docs, crcheck, tmp_path) == []
    if case == "existing-configmap":
        dep = one(docs, "Deployment")["spec"]["template"]["spec"]
        vol = next(v for v in dep["volumes"] if v["name"] == "config")
        assert vol["configMap"] == {"name": "my-lagwatch-config",
                                    "items": [{"key": "config.yaml", "path": "lagwatch.yml"}]}
        assert "ConfigMap" not in kinds


def test_the_validators_reject_broken_objects(helm: str, crcheck: str, tmp_path: Path) -> None:
    """The validation above can fail: one wrong field per kind is caught."""
    docs = objects(helm, *EVERYTHING)
    broken = []
    for d in docs:
        d = json.loads(json.dumps(d))
        if d["kind"] == "Deployment":
            d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pathh"] = "/healthz"
        elif d["kind"] == "Service":
            d["spec"]["ports"][0]["port"] = "http"
        elif d["kind"] == "ServiceMonitor":
            d["spec"]["endpoints"][0]["scrapeTimout"] = "10s"
        elif d["kind"] == "PodMonitor":
            d["spec"]["podMetricsEndpoints"][0]["honorLabel"] = True  # honorLabels
        elif d["kind"] == "PrometheusRule":
            d["spec"]["groups"][0]["rules"][0]["for"] = ["10m"]
        else:
            continue
        broken.append(d)
    errors = "\n".join(validate(broken, crcheck, tmp_path))
    for what in ("Deployment lagwatch", "Service lagwatch", "scrapeTimout", "INVALID PodMonitor",
                 "INVALID PrometheusRule"):
        assert what in errors, f"{what!r} not reported:\n{errors}"


def test_deployment_is_non_root_read_only_with_requests_and_probes(helm: str) -> None:
    dep = one(objects(helm), "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert set(c["resources"]["requests"]) == {"cpu", "memory"}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["automountServiceAccountToken"] is False
    # /tmp is the only writable path.
    writable = [m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly")]
    assert writable == ["/tmp"]


def test_secrets_come_from_secrets_never_from_values(helm: str) -> None:
    example = ROOT / "deploy" / "examples" / "several-clusters.yaml"
    docs = objects(helm, values=[example])
    assert "Secret" not in {d["kind"] for d in docs}, "the chart must not create Secrets from values"
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["LAGWATCH_KAFKA_EU_PASSWORD"] == {
        "name": "LAGWATCH_KAFKA_EU_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "lagwatch-kafka-eu", "key": "password"}}}
    assert all("valueFrom" in e for e in env.values()), env
    cfg = config_text(docs)
    assert "${LAGWATCH_KAFKA_EU_PASSWORD}" in cfg
    sm = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert sm["basicAuth"] == {"username": {"name": "lagwatch-scrape", "key": "username"},
                               "password": {"name": "lagwatch-scrape", "key": "password"}}
    assert sm["scheme"] == "https"
    # The chart owns listen and web_config: a config setting them is refused at render time.
    r = render(helm, "config.listen=0.0.0.0:1234", check=False)
    assert r.returncode != 0 and "config.listen is set by the chart" in r.stderr


@pytest.mark.parametrize(("setting", "error"), [
    ("serviceMonitor.enabeld=true", "additional properties 'enabeld' not allowed"),
    ("service.port=http", "/service/port"),
    ("secretEnv.PASSWORD.secretName=kafka", "missing property 'key'"),
])
def test_values_schema_refuses_typos(helm: str, setting: str, error: str) -> None:
    """values.schema.json: a mistyped key fails the install instead of being silently ignored."""
    r = render(helm, setting, check=False)
    assert r.returncode != 0 and error in r.stderr, r.stderr


def test_kafka_token_is_projected_from_the_service_account(helm: str) -> None:
    """serviceAccountToken: the pod's own token for the brokers' audience, mounted where a
    cluster's oauthbearer_token_file points; off by default, and never a Secret."""
    assert "kafka-token" not in render(helm).stdout
    docs = objects(helm, "serviceAccountToken.enabled=true", "serviceAccountToken.audience=msk-test",
                   "serviceAccountToken.expirationSeconds=1200")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (vol,) = [v for v in pod["volumes"] if v["name"] == "kafka-token"]
    assert vol["projected"]["sources"] == [{"serviceAccountToken": {
        "audience": "msk-test", "expirationSeconds": 1200, "path": "token"}}]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "kafka-token"]
    assert mount == {"name": "kafka-token", "mountPath": "/var/run/secrets/lagwatch/kafka", "readOnly": True}
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_prometheus_rule_is_the_alerts_file(helm: str, tmp_path: Path) -> None:
    rule = one(objects(helm, "prometheusRule.enabled=true", "prometheusRule.labels.release=kps"),
               "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    source = yaml.safe_load(RULES.read_text())
    assert rule["spec"]["groups"] == source["groups"]
    assert sum(len(g["rules"]) for g in rule["spec"]["groups"]) >= 10
    # What the operator hands Prometheus is a valid rule file for promtool.
    path = tmp_path / "from-chart.rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_monitors_set_the_job_the_alerts_expect(helm: str) -> None:
    docs = objects(helm, "serviceMonitor.enabled=true", "podMonitor.enabled=true")
    for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        (ep,) = one(docs, kind)["spec"][key]
        assert ep["port"] == "http" and ep["path"] == "/metrics"
        assert {"action": "replace", "targetLabel": "job", "replacement": "lagwatch"} in ep["relabelings"]
    assert 'up{job="lagwatch"}' in RULES.read_text()


def test_replicas_share_the_groups_behind_a_disruption_budget(helm: str, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """replicaCount 3: every cluster of the configuration gets state.replicas (the replicas
    share its groups), a PodDisruptionBudget lets a drain stop one replica at a time, and
    both monitors scrape each pod (each serves only its own groups). One replica renders
    neither, and a cluster that turns its state off cannot be shared: the render says so."""
    example = ROOT / "deploy" / "examples" / "several-clusters.yaml"
    docs = objects(helm, "replicaCount=3", "podMonitor.enabled=true", values=[example])
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 3
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": dep["spec"]["selector"]}
    monkeypatch.setenv("LAGWATCH_KAFKA_EU_PASSWORD", "not-a-secret")  # the example's ${VAR}
    cfg = build_config(yaml.safe_load(config_text(docs)), {})
    assert [(c.name, c.state_replicas, c.state_enabled) for c in cfg.clusters] == [
        ("prod-us", True, True), ("prod-eu", True, True)]
    # the user's own settings of a cluster stay, next to state.replicas
    assert cfg.clusters[1].interval == 15 and cfg.clusters[0].filters.group_deny is not None
    for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
        (ep,) = one(docs, kind)["spec"][key]
        # a target per pod: nothing rewrites the instance label that tells the replicas apart
        assert not [r for r in ep.get("relabelings", []) if r.get("targetLabel") in ("instance", "pod")]
    single = objects(helm, values=[example])
    assert "PodDisruptionBudget" not in {d["kind"] for d in single}
    assert "replicas" not in config_text(single)
    r = render(helm, "replicaCount=2", "config.clusters[0].name=a",
               "config.clusters[0].bootstrap_servers=k:9092", "config.clusters[0].state.enabled=false",
               check=False)
    assert r.returncode != 0 and "cluster a turns off state.enabled or state.replicas" in r.stderr, r.stderr


def test_dashboards_are_configmaps_for_grafanas_sidecar(helm: str) -> None:
    docs = [d for d in objects(helm, "dashboards.enabled=true", "dashboards.annotations.grafana_folder=Kafka")
            if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]
    assert len(docs) == len(DASHBOARDS) == 3
    by_file = {}
    for d in docs:
        assert d["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert d["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
        (name, text), = d["data"].items()
        by_file[name] = json.loads(text)
    assert by_file == {p.name: json.loads(p.read_text()) for p in DASHBOARDS}


def test_plain_manifests_are_rendered_from_the_chart(helm: str) -> None:
    r = subprocess.run([str(ROOT / "tools" / "render-manifests"), "--check"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    kinds = {}
    for f in sorted((ROOT / "deploy" / "manifests").glob("*.yaml")):
        kinds[f.name] = sorted(d["kind"] for d in yaml.safe_load_all(f.read_text()) if d)
    assert kinds == {
        "dashboards.yaml": ["ConfigMap"] * 3,
        "lagwatch.yaml": ["ConfigMap", "Deployment", "Service", "ServiceAccount"],
        "monitoring.yaml": ["PrometheusRule", "ServiceMonitor"],
    }


# -- the rendered container, run from the image --------------------------------------------------

class Pod:
    """The chart's container run the way a kubelet would: ``buildah run`` of the built image with
    the container's args after the image's ENTRYPOINT, its env (Secret references resolved from
    the Secrets the operator created), its volume mounts, user and dropped capabilities."""

    def __init__(self, docs: list[dict[str, Any]], secrets: dict[str, dict[str, str]], image: dict[str, Any],
                 tmp_path: Path) -> None:
        spec = one(docs, "Deployment")["spec"]["template"]["spec"]
        (self.c,) = spec["containers"]
        ctx = {**spec.get("securityContext", {}), **self.c.get("securityContext", {})}
        self.uid, self.gid = ctx["runAsUser"], ctx["runAsGroup"]
        self.opts = ["--user", f"{self.uid}:{self.gid}"]
        self.opts += [a for cap in ctx["capabilities"]["drop"] for a in ("--cap-drop", cap)]
        configmaps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
        volumes = {v["name"]: v for v in spec["volumes"]}
        for m in self.c["volumeMounts"]:
            vol = volumes[m["name"]]
            if "emptyDir" in vol:
                self.opts += ["--mount", f"type=tmpfs,destination={m['mountPath']}"]
                continue
            if "configMap" in vol:
                data = configmaps[vol["configMap"]["name"]]
                files = {i["path"]: data[i["key"]] for i in vol["configMap"]["items"]}
            else:
                files = secrets[vol["secret"]["secretName"]]
            d = tmp_path / m["name"]
            d.mkdir(parents=True)
            for fname, text in files.items():
                (d / fname).write_text(text)
                os.chmod(d / fname, 0o644)
            os.chmod(d, 0o755)
            self.opts += ["-v", f"{d}:{m['mountPath']}:{'ro' if m.get('readOnly') else 'rw'}"]
        self.env = list(config(image)["Env"])
        for e in self.c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            val = secrets[ref["name"]][ref["key"]] if ref else e["value"]
            self.opts += ["-e", f"{e['name']}={val}"]
            self.env.append(f"{e['name']}={val}")
        self.ports = {p["name"]: p["containerPort"] for p in self.c["ports"]}
        self.command = [*config(image)["Entrypoint"], *self.c["args"]]
        self.pid = 0  # the container's process, once started
        self.last_probe = ""

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run a command in the running container (its mounts and root, user, env), as the
        kubelet runs an exec probe."""
        assert self.pid, "the container is not running"
        return subprocess.run(["nsenter", f"--target={self.pid}", "--mount", "--root", "--wd",
                               f"--setuid={self.uid}", f"--setgid={self.gid}",
                               "/usr/bin/env", "-i", *self.env, *command],
                              capture_output=True, text=True, timeout=30)

    def http(self, probe: dict[str, Any], headers: dict[str, str] | None = None) -> int:
        get = probe["httpGet"]
        port = self.ports.get(get["port"], get["port"])
        return http_get(f"{get['scheme'].lower()}://127.0.0.1:{port}{get['path']}", 3, headers)[0]

    def probe(self, probe: dict[str, Any]) -> bool:
        if "exec" in probe:
            r = self.exec(*probe["exec"]["command"])
            self.last_probe = f"exit {r.returncode}: {r.stdout}{r.stderr}"[-3000:]
            return r.returncode == 0
        return 200 <= self.http(probe) < 400


# Files buildah bind-mounts over in every container it runs.
RUNTIME_FILES = ("run/.containerenv", "etc/hosts", "etc/resolv.conf", "etc/hostname")


@contextlib.contextmanager
def read_only(root: Path, mountpoints: list[str]) -> Iterator[Callable[[], None]]:
    """Make a working container's root filesystem read-only, as readOnlyRootFilesystem does;
    yields a function that makes it writable again.

    The runtime's mount points are created first, as any container runtime does in its own
    writable layer before it starts the process. buildah's own clean-up after the process exits
    needs a writable root (it panics otherwise), so the test calls the function before stopping
    the exporter."""
    for d in mountpoints:
        (root / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for f in RUNTIME_FILES:
        (root / f).touch(exist_ok=True)
    subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(root)], check=True)
        yield lambda: subprocess.run(["mount", "-o", "remount,bind,rw", str(root)], check=True)
    finally:
        subprocess.run(["umount", str(root)], check=True)


def rendered_container_runs_from_the_image(helm: str, kafka: KafkaCluster, tmp_path: Path,
                                           auth: bool) -> None:
    """The rendered pod, run from the image (the test is in tests/test_image_chart.py)."""
    image = built("bookworm")
    topic = create_topic(kafka, unique("chart"), partitions=2)
    produce(kafka, topic, {0: 7, 1: 3})
    group = unique("chart-g")
    commit_offsets(kafka.bootstrap_servers, group, topic, {0: 2, 1: 3})

    port = free_port()
    suffix = uuid.uuid4().hex[:8]
    # The Secrets an operator creates with kubectl; the values only name them.
    secrets = {"lagwatch-ids": {"client-id": f"chart-test-{suffix}"}}
    values: dict[str, Any] = {
        "service": {"port": port},
        "config": {"interval": 1, "request_timeout": 5,
                   "clusters": [{"name": "test", "bootstrap_servers": kafka.bootstrap_servers,
                                 "client": {"client.id": "${LAGWATCH_CLIENT_ID}"}}]},
        "secretEnv": {"LAGWATCH_CLIENT_ID": {"secretName": "lagwatch-ids", "key": "client-id"}},
        "serviceMonitor": {"enabled": True},
    }
    password = f"pw-{suffix}"
    if auth:
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
        secrets["lagwatch-web"] = {"web.yml": yaml.safe_dump({"basic_auth_users": {"prometheus": hashed}})}
        secrets["lagwatch-scrape"] = {"username": "prometheus", "password": password}
        values["webConfig"] = {"secretName": "lagwatch-web", "basicAuthSecretName": "lagwatch-scrape"}
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    docs = objects(helm, values=[values_file])
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    # ServiceMonitor port (a Service port name) -> the Service's targetPort (a container port name).
    (svc_port,) = [p for p in one(docs, "Service")["spec"]["ports"] if p["name"] == endpoint["port"]]

    with working_container(TAGS["bookworm"], "lagwatch-chart-test") as (name, root):
        pod = Pod(docs, secrets, image, tmp_path)
        assert pod.command[:3] == ["lagwatch", "--config", "/etc/lagwatch/config/lagwatch.yml"]
        with read_only(root, [m["mountPath"] for m in pod.c["volumeMounts"]]) as writable:
            log = tmp_path / "lagwatch.log"

            def launch() -> subprocess.Popen:
                with log.open("wb") as out:
                    return subprocess.Popen([*BUILDAH, *RUN, *pod.opts, name, "--", *pod.command],
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

            def output() -> str:
                return log.read_text(errors="replace")[-4000:]

            proc, relaunches = launch(), 2
            pid = None
            try:
                def started() -> int | None:
                    nonlocal proc, relaunches
                    if proc.poll() is not None and "panic:" in output() and relaunches:
                        # buildah itself crashed before starting the container (a Go panic in
                        # buildah run, seen under load): the pod was never started, run it again.
                        relaunches -= 1
                        proc = launch()
                        return None
                    assert proc.poll() is None, f"buildah run exited {proc.returncode}:\n{output()}"
                    return find_exporter(proc.pid, f"0.0.0.0:{port}")

                pid = pod.pid = wait_for(started, 60, "the exporter process under buildah run")
                assert ids(pid) == ({pod.uid}, {pod.gid})
                # The root filesystem is read-only for it, as readOnlyRootFilesystem makes it.
                r = pod.exec("/opt/lagwatch/bin/python", "-c", "open('/opt/lagwatch/x', 'w')")
                assert r.returncode != 0 and "Read-only file system" in r.stderr, r.stdout + r.stderr

                # Probed on the paths the chart declares; scraped the way its ServiceMonitor says.
                wait_for(lambda: pod.probe(pod.c["livenessProbe"]), 60, f"the liveness probe\n{output()}")
                try:
                    wait_for(lambda: pod.probe(pod.c["readinessProbe"]), 60, "the readiness probe")
                except AssertionError as e:
                    raise AssertionError(f"{e}\n{getattr(pod, 'last_probe', '')}\n{output()}") from None
                headers = {}
                if auth:
                    assert "exec" in pod.c["readinessProbe"]
                    creds = {k: secrets[ref["name"]][ref["key"]] for k, ref in endpoint["basicAuth"].items()}
                    token = base64.b64encode(f"{creds['username']}:{creds['password']}".encode()).decode()
                    headers = {"Authorization": f"Basic {token}"}
                    # The probe really authenticates: with a wrong password it fails.
                    secrets["lagwatch-scrape"]["password"] = "wrong"
                    wrong = Pod(docs, secrets, image, tmp_path / "wrong")
                    wrong.pid = pid
                    assert not wrong.probe(pod.c["readinessProbe"])
                    assert "HTTP Error 401" in wrong.last_probe, wrong.last_probe
                else:
                    assert pod.c["readinessProbe"]["httpGet"]["path"] == "/readyz"
                url = f"{endpoint['scheme']}://127.0.0.1:{pod.ports[svc_port['targetPort']]}{endpoint['path']}"
                assert http_get(url)[0] == (401 if auth else 200)

                want = {"kafka_consumergroup_committed_offset": {(topic, 0): 2, (topic, 1): 3},
                        "kafka_consumergroup_lag_offsets": {(topic, 0): 5, (topic, 1): 0}}
                last: dict[str, Any] = {}

                def scraped() -> Any:
                    code, body = http_get(url, 5, headers)
                    assert code == 200, body
                    m = parse_metrics(body.decode())
                    last.update({n: group_offsets(m, group, n, [topic]) for n in want},
                                errors={k: v for k, v in m.items() if k[0] == "lagwatch_errors_total" and v})
                    return m if all(last[n] == w for n, w in want.items()) else None

                # Eventually: a cycle may fail to read a partition's HW (the error is counted,
                # the lag stays unknown until one reads it).
                try:
                    m = wait_for(scraped, 90, "the group's offsets and lag on /metrics")
                except AssertionError as e:
                    raise AssertionError(f"{e}\n{last}\n{output()}") from None
                assert value(m, "lagwatch_up", cluster="test") == 1

                writable()
                os.kill(pid, signal.SIGTERM)  # what the kubelet sends first
                assert proc.wait(30) == 0, output()
                assert password not in output()
            finally:
                kill_run(proc, pid)


def test_the_readme_install_command_renders_what_it_promises(helm: str, crcheck: str, tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Deploy on Kubernetes"):]
    m = re.search(r"^helm install (.*?[^\\])$", section.replace("\\\n", " "), re.M)
    assert m, "no helm install command in the README's deploy section"
    args = shlex.split(m.group(1))
    r = subprocess.run([helm, "template", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ServiceAccount", "ConfigMap", "Service", "Deployment", "ServiceMonitor",
                            "PrometheusRule", "ConfigMap", "ConfigMap", "ConfigMap"]), kinds
    assert validate(docs, crcheck, tmp_path) == []
    cfg = yaml.safe_load(config_text(docs))
    assert cfg["clusters"] == [{"name": "prod", "bootstrap_servers": "my-cluster-kafka-bootstrap.kafka:9092"}]
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "registry.example.com/lagwatch:0.1.0"
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"

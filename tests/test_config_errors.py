"""Bad configuration never starts the exporter: one line naming the field, exit code 2.

Table-driven over YAML files, web config files and CLI flags. Every case runs the
real CLI (``python -m exporter ...``) in a process of its own and checks the whole
contract: exit code 2, nothing on stdout, exactly one line on stderr of the form
``lagwatch: configuration error: <field>: <problem>`` with the expected field,
and no traceback. The processes are forked, one after another, from one interpreter that
imported the CLI once (tests/support/cli_forks.py: the import is most of what a fresh
interpreter costs); the assertions are one test per case.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devenv.kafka import free_port
from tests.support.cli_forks import CliForks
from tests.support.exporter_proc import ROOT, ExporterProcess, parse_metrics

pytestmark = pytest.mark.unit  # no broker: runs with `make test-unit`

PREFIX = "lagwatch: configuration error: "
# One valid cluster; cases add keys around it.
CLUSTER = "clusters:\n  - name: a\n    bootstrap_servers: 127.0.0.1:9092\n"
# A bcrypt hash (cost 4) of "x", fine for a config that must parse.
HASH = "$2b$04$hEd8O6aEiPDmQz.m/Z/CGOzlCSLZuBeIx.Xa.tMzg3INtQahfPdhG"


@dataclass(frozen=True)
class Case:
    id: str
    field: str  # the exact field the one stderr line must name ({d} = the case's directory)
    yaml: str | bytes | None = None  # written to {d}/c.yml and passed with --config
    argv: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # extra files in {d}


def cl(extra: str) -> str:
    """The valid cluster with extra (already indented) cluster keys."""
    return CLUSTER + extra


def web(body: str) -> dict[str, str]:
    return {"web.yml": body}


WEB_ARGS = ("--bootstrap-servers", "127.0.0.1:9092", "--web-config", "{d}/web.yml")

CASES: list[Case] = [
    # -- unknown keys ----------------------------------------------------------
    Case("unknown-top-key", "bogus", "bogus: 1\n" + CLUSTER),
    Case("unknown-cluster-key", "clusters[0].bogus", cl("    bogus: 1\n")),
    Case("unknown-threshold-key", "thresholds.stal_after", "thresholds: {stal_after: 5}\n" + CLUSTER),
    Case("unknown-groups-key", "clusters[0].groups.allw", cl("    groups: {allw: x}\n")),
    Case("unknown-reports-key", "clusters[0].reports.tpic", cl("    reports: {tpic: x}\n")),
    # -- wrong shapes ----------------------------------------------------------
    Case("thresholds-not-mapping", "thresholds", "thresholds: 5\n" + CLUSTER),
    Case("clusters-empty", "clusters", "clusters: []\n"),
    Case("clusters-mapping", "clusters", "clusters: {name: a}\n"),
    Case("cluster-not-mapping", "clusters[0]", "clusters:\n  - just-a-string\n"),
    Case("no-cluster-at-all", "clusters", "log_level: INFO\n"),
    Case("empty-file", "clusters", ""),
    Case("client-not-mapping", "clusters[0].client", cl("    client: sasl\n")),
    Case("client-value-list", "clusters[0].client.sasl.mechanism",
         cl("    client: {sasl.mechanism: [PLAIN]}\n")),
    Case("client-value-null", "clusters[0].client.sasl.password",
         cl("    client: {sasl.password: null}\n")),
    # -- intervals and timeouts --------------------------------------------------
    Case("interval-string", "interval", "interval: fast\n" + CLUSTER),
    Case("interval-zero", "interval", "interval: 0\n" + CLUSTER),
    Case("interval-nan", "interval", "interval: .nan\n" + CLUSTER),
    Case("interval-bool", "interval", "interval: true\n" + CLUSTER),
    Case("interval-list", "interval", "interval: [1]\n" + CLUSTER),
    Case("cluster-interval-negative", "clusters[0].interval", cl("    interval: -5\n")),
    Case("cluster-interval-inf", "clusters[0].interval", cl("    interval: .inf\n")),
    Case("cluster-interval-tiny", "clusters[0].interval", cl("    interval: 0.001\n")),
    Case("request-timeout-zero", "request_timeout", "request_timeout: 0\n" + CLUSTER),
    Case("cluster-request-timeout-negative", "clusters[0].request_timeout",
         cl("    request_timeout: -1\n")),
    # -- thresholds ------------------------------------------------------------
    Case("stall-after-negative", "thresholds.stall_after", "thresholds: {stall_after: -1}\n" + CLUSTER),
    Case("livelock-after-zero", "thresholds.livelock_after",
         "thresholds: {livelock_after: 0}\n" + CLUSTER),
    Case("lag-seconds-nan", "thresholds.lag_seconds", "thresholds: {lag_seconds: .nan}\n" + CLUSTER),
    Case("window-string", "thresholds.window", "thresholds: {window: ten}\n" + CLUSTER),
    Case("report-expiry-inf", "thresholds.report_expiry",
         "thresholds: {report_expiry: -.inf}\n" + CLUSTER),
    # -- thresholds per cluster and per group ---------------------------------
    Case("cluster-stall-after-zero", "clusters[0].thresholds.stall_after",
         cl("    thresholds: {stall_after: 0}\n")),
    Case("cluster-report-expiry", "clusters[0].thresholds.report_expiry",
         cl("    thresholds: {report_expiry: 60}\n")),
    Case("group-thresholds-not-list", "group_thresholds", "group_thresholds: {match: x}\n" + CLUSTER),
    Case("group-thresholds-no-match", "group_thresholds[0].match",
         "group_thresholds: [{thresholds: {stall_after: 5}}]\n" + CLUSTER),
    Case("group-thresholds-bad-regex", "group_thresholds[0].match",
         "group_thresholds: [{match: '(', thresholds: {stall_after: 5}}]\n" + CLUSTER),
    Case("group-thresholds-unknown-key", "group_thresholds[0].pattern",
         "group_thresholds: [{pattern: x, thresholds: {stall_after: 5}}]\n" + CLUSTER),
    Case("group-thresholds-empty", "group_thresholds[0].thresholds",
         "group_thresholds: [{match: x, thresholds: {}}]\n" + CLUSTER),
    Case("cluster-group-thresholds-value", "clusters[0].group_thresholds[1].thresholds.stall_after",
         cl("    group_thresholds:\n      - {match: a, thresholds: {stall_after: 5}}\n"
            "      - {match: b, thresholds: {stall_after: soon}}\n")),
    Case("max-group-partitions-zero", "max_group_partitions", "max_group_partitions: 0\n" + CLUSTER),
    Case("max-group-partitions-negative", "max_group_partitions",
         "max_group_partitions: -3\n" + CLUSTER),
    Case("max-group-partitions-fraction", "max_group_partitions",
         "max_group_partitions: 1.5\n" + CLUSTER),
    Case("history-points-one", "history_points", "history_points: 1\n" + CLUSTER),
    # -- regular expressions -----------------------------------------------------
    Case("bad-regex-groups-allow", "clusters[0].groups.allow", cl("    groups: {allow: '['}\n")),
    Case("bad-regex-topics-deny", "clusters[0].topics.deny", cl("    topics: {deny: '(a'}\n")),
    Case("regex-not-string", "clusters[0].groups.deny", cl("    groups: {deny: [a]}\n")),
    # -- listen address ----------------------------------------------------------
    Case("listen-no-port", "listen", "listen: localhost\n" + CLUSTER),
    Case("listen-port-too-big", "listen", "listen: '127.0.0.1:70000'\n" + CLUSTER),
    Case("listen-int", "listen", "listen: 9308\n" + CLUSTER),
    # -- bootstrap servers -------------------------------------------------------
    Case("bootstrap-missing", "clusters[0].bootstrap_servers", "clusters:\n  - name: a\n"),
    Case("bootstrap-no-port", "clusters[0].bootstrap_servers",
         "clusters:\n  - {name: a, bootstrap_servers: localhost}\n"),
    Case("bootstrap-port-zero", "clusters[0].bootstrap_servers",
         "clusters:\n  - {name: a, bootstrap_servers: 'localhost:0'}\n"),
    Case("bootstrap-empty", "clusters[0].bootstrap_servers",
         "clusters:\n  - {name: a, bootstrap_servers: ''}\n"),
    Case("bootstrap-int", "clusters[0].bootstrap_servers",
         "clusters:\n  - {name: a, bootstrap_servers: 9092}\n"),
    Case("bootstrap-empty-element", "clusters[0].bootstrap_servers",
         "clusters:\n  - {name: a, bootstrap_servers: 'a:1,,b:2'}\n"),
    # -- cluster names -----------------------------------------------------------
    Case("duplicate-cluster-names", "clusters[1].name",
         CLUSTER + "  - name: a\n    bootstrap_servers: 127.0.0.1:9093\n"),
    Case("cluster-name-space", "clusters[0].name",
         "clusters:\n  - {name: 'my cluster', bootstrap_servers: 'h:1'}\n"),
    Case("cluster-name-too-long", "clusters[0].name",
         "clusters:\n  - {name: " + "a" * 64 + ", bootstrap_servers: 'h:1'}\n"),
    # -- environment variables ---------------------------------------------------
    Case("missing-env-var-secret", "clusters[0].client.sasl.password",
         cl("    client: {sasl.password: '${LAGWATCH_TEST_UNSET_VAR}'}\n")),
    Case("missing-env-var-listen", "listen", "listen: '${LAGWATCH_TEST_UNSET_VAR}'\n" + CLUSTER),
    # -- the file itself ---------------------------------------------------------
    Case("invalid-yaml", "{d}/c.yml", "clusters: [\n  - name: a\n"),
    Case("invalid-yaml-tab", "{d}/c.yml", "clusters:\n\t- name: a\n"),
    Case("yaml-top-level-list", "{d}/c.yml", "- a\n- b\n"),
    Case("yaml-not-utf8", "{d}/c.yml", b"clusters:\n  - name: \xff\xfe\n"),
    Case("config-missing", "--config", argv=("--config", "{d}/nope.yml")),
    Case("config-is-directory", "--config", argv=("--config", "{d}")),
    # -- client properties lagwatch manages --------------------------------------
    Case("forbidden-group-id", "clusters[0].client.group.id", cl("    client: {group.id: mine}\n")),
    Case("forbidden-auto-commit", "clusters[0].client.enable.auto.commit",
         cl("    client: {enable.auto.commit: true}\n")),
    Case("forbidden-bootstrap", "clusters[0].client.bootstrap.servers",
         cl("    client: {bootstrap.servers: 'h:1'}\n")),
    # -- enumerations ------------------------------------------------------------
    Case("bad-lag-mode", "clusters[0].lag_mode", cl("    lag_mode: fast\n")),
    Case("bad-lag-mode-top", "lag_mode", "lag_mode: fast\n" + CLUSTER),
    Case("bad-compat", "compat", "compat: [prometheus]\n" + CLUSTER),
    Case("compat-mapping", "compat", "compat: {kafka_exporter: 1}\n" + CLUSTER),
    Case("bad-log-level", "log_level", "log_level: LOUD\n" + CLUSTER),
    Case("reports-enabled-string", "clusters[0].reports.enabled", cl("    reports: {enabled: 'yes'}\n")),
    Case("reports-topic-invalid", "clusters[0].reports.topic", cl("    reports: {topic: 'a topic'}\n")),
    Case("reports-topic-key-invalid", "clusters[0].reports_topic", cl("    reports_topic: a/b\n")),
    # -- web config (TLS and basic auth for /metrics) ----------------------------
    Case("web-config-not-string", "web_config", "web_config: 5\n" + CLUSTER),
    Case("web-config-missing", "web_config", "web_config: '{d}/nope.yml'\n" + CLUSTER),
    Case("web-config-missing-flag", "web_config", argv=WEB_ARGS),
    Case("web-config-invalid-yaml", "web_config", argv=WEB_ARGS, files=web("basic_auth_users: [\n")),
    Case("web-config-list", "web_config", argv=WEB_ARGS, files=web("- a\n")),
    Case("web-config-unknown-key", "web_config.basic_auth_user", argv=WEB_ARGS,
         files=web(f"basic_auth_user: {{admin: '{HASH}'}}\n")),
    Case("web-config-plaintext-password", "web_config.basic_auth_users.admin", argv=WEB_ARGS,
         files=web("basic_auth_users: {admin: hunter2}\n")),
    Case("web-config-broken-bcrypt", "web_config.basic_auth_users.admin", argv=WEB_ARGS,
         files=web("basic_auth_users: {admin: '$2b$12$tooshort'}\n")),
    Case("web-config-users-list", "web_config.basic_auth_users", argv=WEB_ARGS,
         files=web("basic_auth_users: [admin]\n")),
    Case("web-config-cert-without-key", "web_config.tls_server_config", argv=WEB_ARGS,
         files={**web("tls_server_config: {cert_file: '{d}/cert.pem'}\n"), "cert.pem": "x"}),
    Case("web-config-tls-not-mapping", "web_config.tls_server_config", argv=WEB_ARGS,
         files=web("tls_server_config: yes\n")),
    Case("web-config-cert-missing", "web_config.tls_server_config.cert_file", argv=WEB_ARGS,
         files=web("tls_server_config: {cert_file: '{d}/no.pem', key_file: '{d}/no.key'}\n")),
    Case("web-config-cert-not-pem", "web_config.tls_server_config", argv=WEB_ARGS,
         files={**web("tls_server_config: {cert_file: '{d}/c.pem', key_file: '{d}/k.pem'}\n"),
                "c.pem": "not a certificate\n", "k.pem": "not a key\n"}),
    Case("web-config-client-auth-unsupported", "web_config.tls_server_config.client_auth_type",
         argv=WEB_ARGS,
         files=web("tls_server_config: {cert_file: a, key_file: b, "
                   "client_auth_type: RequireAndVerifyClientCert}\n")),
    # -- CLI flags ---------------------------------------------------------------
    Case("flag-interval-word", "--interval", argv=("--bootstrap-servers", "h:1", "--interval", "abc")),
    Case("flag-interval-negative", "--interval", argv=("--bootstrap-servers", "h:1", "--interval", "-1")),
    Case("flag-interval-zero", "--interval", argv=("--bootstrap-servers", "h:1", "--interval", "0")),
    Case("flag-interval-nan", "--interval", argv=("--bootstrap-servers", "h:1", "--interval", "nan")),
    Case("flag-interval-inf", "--interval", argv=("--bootstrap-servers", "h:1", "--interval", "inf")),
    Case("flag-interval-no-value", "--interval", argv=("--bootstrap-servers", "h:1", "--interval")),
    Case("flag-stall-after-negative", "--stall-after",
         argv=("--bootstrap-servers", "h:1", "--stall-after", "-5")),
    Case("flag-livelock-after-nan", "--livelock-after",
         argv=("--bootstrap-servers", "h:1", "--livelock-after", "nan")),
    Case("flag-listen-garbage", "--listen", argv=("--bootstrap-servers", "h:1", "--listen", "garbage")),
    Case("flag-listen-port", "--listen", argv=("--bootstrap-servers", "h:1", "--listen", "h:99999")),
    Case("flag-bootstrap-no-port", "--bootstrap-servers", argv=("--bootstrap-servers", "localhost")),
    Case("flag-bootstrap-empty", "--bootstrap-servers", argv=("--bootstrap-servers", "")),
    Case("flag-cluster-name", "--cluster", argv=("--bootstrap-servers", "h:1", "--cluster", "a b")),
    Case("flag-lag-mode", "--lag-mode", argv=("--bootstrap-servers", "h:1", "--lag-mode", "fast")),
    Case("flag-compat", "--compat", argv=("--bootstrap-servers", "h:1", "--compat", "burrow")),
    Case("flag-log-level", "log_level", argv=("--bootstrap-servers", "h:1", "--log-level", "LOUD")),
    Case("flag-unknown", "command line", argv=("--bootstrap-servers", "h:1", "--bogus")),
    Case("no-arguments", "clusters"),
]


@dataclass
class Result:
    rc: int | None
    stdout: str
    stderr: str
    dir: Path


def _materialize(case: Case, d: Path) -> list[str]:
    sub = str(d)
    argv = [a.replace("{d}", sub) for a in case.argv]
    if case.yaml is not None:
        path = d / "c.yml"
        if isinstance(case.yaml, bytes):
            path.write_bytes(case.yaml)
        else:
            path.write_text(case.yaml.replace("{d}", sub))
        argv = ["--config", str(path), *argv]
    for name, body in case.files.items():
        (d / name).write_text(body.replace("{d}", sub))
    return argv


def _run(forks: CliForks, case: Case, d: Path) -> Result:
    d.mkdir()
    argv = _materialize(case, d)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH_TEST_UNSET")}
    # --listen would override the file's own listen setting, which some cases test.
    has_listen = isinstance(case.yaml, str) and "listen:" in case.yaml
    listen = [] if has_listen or "--listen" in argv else ["--listen", f"127.0.0.1:{free_port()}"]
    # A bad config exits at once; the timeout is only a hang guard (a config that should
    # fail started and serves instead), so it is generous: a starved machine is not a failure.
    r = forks.run([*listen, *argv], env, d, timeout=120)
    return Result(r.rc, r.stdout, r.stderr, d)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    """Every case's run, forked from one interpreter that imported the CLI once
    (tests/support/cli_forks.py); test_secret_value_never_echoed runs a fresh one."""
    base = tmp_path_factory.mktemp("config-errors")
    forks = CliForks()
    try:
        return {c.id: _run(forks, c, base / c.id) for c in CASES}
    finally:
        forks.close()


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 80


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_config_one_line_exit_2(case: Case, results: dict[str, Result]) -> None:
    r = results[case.id]
    detail = f"rc={r.rc}\nstdout={r.stdout[:1000]!r}\nstderr={r.stderr[:1500]!r}"
    assert r.rc == 2, detail
    assert r.stdout == "", detail
    assert "Traceback" not in r.stderr, detail
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and r.stderr.endswith("\n"), detail
    want = f"{PREFIX}{case.field.replace('{d}', str(r.dir))}: "
    assert lines[0].startswith(want), f"expected the line to start with {want!r}\n{detail}"
    assert len(lines[0]) > len(want) + 5, f"no problem stated\n{detail}"


def test_a_bad_choice_lists_the_label_values(results: dict[str, Result]) -> None:
    """The closed sets are StrEnums; the CLI names their values, not the members' reprs."""
    assert "(choose from 'interpolate', 'exact')" in results["flag-lag-mode"].stderr


def test_secret_value_never_echoed(tmp_path: Path) -> None:
    """A bad secret-bearing setting names the field, never the secret's value."""
    cfg = tmp_path / "c.yml"
    cfg.write_text(cl("    client: {sasl.password: [s3cr3t-value]}\n"))
    p = subprocess.run([sys.executable, "-m", "exporter", "--config", str(cfg)], cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    # a fresh interpreter, unlike the forked cases: nothing else on stdout or stderr either
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.startswith(f"{PREFIX}clusters[0].client.sasl.password: ") and p.stderr.count("\n") == 1
    assert "s3cr3t" not in p.stderr + p.stdout


def test_good_config_starts(tmp_path: Path) -> None:
    """Every kind of setting at once, valid: the exporter starts, serves and stops cleanly."""
    web_cfg = tmp_path / "web.yml"
    web_cfg.write_text(f"basic_auth_users:\n  admin: '{HASH}'\n")
    cfg = tmp_path / "good.yml"
    # Nothing listens on this port: the exporter must start anyway and report the cluster down.
    cfg.write_text(
        "interval: 0.5\nrequest_timeout: 2\nlag_mode: exact\nmax_group_partitions: 1000\n"
        "history_points: 10\nlog_level: WARNING\ncompat: [kafka_exporter]\n"
        f"web_config: {web_cfg}\n"
        "thresholds: {stall_after: 5, livelock_after: 5, lag_seconds: 60, window: 30,"
        " report_expiry: 60, report_stale_after: 10}\n"
        "clusters:\n"
        f"  - name: prod-eu.1\n    bootstrap_servers: '127.0.0.1:{free_port()},localhost:{free_port()}'\n"
        "    interval: 1\n    lag_mode: interpolate\n"
        "    client: {client.rack: r1, sasl.username: '${LAGWATCH_TEST_USER}',\n"
        "             socket.keepalive.enable: true}\n"
        "    groups: {allow: '^app-', deny: 'test$'}\n    topics: {deny: '^__'}\n"
        "    reports: {enabled: true, topic: __lagwatch_reports}\n"
        f"  - name: other\n    bootstrap_servers: '127.0.0.1:{free_port()}'\n"
        "    reports: {enabled: false}\n"
    )
    with ExporterProcess(None, config=str(cfg), env={"LAGWATCH_TEST_USER": "me"}) as exp:
        exp.wait_listening()
        auth = {"Authorization": "Basic YWRtaW46eA=="}  # admin:x
        assert exp.get("/metrics")[0] == 401
        code, body, _ = exp.get("/metrics", headers=auth)
        assert code == 200
        m = parse_metrics(body.decode())
        assert m[("lagwatch_up", frozenset({("cluster", "prod-eu.1")}))] == 0.0
        assert m[("lagwatch_up", frozenset({("cluster", "other")}))] == 0.0
        assert exp.proc.poll() is None
        rc = exp.stop()
        out = exp.output()
    assert rc == 0, out
    assert "configuration error" not in out and "Traceback" not in out, out

"""Security: TLS + basic auth on the exporter's HTTP side, SASL/SCRAM over TLS to Kafka, no leaks.

(a) ``/metrics``, the API and the status page behind a web config file
    (exporter-toolkit format: TLS certificate + bcrypt basic auth): 401 without or
    with wrong credentials, 200 with the right ones, plain HTTP refused on the TLS
    port, and an idle TCP connection does not stall other scrapes.
(b) A real broker with a SASL_SSL listener (SCRAM-SHA-512, certificate from a CA
    made by the test) and an authorizer; the exporter's user holds read-only ACLs
    (Describe on groups, Describe/Read on topics). The exporter, configured with
    librdkafka client properties and the password from an environment variable,
    serves real offsets including the log end offset (exporter/kafka/broker_requests.py, kafka-python SCRAM +
    TLS client). With a wrong password: a clear log line, ``lagwatch_up 0``, still
    running. The password and private keys never appear in the log, /metrics, any
    /api/v1 document or the status page.
(c) Read-only: consumer groups and their offsets are the same before and after
    every exporter run; against the secure broker the exporter works with ACLs
    that make committing or joining impossible (a control commit with the same
    credentials is refused).
"""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import bcrypt  # a runtime dependency of lagwatch (basic auth)
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from devenv.kafka import KafkaCluster, Listener
from tests.conftest import (
    KAFKA_VERSION,
    commit_offsets,
    create_topic,
    exporter_config,
    produce,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, Samples, parse_metrics, select, value

WEB_USER = "prometheus"
SCRAM_USER = "lagwatch"


# -- certificates (openssl CLI; the `cryptography` package is not a dependency) --------

@dataclass
class Pki:
    dir: Path
    ca: Path
    broker_keystore: Path  # PEM: key + certificate chain, for ssl.keystore.type=PEM
    web_cert: Path
    web_key: Path
    key_bodies: list[str]  # base64 lines of every private key, to grep for

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _leaf(d: Path, name: str) -> tuple[Path, Path]:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", "/CN=localhost", cwd=d)
    (d / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                                   "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"


def _key_body(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("-----")]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    # `make test` installs openssl; without it this fails loudly instead of skipping.
    assert shutil.which("openssl"), "openssl creates the test certificates (apt-get install openssl)"
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=lagwatch test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    broker_cert, broker_key = _leaf(d, "broker")
    web_cert, web_key = _leaf(d, "web")
    keystore = d / "broker-keystore.pem"
    keystore.write_text(broker_key.read_text() + broker_cert.read_text() + (d / "ca.pem").read_text())
    return Pki(d, d / "ca.pem", keystore, web_cert, web_key,
               _key_body(broker_key) + _key_body(web_key) + _key_body(d / "ca.key"))


@dataclass
class Web:
    config: Path
    password: str

    def auth(self, user: str = WEB_USER, password: str | None = None) -> dict[str, str]:
        token = base64.b64encode(f"{user}:{self.password if password is None else password}".encode())
        return {"Authorization": "Basic " + token.decode()}


@pytest.fixture(scope="module")
def web(pki: Pki) -> Web:
    password = f"web-{uuid.uuid4().hex}"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    path = pki.dir / "web.yml"
    path.write_text(f"tls_server_config:\n  cert_file: {pki.web_cert}\n  key_file: {pki.web_key}\n"
                    f"basic_auth_users:\n  {WEB_USER}: '{hashed}'\n")
    return Web(path, password)


def https(port: int, path: str, pki: Pki, headers: dict[str, str] | None = None, timeout: float = 5
          ) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=pki.ssl_context()) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def wait_https_ready(exp: ExporterProcess, pki: Pki, web: Web, timeout: float = 60) -> None:
    def ready() -> bool:
        assert exp.proc.poll() is None, exp.output()
        return https(exp.port, "/readyz", pki, web.auth(), timeout=2)[0] == 200
    wait_for(ready, timeout, "the exporter to be ready over HTTPS")


def everything_served(exp: ExporterProcess, pki: Pki, web: Web) -> dict[str, str]:
    """Every document the exporter serves: /metrics (both formats), /, every /api/v1 document."""
    def get(path: str, **headers: str) -> str:
        code, body, _ = https(exp.port, path, pki, {**web.auth(), **headers})
        assert code == 200, (path, code, body[:300])
        return body.decode()

    out = {"/metrics": get("/metrics"), "/": get("/"),
           "/metrics (openmetrics)": get("/metrics", Accept="application/openmetrics-text"),
           "/api/v1/clusters": get("/api/v1/clusters")}
    for c in json.loads(out["/api/v1/clusters"]):
        base = f"/api/v1/clusters/{quote(c['cluster'], safe='')}"
        for p in (base, f"{base}/groups", f"{base}/partitions"):
            out[p] = get(p)
        for g in json.loads(out[f"{base}/groups"]):
            p = f"{base}/groups/{quote(g['group'], safe='')}"
            out[p] = get(p)
    return out


def assert_no_secrets(texts: dict[str, str], secrets: list[str]) -> None:
    assert secrets and all(len(s) >= 8 for s in secrets)
    for where, text in texts.items():
        assert "PRIVATE KEY" not in text, f"a private key in {where}"
        for s in secrets:
            assert s not in text, f"a secret ({s[:4]}...) appears in {where}"


# -- read-only check --------------------------------------------------------------------

Offsets = dict[str, dict[tuple[str, int], int]]


def groups_and_offsets(bootstrap: str) -> Offsets:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ids = sorted(g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid)
    out: Offsets = {}
    for g in ids:
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)], request_timeout=10)[g]
        out[g] = {(tp.topic, tp.partition): tp.offset for tp in res.result(20).topic_partitions}
    return out


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int], **conf: str) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **conf})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


# -- (a) TLS and basic auth on /metrics and the API ---------------------------------------

def test_metrics_and_api_require_tls_and_basic_auth(kafka: KafkaCluster, pki: Pki, web: Web,
                                                     tmp_path: Path) -> None:
    topic = create_topic(kafka, unique("sec-web"), partitions=2)
    produce(kafka, topic, {0: 5, 1: 5})
    group = unique("sec-web-group")
    commit_offsets(kafka.bootstrap_servers, group, topic, {0: 1, 1: 5})
    before = groups_and_offsets(kafka.bootstrap_servers)
    cfg = exporter_config(tmp_path, kafka.bootstrap_servers, web_config=str(web.config))
    with ExporterProcess(None, config=cfg) as exp:
        wait_https_ready(exp, pki, web)
        protected = ["/metrics", "/api/v1/clusters", "/api/v1/clusters/test/groups",
                     f"/api/v1/clusters/test/groups/{quote(group, safe='')}", "/", "/readyz"]
        wrong = [{}, web.auth(password="wrong"), web.auth(password=""), web.auth(user="admin"),
                 web.auth(password=web.password + "x"), {"Authorization": "Basic !!!not-base64"},
                 {"Authorization": "Bearer " + web.password},
                 {"Authorization": web.auth()["Authorization"][6:]}]
        for path in protected:
            for headers in wrong:
                code, body, hdrs = https(exp.port, path, pki, headers)
                assert code == 401, (path, headers, code)
                assert hdrs.get("WWW-Authenticate", "").startswith("Basic"), hdrs
                assert body == b"unauthorized\n"
            code, body, _ = https(exp.port, path, pki, web.auth())
            assert code == 200, (path, code, body[:200])
        m = parse_metrics(https(exp.port, "/metrics", pki, web.auth())[1].decode())
        assert value(m, "kafka_consumergroup_committed_offset", group=group, topic=topic, partition="0") == 1

        # Plain HTTP on the TLS port gets no answer (the handshake fails, the connection closes).
        with pytest.raises((OSError, http.client.HTTPException)):
            exp.get("/metrics", headers=web.auth(), timeout=5)
        # A client that does not trust our CA refuses the certificate: a real TLS server.
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"https://127.0.0.1:{exp.port}/metrics", timeout=5,
                                   context=ssl.create_default_context())

        # Connections that never start a handshake must not block anyone else's scrape.
        idle = [socket.create_connection(("127.0.0.1", exp.port)) for _ in range(3)]
        try:
            t0 = time.monotonic()
            assert https(exp.port, "/metrics", pki, web.auth(), timeout=5)[0] == 200
            assert time.monotonic() - t0 < 5
        finally:
            for s in idle:
                s.close()
        log = exp.output()
        assert exp.proc.poll() is None
    assert web.password not in log
    assert base64.b64encode(f"{WEB_USER}:{web.password}".encode()).decode() not in log
    assert "Traceback" not in log, log
    after = groups_and_offsets(kafka.bootstrap_servers)
    assert set(after) <= set(before), "the exporter created a consumer group"
    # The session broker holds the groups of this worker's earlier tests: an empty one
    # without offsets (a replicas test's coordination group) is the broker's to delete
    # (its group cleanup, every offsets.retention.check.interval.ms), during this test too.
    kept = {g for g, offsets in before.items() if offsets}
    assert kept <= set(after), f"the exporter deleted a group that had offsets: {kept - set(after)}"
    assert after[group] == before[group]


# -- (b) SASL/SCRAM over TLS against a real broker ------------------------------------------

@dataclass
class SecureKafka:
    cluster: KafkaCluster
    password: str

    @property
    def secure_bootstrap(self) -> str:
        return self.cluster.bootstrap_for("SASL_SSL")

    @property
    def admin_bootstrap(self) -> str:  # PLAINTEXT, the super user: for the test's own setup
        return self.cluster.bootstrap_servers

    def client(self, pki: Pki, password: str | None = None) -> dict[str, str]:
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": SCRAM_USER, "sasl.password": self.password if password is None else password,
                "ssl.ca.location": str(pki.ca)}


@pytest.fixture(scope="module")
def secure_kafka(pki: Pki) -> Iterator[SecureKafka]:
    listener = Listener("SASL_SSL", config={
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_keystore),
    })
    cluster = KafkaCluster(version=KAFKA_VERSION, listeners=[listener], extra_config={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # PLAINTEXT (inter-broker, controller, the test's admin) is the anonymous super user;
        # everyone else gets only what an ACL grants.
        "super.users": "User:ANONYMOUS",
    })
    cluster.start()
    try:
        password = f"scram-{uuid.uuid4().hex}"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        cred = UserScramCredentialUpsertion(
            SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode())
        for f in admin.alter_user_scram_credentials([cred]).values():
            f.result(30)
        principal = f"User:{SCRAM_USER}"
        acls = [AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, principal, "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.DESCRIBE, AclOperation.READ)]
        acls.append(AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, principal, "*",
                               AclOperation.DESCRIBE, AclPermissionType.ALLOW))
        for f in admin.create_acls(acls).values():
            f.result(30)
        yield SecureKafka(cluster, password)
    finally:
        cluster.stop()


def secure_config(tmp_path: Path, sk: SecureKafka, pki: Pki, web: Web, **extra: object) -> str:
    client = {**sk.client(pki), "sasl.password": "${LAGWATCH_TEST_PASSWORD}"}
    return exporter_config(tmp_path, sk.secure_bootstrap, web_config=str(web.config), clusters=[
        {"name": "secure", "bootstrap_servers": sk.secure_bootstrap, "client": client}], **extra)


@pytest.fixture(scope="module")
def secure_data(secure_kafka: SecureKafka) -> dict:
    """A topic and a group made over PLAINTEXT by the super user, before any exporter runs."""
    sk = secure_kafka
    topic = unique("secure-topic")
    admin_cluster = sk.cluster
    create_topic(admin_cluster, topic, partitions=2)
    produce(admin_cluster, topic, {0: 7, 1: 11})
    group = unique("secure-group")
    # retried while the fresh broker loads its group coordinator (NOT_COORDINATOR was seen)
    commit_offsets(sk.admin_bootstrap, group, topic, {0: 2, 1: 11})
    return {"topic": topic, "group": group, "before": groups_and_offsets(sk.admin_bootstrap)}


def test_sasl_scram_over_tls_serves_real_offsets(secure_kafka: SecureKafka, secure_data: dict, pki: Pki,
                                                web: Web, tmp_path: Path) -> None:
    sk, topic, group = secure_kafka, secure_data["topic"], secure_data["group"]
    # The credentials really are needed: the same client without SASL gets nothing.
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": sk.secure_bootstrap, "security.protocol": "SSL",
                     "ssl.ca.location": str(pki.ca), "log_level": 0}).list_topics(timeout=3)
    cfg = secure_config(tmp_path, sk, pki, web)
    assert sk.password not in Path(cfg).read_text()
    with ExporterProcess(None, config=cfg, env={"LAGWATCH_TEST_PASSWORD": sk.password}) as exp:
        wait_https_ready(exp, pki, web)

        def real_data() -> bool:
            m = parse_metrics(https(exp.port, "/metrics", pki, web.auth())[1].decode())
            leo = {int(dict(lab)["partition"]): v for lab, v in
                   select(m, "kafka_partition_log_end_offset", cluster="secure", topic=topic).items()}
            return leo == {0: 7, 1: 11}

        wait_for(real_data, 30, "log end offsets over SASL_SSL (kafka-python SCRAM + TLS client)")
        m = parse_metrics(https(exp.port, "/metrics", pki, web.auth())[1].decode())
        assert value(m, "lagwatch_up", cluster="secure") == 1
        for p, (hw, committed) in {0: (7, 2), 1: (11, 11)}.items():
            part = str(p)
            assert value(m, "kafka_partition_high_watermark_offset", topic=topic, partition=part) == hw
            assert value(m, "kafka_consumergroup_committed_offset", group=group, topic=topic,
                         partition=part) == committed
            assert value(m, "kafka_consumergroup_lag_offsets", group=group, topic=topic,
                         partition=part) == hw - committed
        errors = {dict(lab)["stage"]: v for lab, v in select(m, "lagwatch_errors_total").items() if v}
        assert not errors, errors
        served = everything_served(exp, pki, web)
        assert exp.proc.poll() is None
        served["exporter log"] = exp.output()
    assert_no_secrets(served, [sk.password, web.password, *pki.key_bodies])
    assert "Traceback" not in served["exporter log"], served["exporter log"]


def test_wrong_password_clear_error_keeps_running(secure_kafka: SecureKafka, secure_data: dict, pki: Pki,
                                                  web: Web, tmp_path: Path) -> None:
    sk = secure_kafka
    wrong = f"wrong-{uuid.uuid4().hex}"
    cfg = secure_config(tmp_path, sk, pki, web)
    with ExporterProcess(None, config=cfg, env={"LAGWATCH_TEST_PASSWORD": wrong}) as exp:
        wait_for(lambda: https(exp.port, "/healthz", pki, web.auth(), timeout=2)[0] == 200, 30,
                 "the exporter to listen")
        wait_for(lambda: "Authentication failed" in exp.output(), 60,
                 "an authentication failure in the exporter's log")

        def down() -> bool:
            m = parse_metrics(https(exp.port, "/metrics", pki, web.auth())[1].decode())
            errors = sum(select(m, "lagwatch_errors_total", cluster="secure").values())
            return value(m, "lagwatch_up", cluster="secure") == 0 and errors > 0

        wait_for(down, 60, "lagwatch_up 0 with an error counted")
        assert https(exp.port, "/readyz", pki, web.auth())[0] == 503
        time.sleep(3)  # a few more failing cycles: it keeps running and serving
        assert exp.proc.poll() is None
        served = everything_served(exp, pki, web)
        served["exporter log"] = log = exp.output()
    # the reason is in lagwatch's own error line, the API and the status page, not only in
    # librdkafka's log lines
    reason = "Authentication failed during authentication due to invalid credentials"
    assert any("cannot sample" in ln and reason in ln for ln in log.splitlines()), log
    clusters = json.loads(served["/api/v1/clusters"])
    assert clusters[0]["up"] is False and reason in clusters[0]["last_error"]
    assert reason in served["/"]
    assert_no_secrets(served, [wrong, sk.password, web.password, *pki.key_bodies])
    assert "Traceback" not in log, log


def _log_time(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_wrong_password_one_line_per_problem_and_said_at_once(secure_kafka: SecureKafka, pki: Pki,
                                                               web: Web, tmp_path: Path) -> None:
    """What a new user with a wrong password reads: the refusal once (librdkafka repeats it on
    every reconnection of every client, dozens of lines in a millisecond), and lagwatch's
    own error on the first cycle, within one request timeout (not after waiting out
    metadata timeouts)."""
    request_timeout = 15
    cfg = secure_config(tmp_path, secure_kafka, pki, web, request_timeout=request_timeout)
    with ExporterProcess(None, config=cfg, env={"LAGWATCH_TEST_PASSWORD": f"wrong-{uuid.uuid4().hex}"}
                         ) as exp:
        wait_for(lambda: "cannot sample" in exp.output(), 3 * request_timeout + 15, "the cycle error")

        def failed_cycles() -> float:
            m = parse_metrics(https(exp.port, "/metrics", pki, web.auth())[1].decode())
            return value(m, "lagwatch_errors_total", cluster="secure", stage="metadata") or 0

        # more refused cycles, each after new connection attempts (librdkafka reconnects with
        # backoff in the meantime): the same problem, still the same lines
        wait_for(lambda: failed_cycles() >= 4, 60, "four refused cycles")
        assert exp.proc.poll() is None
        log = exp.output()
    lines = log.splitlines()
    started = next(_log_time(ln) for ln in lines if "listening on" in ln)
    cannot = [ln for ln in lines if "cannot sample" in ln]
    assert len(cannot) == 1, log
    assert "Authentication failed during authentication due to invalid credentials" in cannot[0]
    assert _log_time(cannot[0]) - started < request_timeout, log  # starts, connects, is refused
    refused = [ln for ln in lines if "SASL authentication error" in ln]
    assert len(refused) == 2, log  # librdkafka's line and lagwatch's cycle error
    problems = [ln for ln in lines if " ERROR " in ln or " WARNING " in ln]
    assert len(problems) <= 4, log  # refused (librdkafka, lagwatch), the reports unreadable, one more


def test_a_replica_refused_its_coordination_group_judges_every_group(
        secure_kafka: SecureKafka, secure_data: dict, pki: Pki, web: Web, tmp_path: Path) -> None:
    """state.replicas where the user may write the state topic but not join a group (no Read
    on any group): said once in the log and as lagwatch_coordination_refused 1, and this
    replica judges and serves every group alone, as without replicas."""
    sk, topic, group = secure_kafka, secure_data["topic"], secure_data["group"]
    state_topic = unique("__lagwatch_state_acl")
    create_topic(sk.cluster, state_topic, partitions=2, config={"cleanup.policy": "compact"})
    admin = AdminClient({"bootstrap.servers": sk.cluster.bootstrap_servers})
    write = AclBinding(ResourceType.TOPIC, state_topic, ResourcePatternType.LITERAL, f"User:{SCRAM_USER}",
                       "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([write]).values():
        f.result(30)
    client = {**sk.client(pki), "sasl.password": "${LAGWATCH_TEST_PASSWORD}"}
    cfg = exporter_config(tmp_path, sk.secure_bootstrap, web_config=str(web.config), clusters=[
        {"name": "secure", "bootstrap_servers": sk.secure_bootstrap, "client": client,
         "state": {"topic": state_topic, "replicas": True, "session_timeout": 6}}])
    with ExporterProcess(None, config=cfg, env={"LAGWATCH_TEST_PASSWORD": sk.password}) as exp:
        wait_https_ready(exp, pki, web)

        def refused_and_served() -> Samples | None:
            m = parse_metrics(https(exp.port, "/metrics", pki, web.auth())[1].decode())
            lag = value(m, "kafka_consumergroup_lag_offsets", group=group, topic=topic, partition="0")
            refused = value(m, "lagwatch_coordination_refused", cluster="secure")
            return m if refused == 1 and lag == 5 else None

        m = wait_for(refused_and_served, 30, "the refused replica serving the group")
        assert value(m, "lagwatch_shards_owned", cluster="secure") == 2  # every shard: all groups
        assert value(m, "lagwatch_up", cluster="secure") == 1
        assert exp.output().count("may not join its coordination group") == 1, exp.output()[-3000:]
        assert "Group authorization failed" in exp.output()  # the broker's reason, named


def test_read_only_under_sasl_and_acls(secure_kafka: SecureKafka, secure_data: dict, pki: Pki) -> None:
    """Runs after the exporters above (same module): every group and offset is as before.

    The exporter's user can describe groups and read topics but holds no Read on any group,
    so it could not join a group or commit even by mistake (the exporters above served full
    data with no error counted); the control shows the same credentials are refused a commit.
    """
    sk = secure_kafka
    after = groups_and_offsets(sk.admin_bootstrap)
    assert after == secure_data["before"]
    assert "lagwatch-never-joins" not in after
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        commit(sk.secure_bootstrap, unique("control"), secure_data["topic"], {0: 1}, **sk.client(pki))
    assert groups_and_offsets(sk.admin_bootstrap) == secure_data["before"]

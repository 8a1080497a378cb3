"""SASL/OAUTHBEARER against a real broker that validates real JWTs (issue 38).

The broker's OAUTHBEARER listener uses Kafka's ``OAuthBearerValidatorCallbackHandler``
with ``BrokerJwtValidator`` set explicitly (Kafka 4.1 skipped the signature check without
it) and the JWKS of a token issuer the test runs on loopback (tests/support/oidc_issuer.py);
``connections.max.reauth.ms`` makes every session end after SESSION seconds, and tokens
live TOKEN_LIFETIME seconds. PLAINTEXT stays for the broker's own traffic and the test's
setup. lagwatch logs in with OIDC client credentials, a scope and two SASL extensions,
through one token source for both of its clients (exporter/kafka/tokens.py).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from devenv.groups_tool import set_share_auto_offset_reset_earliest
from devenv.jvm_apps import JvmApp
from devenv.kafka import KafkaCluster, Listener, free_port
from tests.conftest import (
    KAFKA_VERSION,
    commit_offsets,
    create_topic,
    cycles_until,
    exporter_config,
    produce,
    unique,
    wait_for,
)
from tests.support.exporter_proc import ExporterProcess, select, value
from tests.support.oidc_issuer import Issuer

OB = "org.apache.kafka.common.security.oauthbearer."
# Seconds a token lives: several refreshes and re-authentications within a test. The issue's
# long run (60 s tokens, about five minutes: 8 renewals at 60 % of each lifetime) is the same
# test with LAGWATCH_TEST_TOKEN_LIFETIME=60; `make test` keeps the short one (3 renewals).
TOKEN_LIFETIME = int(os.environ.get("LAGWATCH_TEST_TOKEN_LIFETIME", "12"))
RENEWALS = 3 if TOKEN_LIFETIME < 60 else 8
SESSION = TOKEN_LIFETIME * 2 // 3  # connections.max.reauth.ms, in seconds
SCOPE = "kafka.read"
EXTENSIONS = "logicalCluster=lkc-test1,identityPoolId=pool-test2"


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    iss = Issuer("lagwatch", f"secret-{uuid.uuid4().hex}", lifetime=TOKEN_LIFETIME).start()
    yield iss
    iss.stop()


@pytest.fixture(scope="module")
def oauth_kafka(issuer: Issuer) -> Iterator[KafkaCluster]:
    validation = {
        "sasl.oauthbearer.jwks.endpoint.url": issuer.jwks_url,
        "sasl.oauthbearer.jwt.validator.class": OB + "BrokerJwtValidator",
        "sasl.oauthbearer.expected.audience": issuer.audience,
        "sasl.oauthbearer.expected.issuer": issuer.url,
    }
    listener = Listener("OAUTH", protocol="SASL_PLAINTEXT", config={
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "oauthbearer.sasl.jaas.config": OB + "OAuthBearerLoginModule required;",
        "oauthbearer.sasl.server.callback.handler.class": OB + "OAuthBearerValidatorCallbackHandler",
        "oauthbearer.connections.max.reauth.ms": str(SESSION * 1000),
        **{f"oauthbearer.{k}": v for k, v in validation.items()},
    })
    cluster = KafkaCluster(version=KAFKA_VERSION, listeners=[listener], extra_config=validation,
                           jvm_options=["-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="
                                        f"{issuer.jwks_url},{issuer.token_url}"])
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def oidc_client(issuer: Issuer, secret: str | None = None, url: str | None = None) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": issuer.client_id,
            "sasl.oauthbearer.client.secret": "${LAGWATCH_TEST_CLIENT_SECRET}" if secret is None else secret,
            "sasl.oauthbearer.token.endpoint.url": url or issuer.token_url,
            "sasl.oauthbearer.scope": SCOPE, "sasl.oauthbearer.extensions": EXTENSIONS}


def admin_with_token(bootstrap: str, token: str, errors: list[str]) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "OAUTHBEARER", "log_level": 0,
                        "oauth_cb": lambda _c: (token, time.time() + 300, "lagwatch", {}),
                        "error_cb": lambda e: errors.append(e.str())})


def test_broker_checks_token_signatures(oauth_kafka: KafkaCluster, issuer: Issuer) -> None:
    """The broker accepts the issuer's token and refuses one signed by a key outside its
    JWKS (same kid, same claims): it really verifies signatures."""
    bootstrap = oauth_kafka.bootstrap_for("OAUTH")
    errors: list[str] = []
    good = admin_with_token(bootstrap, issuer.mint("lagwatch", SCOPE, lifetime=300), errors)
    assert good.list_topics(timeout=20).brokers
    forged: list[str] = []
    bad = admin_with_token(bootstrap, issuer.foreign_token("lagwatch"), forged)
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=5)
    bad.poll(1)  # error_cb is served by poll
    assert any("SASL authentication error" in e and "invalid_token" in e for e in forged), forged
    assert good.list_topics(timeout=20).brokers  # the good client was never refused


# -- every family, every group type, with tokens and sessions expiring -------------------

class Groups:
    """A group of each type on one topic; the KIP-848 member and the JVM apps keep running."""

    def __init__(self, kafka: KafkaCluster) -> None:
        self.topic = create_topic(kafka, unique("oauth-topic"), partitions=3)
        produce(kafka, self.topic, {0: 20, 1: 30, 2: 10})
        # An open transaction on partition 2: its LSO stays at 10 while its HW moves past.
        self.txn = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                             "transactional.id": unique("oauth-txn"), "transaction.timeout.ms": 600_000})
        self.txn.init_transactions(30)
        self.txn.begin_transaction()
        for _ in range(4):
            self.txn.produce(self.topic, b"open", partition=2)
        assert self.txn.flush(30) == 0
        self.classic = unique("oauth-classic")
        commit_offsets(kafka.bootstrap_servers, self.classic, self.topic, {0: 5, 1: 30, 2: 10})
        self.consumer_group = unique("oauth-kip848")
        self.member = Consumer({"bootstrap.servers": kafka.bootstrap_servers,
                                "group.id": self.consumer_group, "group.protocol": "consumer",
                                "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.member.subscribe([self.topic])
        self.streams = unique("oauth-streams")
        self.share = unique("oauth-share")
        set_share_auto_offset_reset_earliest(kafka, self.share)
        bs = kafka.bootstrap_servers
        self.apps = [
            JvmApp("StreamsApp", f"bootstrap={bs}", f"app={self.streams}", f"topic={self.topic}",
                   "after=1000000", "prop.group.protocol=streams", streams=True),
            JvmApp("ShareApp", f"bootstrap={bs}", f"group={self.share}", f"topic={self.topic}",
                   "mode=healthy", "client=oauth-share-1"),
        ]

    def poll_member(self) -> None:
        """Keep the KIP-848 member alive (heartbeats ride on poll) and committed."""
        msgs = self.member.consume(100, timeout=0.2)
        if msgs:
            self.member.commit(asynchronous=False)

    def stop(self) -> None:
        for app in self.apps:
            app.stop()
        self.member.close()
        self.txn.abort_transaction(10)


def _family(m: dict, name: str, **labels: str) -> dict[int, float]:
    return {int(dict(lab)["partition"]): v for lab, v in select(m, name, **labels).items()}


def _served(exp: ExporterProcess) -> dict[str, str]:
    """Every document the exporter serves: /metrics, /, every /api/v1 document."""
    def get(path: str) -> str:
        code, body, _ = exp.get(path)
        assert code == 200, (path, code, body[:300])
        return body.decode()

    out = {"/metrics": get("/metrics"), "/": get("/"), "/api/v1/clusters": get("/api/v1/clusters")}
    for c in json.loads(out["/api/v1/clusters"]):
        base = f"/api/v1/clusters/{c['cluster']}"
        for p in (base, f"{base}/groups", f"{base}/partitions"):
            out[p] = get(p)
        for g in json.loads(out[f"{base}/groups"]):
            out[f"{base}/groups/{g['group']}"] = get(f"{base}/groups/{g['group']}")
    return out


def assert_no_secrets(texts: dict[str, str], secrets: list[str]) -> None:
    assert secrets and all(len(s) >= 16 for s in secrets)
    for where, text in texts.items():
        for s in secrets:
            assert s not in text, f"a secret ({s[:6]}...) appears in {where}"


def _all_served(exp: ExporterProcess, groups: Groups) -> dict[str, Any] | None:
    """The cluster's families once every group type is there with its offsets."""
    m = exp.metrics()
    types = {g["group"]: g for g in exp.api("clusters/oauth/groups")}
    want = (groups.classic, groups.consumer_group, groups.streams, groups.share)
    if not all(g in types and types[g].get("status") for g in want):
        return None
    committed = {g: _family(m, "kafka_consumergroup_committed_offset", group=g, topic=groups.topic)
                 for g in want}
    if not all(len(c) == 3 for c in committed.values()):
        return None
    return {"m": m, "types": types, "committed": committed}


def test_oidc_serves_every_family_and_group_type_through_token_refreshes(
        oauth_kafka: KafkaCluster, issuer: Issuer, tmp_path: Path) -> None:
    groups = Groups(oauth_kafka)
    secure = oauth_kafka.bootstrap_for("OAUTH")
    cfg = exporter_config(tmp_path, secure, clusters=[
        {"name": "oauth", "bootstrap_servers": secure, "client": oidc_client(issuer)}])
    issued_before = len(issuer.issued)
    try:
        with ExporterProcess(None, config=cfg,
                             env={"LAGWATCH_TEST_CLIENT_SECRET": issuer.client_secret}) as exp:
            for app in groups.apps:
                app.event("READY", 90)

            def served() -> dict | None:
                groups.poll_member()
                return _all_served(exp, groups)

            got = wait_for(served, 60, "every group type served over OAUTHBEARER")
            _assert_families(got, groups)
            _run_through_expiries(exp, issuer, groups)
            texts = _served(exp)
            texts["exporter log"] = exp.output()
    finally:
        groups.stop()
    # every token request carried the scope; the tokens were refreshed all along
    mine = issuer.issued[issued_before:]
    assert mine and all(c["scope"] == SCOPE and c["sub"] == issuer.client_id for c in mine)
    assert_no_secrets(texts, [issuer.client_secret, *issuer.tokens])
    assert "Traceback" not in texts["exporter log"], texts["exporter log"]


def _assert_families(got: dict, groups: Groups) -> None:
    m, types, committed = got["m"], got["types"], got["committed"]
    topic = groups.topic
    assert value(m, "lagwatch_up", cluster="oauth") == 1
    assert {types[g]["type"] for g in (groups.classic, groups.consumer_group, groups.streams,
                                        groups.share)} == {"classic", "consumer", "streams", "share"}
    assert committed[groups.classic] == {0: 5, 1: 30, 2: 10}
    hw = _family(m, "kafka_partition_high_watermark_offset", topic=topic)
    lso = _family(m, "kafka_partition_last_stable_offset", topic=topic)
    leo = _family(m, "kafka_partition_log_end_offset", topic=topic)
    # partition 2: 10 records, then an open transaction of 4 (plus nothing committed)
    assert hw == {0: 20, 1: 30, 2: 14} and leo == hw, (hw, leo)
    assert lso == {0: 20, 1: 30, 2: 10}, lso
    assert types[groups.classic]["status"] in ("ok", "stopped", "lagging"), types[groups.classic]


def _run_through_expiries(exp: ExporterProcess, issuer: Issuer, groups: Groups) -> None:
    """Sample through :data:`RENEWALS` token renewals (each session ends at 2/3 of a
    lifetime, so as many re-authentications): every scrape up, no request failing, and a
    cycle completed for every second of it at least (interval 1 s: a few may run late).
    Counted in renewals and cycles; the wall clock is only a hang guard."""
    def errors() -> float:
        return sum(select(exp.metrics(), "lagwatch_errors_total", cluster="oauth").values())

    def cycles() -> float:
        return value(exp.metrics(), "lagwatch_cycles_total", cluster="oauth") or 0

    start_errors, start_cycles, start_tokens = errors(), cycles(), len(issuer.issued)
    guard = time.monotonic() + 4 * RENEWALS * TOKEN_LIFETIME
    downs = 0
    while (len(issuer.issued) - start_tokens < RENEWALS
           or cycles() - start_cycles < RENEWALS * TOKEN_LIFETIME / 2):
        assert time.monotonic() < guard, f"hang guard: {len(issuer.issued) - start_tokens} renewals"
        groups.poll_member()
        downs += value(exp.metrics(), "lagwatch_up", cluster="oauth") != 1
        time.sleep(0.5)
    assert downs == 0
    assert errors() == start_errors, exp.output()[-3000:]


# -- failures: one reason each, rate-limited, recovered without a restart ------------------

def test_token_failures_give_one_reason_each_and_a_fixed_token_file_recovers(
        oauth_kafka: KafkaCluster, issuer: Issuer, tmp_path: Path) -> None:
    """Three clusters on the same broker: a wrong client secret, a token endpoint nobody
    listens on, and a token file holding an expired token. Each is down with its reason in
    the log (once), /api/v1/clusters and the status page; the token endpoint is asked again
    and again (backoff) without a line each time. Writing a valid token to the file brings
    that cluster up without a restart."""
    secure = oauth_kafka.bootstrap_for("OAUTH")
    wrong = f"wrong-{uuid.uuid4().hex}"
    token_file = tmp_path / "token"
    token_file.write_text(issuer.mint(issuer.client_id, lifetime=-60))
    file_client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                   "sasl.oauthbearer.extensions": EXTENSIONS}
    cfg = exporter_config(tmp_path, secure, clusters=[
        {"name": "wrong-secret", "bootstrap_servers": secure, "client": oidc_client(issuer)},
        {"name": "no-endpoint", "bootstrap_servers": secure,
         "client": oidc_client(issuer, issuer.client_secret, f"http://127.0.0.1:{free_port()}/token")},
        {"name": "token-file", "bootstrap_servers": secure, "client": file_client,
         "oauthbearer_token_file": str(token_file)}])
    reasons = {"wrong-secret": "refused: HTTP 401 invalid_client",
               "no-endpoint": "unreachable: [Errno 111] Connection refused",
               "token-file": f"token file {token_file} holds a token that expired at"}
    refused_before = issuer.refused
    with ExporterProcess(None, config=cfg, env={"LAGWATCH_TEST_CLIENT_SECRET": wrong}) as exp:
        exp.wait_listening()

        def all_down() -> dict | None:
            docs = {c["cluster"]: c for c in exp.api("clusters")}
            return docs if all(not docs[n]["up"] and r in (docs[n]["last_error"] or "")
                               for n, r in reasons.items()) else None

        docs = wait_for(all_down, 30, "each cluster down with its reason")
        wait_for(lambda: issuer.refused - refused_before >= 4, 30, "the endpoint asked again (backoff)")
        m = exp.metrics()
        assert all(value(m, "lagwatch_up", cluster=n) == 0 for n in reasons)
        page = exp.get("/")[1].decode()
        for name, reason in reasons.items():
            assert "no OAUTHBEARER token: " in docs[name]["last_error"]
            assert reason in page, (reason, page[:2000])
        log = exp.output()
        for name, reason in reasons.items():
            mine = [ln for ln in log.splitlines() if f"cluster {name}:" in ln and reason in ln]
            # lagwatch's cycle error once, the token source's warning once: not once per retry
            assert len(mine) == 2, (name, mine)
        token_file.write_text(issuer.mint(issuer.client_id, lifetime=300))
        n = cycles_until(exp, lambda: value(exp.metrics(), "lagwatch_up", cluster="token-file") == 1,
                         30, "the token-file cluster up after its file was fixed")
        assert n <= 6, n  # the file is watched every second; a cycle a second, a reconnect
        assert "cluster token-file: sampling recovered" in exp.output()
        texts = _served(exp)
        texts["exporter log"] = exp.output()
    assert_no_secrets(texts, [wrong, issuer.client_secret, *issuer.tokens])
    assert "Traceback" not in texts["exporter log"], texts["exporter log"]

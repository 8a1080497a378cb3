"""exporter/kafka/tokens.py and oauth_props.py without a broker: what is refused at start,
the cached token that never waits on the identity provider, backoff and one log line per
failure, the token file watched for changes, and the AWS MSK IAM token both clients send,
checked field by field against the signer's documented format and its signature
recomputed by kafka-python's own SigV4 code (kafka.net.sasl.msk), an independent
implementation. Nothing here talks to AWS.

The same source against a real broker validating JWTs: tests/test_oauth.py.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer
from kafka.net.sasl.msk import AwsMskIamClient
from kafka.net.sasl.oauth import SaslMechanismOAuth

from devenv.kafka import free_port
from exporter import config as config_mod
from exporter.kafka import tokens
from exporter.kafka.oauth_props import AwsMskIam, TokenSpec
from exporter.kafka.tokens import Token, TokenSource, TokenUnavailable

pytestmark = pytest.mark.unit

OAUTH = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}
OIDC = {**OAUTH, "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "lagwatch",
        "sasl.oauthbearer.client.secret": "s3cret-value-123",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/oauth2/token"}


def _config(client: dict[str, str], **cluster: object) -> config_mod.Config:
    return config_mod.build_config({"clusters": [{"name": "c", "bootstrap_servers": "b:9093",
                                                  "client": client, **cluster}]}, {})


@pytest.mark.parametrize("client, cluster, field, says", [
    ({**OIDC, "sasl.oauthbearer.assertion.file": "/a"}, {}, "client.sasl.oauthbearer.assertion.file",
     "not available to kafka-python"),
    ({**OIDC, "sasl.oauthbearer.grant.type": "urn:ietf:params:oauth:grant-type:jwt-bearer"}, {},
     "client.sasl.oauthbearer.grant.type", "client_credentials"),
    (OAUTH, {}, "client.sasl.oauthbearer.method", "unsecured"),
    ({**OAUTH, "sasl.oauthbearer.config": "principal=x"}, {}, "client.sasl.oauthbearer.config",
     "not available to kafka-python"),
    ({**OAUTH, "sasl.mechanism": "AWS_MSK_IAM"}, {}, "client.sasl.mechanism", "not available to librdkafka"),
    ({k: v for k, v in OIDC.items() if k != "sasl.oauthbearer.client.secret"}, {},
     "client.sasl.oauthbearer.client.secret", "is required"),
    ({**OIDC, "sasl.oauthbearer.extensions": "auth=x"}, {}, "client.sasl.oauthbearer.extensions", "auth"),
    ({**OIDC, "https.ca.pem": "----"}, {}, "client.https.ca.pem", "not available to kafka-python"),
    (OIDC, {"oauthbearer_token_file": "/t"}, "oauthbearer_token_file", "only one token source"),
    ({"security.protocol": "SSL"}, {"oauthbearer_token_file": "/t"}, "oauthbearer_token_file",
     "sasl.mechanism OAUTHBEARER"),
    ({**OAUTH, "security.protocol": "SASL_PLAINTEXT"}, {"aws_msk_iam": {"region": "eu-west-1"}},
     "client.security.protocol", "SASL_SSL"),
    (OAUTH, {"aws_msk_iam": {"role_arn": "arn:aws:iam::1:role/r"}}, "aws_msk_iam.region", "required"),
    (OAUTH, {"aws_msk_iam": {"region": "eu-west-1", "rgion": "x"}}, "aws_msk_iam.rgion", "unknown"),
])
def test_what_no_client_can_honour_is_refused_at_start_by_name(
        client: dict[str, str], cluster: dict, field: str, says: str) -> None:
    with pytest.raises(config_mod.ConfigError) as e:
        _config(client, **cluster)
    assert e.value.field == f"clusters[0].{field}", e.value
    assert says in str(e.value) and "s3cret" not in str(e.value)


def test_accepted_sources_and_their_redaction() -> None:
    c = _config({**OIDC, "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2"})
    assert "s3cret" not in repr(c.clusters[0])
    c = _config(OAUTH, oauthbearer_token_file="/var/run/secrets/kafka/token")
    assert c.clusters[0].oauthbearer_token_file == "/var/run/secrets/kafka/token"
    c = _config(OAUTH, aws_msk_iam={"region": "eu-west-1", "profile": "p"})
    assert c.clusters[0].aws_msk_iam == AwsMskIam(region="eu-west-1", profile="p")


# -- the source -------------------------------------------------------------------------

def _tok(value: str, life: float = 60.0) -> Token:
    return Token(value, time.time() + life, "lagwatch")


def test_token_never_waits_on_a_slow_fetch() -> None:
    """While a refresh hangs in the identity provider, token() answers from memory."""
    release = threading.Event()
    calls: list[float] = []

    def fetch() -> Token:
        calls.append(time.monotonic())
        if len(calls) > 1:
            release.wait(10)
        return _tok(f"token-{len(calls)}", life=2.0)  # refresh due after 1.2 s

    src = TokenSource("slow", fetch, {"logicalCluster": "lkc-1"}).start(5)
    try:
        assert src.token() == "token-1"
        wait_until(lambda: len(calls) >= 2, 5)  # the refresh is hanging now
        # the hanging fetch returns token-2 only after release (or 10 s): an answer that
        # waited on it would be token-2, so token-1 proves it did not wait (no clock)
        assert src.token() == "token-1" and src.oauth_cb("")[0] == "token-1"
        assert src.oauth_cb("")[3] == {"logicalCluster": "lkc-1"} == src.extensions()
        release.set()
        wait_until(lambda: src.token() == "token-2", 5)
    finally:
        release.set()
        src.close()


def wait_until(cond: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_failures_back_off_are_logged_once_and_recover(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The waits between attempts double up to the cap, one warning tells a failure that
    repeats, and a success says so once: each fetch driven by hand, so no clock decides."""
    monkeypatch.setattr(tokens, "BACKOFF", (0.05, 0.4))
    failing = [True]

    def fetch() -> Token:
        if failing[0]:
            raise TokenUnavailable("token endpoint https://idp.example/token refused: "
                                   "HTTP 401 invalid_client")
        return _tok("fresh-token")

    caplog.set_level(logging.INFO, logger="lagwatch.tokens")
    src = TokenSource("c1", fetch, {})  # not started: no thread fetches beside the test
    waits = [src._refresh() for _ in range(6)]
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]
    with pytest.raises(TokenUnavailable, match="invalid_client"):
        src.token()
    assert "invalid_client" in (src.error() or "")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cluster c1" in warnings[0].getMessage()
    failing[0] = False
    assert src._refresh() >= tokens.MIN_REFRESH
    assert src.error() is None and src.token() == "fresh-token"
    assert [r.getMessage() for r in caplog.records if "fetched again" in r.getMessage()] == [
        "cluster c1: OAUTHBEARER token fetched again"]
    failing[0] = True
    assert src._refresh() == 0.05  # a new run of failures starts from the shortest wait


def test_the_refresh_loop_fetches_when_the_backoff_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refresh loop (``_run``) on a clock of the test's: each wait moves it on by what
    the loop asked for, so the times of the fetches are exact. Failing, it fetches after
    0.05, 0.1, 0.2, then every 0.4 s; once a token comes, not again before its refresh."""
    monkeypatch.setattr(tokens, "BACKOFF", (0.05, 0.4))
    clock = [0.0]
    monkeypatch.setattr(tokens, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    calls: list[float] = []

    def fetch() -> Token:
        calls.append(clock[0])
        if len(calls) < 7:
            raise TokenUnavailable("HTTP 401 invalid_client")
        return _tok("fresh-token")  # valid 60 s: its refresh is due long after the run

    class Stop:  # the loop's stop event: a wait moves the clock, the run ends at 5 s
        def is_set(self) -> bool:
            return clock[0] >= 5.0

        def wait(self, seconds: float) -> bool:
            clock[0] += seconds
            return self.is_set()

    src = TokenSource("c1", fetch, {})
    src._stop = Stop()  # type: ignore[assignment]
    src._run()
    assert [round(b - a, 9) for a, b in zip(calls, calls[1:], strict=False)] == [
        0.05, 0.1, 0.2, 0.4, 0.4, 0.4]
    assert src.token() == "fresh-token" and src.error() is None


def test_token_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(_jwt({"sub": "svc", "exp": int(time.time()) - 5}))
    fetch, changed = tokens.file_fetch(str(path))
    src = TokenSource("f", fetch, {}, changed).start(5)
    try:
        assert "expired at" in (src.error() or "")
        fresh = _jwt({"sub": "svc", "exp": int(time.time()) + 600})
        path.write_text(fresh)
        wait_until(lambda: src.error() is None, 3)  # watched every second, no backoff wait
        assert src.token() == fresh and src.oauth_cb("")[2] == "svc"
        path.write_text("")
        wait_until(lambda: "is empty" in str(src._error), 3)
        assert src.token() == fresh  # the last valid token stays in use until it expires
    finally:
        src.close()


def _jwt(claims: dict) -> str:
    def part(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")
    return f"{part({'alg': 'none'})}.{part(claims)}.c2lnbmF0dXJl"


def test_oidc_fetch_says_why_without_the_secret() -> None:
    spec = TokenSpec(kind="oidc", token_endpoint=f"http://user:pw@127.0.0.1:{free_port()}/token?k=v",
                     client_id="lagwatch", client_secret="s3cret-value-123")
    with pytest.raises(TokenUnavailable) as e:
        tokens.oidc_fetch(spec, 2.0)()
    msg = str(e.value)
    assert "unreachable" in msg and "/token" in msg
    assert "s3cret" not in msg and "pw" not in msg and "k=v" not in msg


# -- AWS MSK IAM ---------------------------------------------------------------------------

AKID, SESSION = "AKIDLAGWATCHTEST0001", "session-tok-42"
SECRET_KEY = "lagwatch/test+secret/key0123456789abcdefgh"


def test_msk_iam_payload_of_both_clients_is_signed_as_the_signer_documents(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {"AWS_ACCESS_KEY_ID": AKID, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                 "AWS_SESSION_TOKEN": SESSION, "AWS_CONFIG_FILE": "/dev/null",
                 "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    spec = TokenSpec(kind="aws_msk_iam", aws=AwsMskIam(region="eu-west-1"))
    src = tokens.source_for("msk", spec, 5.0).start(10)
    try:
        # kafka-python: the exact bytes of its SASL/OAUTHBEARER client-first message
        sent = SaslMechanismOAuth(sasl_oauth_token_provider=src).auth_bytes()
        assert sent.startswith(b"n,,\x01auth=Bearer ") and sent.endswith(b"\x01\x01")
        kp_token = sent[len(b"n,,\x01auth=Bearer "):-2].decode()
        # librdkafka: the token it is handed by oauth_cb when the client is created
        handed: list[tuple] = []

        def cb(conf: str) -> tuple:
            handed.append(src.oauth_cb(conf))
            return handed[-1]

        Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", **OAUTH, "oauth_cb": cb,
                  "log_level": 0}).flush(0)
        assert handed and handed[0][0] == kp_token
        _check_signed_url(kp_token, handed[0][1])
    finally:
        src.close()


def _check_signed_url(token: str, expiry: float) -> None:
    """The fields of aws-msk-iam-sasl-signer-python's README: a base64url (unpadded)
    SigV4-presigned GET of https://kafka.<region>.amazonaws.com/ for kafka-cluster:Connect,
    valid 900 s, with a User-Agent naming the signer."""
    assert "=" not in token
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "kafka.eu-west-1.amazonaws.com", "/")
    q = dict(urllib.parse.parse_qsl(parts.query))
    date = q["X-Amz-Date"]
    signed_at = time.mktime(time.strptime(date, "%Y%m%dT%H%M%SZ")) - time.timezone
    assert abs(signed_at - time.time()) < 60 and expiry == signed_at + 900
    assert q["Action"] == "kafka-cluster:Connect" and q["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert q["X-Amz-Credential"] == f"{AKID}/{date[:8]}/eu-west-1/kafka-cluster/aws4_request"
    assert q["X-Amz-Expires"] == "900" and q["X-Amz-SignedHeaders"] == "host"
    assert q["X-Amz-Security-Token"] == SESSION
    assert q["User-Agent"].startswith("aws-msk-iam-sasl-signer-python/")
    # the signature, recomputed by kafka-python's AWS_MSK_IAM code from the same inputs
    other = AwsMskIamClient("kafka.eu-west-1.amazonaws.com", AKID, SECRET_KEY, "eu-west-1", token=SESSION)
    other.timestamp, other.datestamp = date, date[:8]
    assert json.loads(other.first_message())["x-amz-signature"] == q["X-Amz-Signature"]
    wrong = AwsMskIamClient("kafka.eu-west-1.amazonaws.com", AKID, SECRET_KEY + "x", "eu-west-1",
                            token=SESSION)
    wrong.timestamp, wrong.datestamp = date, date[:8]
    assert json.loads(wrong.first_message())["x-amz-signature"] != q["X-Amz-Signature"]

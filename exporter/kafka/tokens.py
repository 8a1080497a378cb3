"""One OAUTHBEARER token source per cluster, serving both Kafka clients of the worker.

* librdkafka calls :meth:`TokenSource.oauth_cb` (confluent-kafka >= 2.13.0 calls it from a
  background thread for an AdminClient too; confluentinc/confluent-kafka-python#1713);
* kafka-python 3 calls :meth:`TokenSource.token` and :meth:`TokenSource.extensions`
  (``kafka.net.sasl.oauth.AbstractTokenProvider``) on its IO thread, at each
  authentication and KIP-368 re-authentication.

Neither call may wait on an identity provider: a slow token endpoint would stall every
connection of the client. Both return the token held in memory; a background thread
fetches the next one when 60 % of the current one's lifetime has passed (librdkafka and
Kafka's Java client refresh at 80 %: earlier here, so that librdkafka's own refresh already
finds the new token), retries a failed fetch with exponential backoff, and, for a token
file, re-reads the file as soon as it changes. While no valid token is held, :meth:`error`
says why, and the sampler reports it as the cycle's error (``lagwatch_up 0``).

Tokens and client secrets are never logged: the reasons name the endpoint or the file
and what the server said (its OAuth ``error`` code), never a credential.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from exporter.kafka.oauth_props import TokenSpec

log = logging.getLogger("lagwatch.tokens")

REFRESH_AT = 0.6  # of a token's lifetime
MIN_REFRESH = 1.0  # seconds: never fetch more often, however short the tokens
BACKOFF = (1.0, 30.0)  # first and largest wait after a failed fetch (doubling)
FILE_POLL = 1.0  # seconds between stat() calls on a token file
UNKNOWN_LIFETIME = 3600.0  # an opaque token (not a JWT) with no expires_in
LOG_AGAIN = 60.0  # the same failure is logged again at most this often


class TokenUnavailable(Exception):
    """No valid token is held; the message says why (never a credential)."""


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    expires_at: float  # epoch seconds
    principal: str


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, unverified (the broker verifies; lagwatch only reads ``exp`` and
    the principal), or {} for an opaque token."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, TypeError):
        return {}
    return claims if isinstance(claims, dict) else {}


class TokenSource(AbstractTokenProvider):
    """A cached token refreshed in the background by ``fetch``; see the module docstring."""

    def __init__(self, name: str, fetch: Callable[[], Token], extensions: dict[str, str],
                 changed: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self.name = name
        self._fetch, self._extensions, self._changed = fetch, dict(extensions), changed
        self._token: Token | None = None
        self._error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tokens-{name}", daemon=True)
        self._failures = 0
        self._logged: tuple[str, float] | None = None
        self.fetches = 0

    # -- what the clients call ------------------------------------------------------
    def token(self) -> str:
        return self.current().value

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

    def oauth_cb(self, _config: str) -> tuple[str, float, str, dict[str, str]]:
        """librdkafka's refresh callback: (token, expiry in epoch seconds, principal,
        extensions). Raising makes librdkafka record a token failure and call again later."""
        tok = self.current()
        return tok.value, tok.expires_at, tok.principal, dict(self._extensions)

    def current(self) -> Token:
        with self._lock:
            tok, why = self._token, self._error
        if tok is not None and tok.expires_at > time.time():
            return tok
        raise TokenUnavailable(why or "no token fetched yet")

    def error(self) -> str | None:
        """Why no valid token is held, or None while one is."""
        try:
            self.current()
        except TokenUnavailable as e:
            return str(e)
        return None

    # -- lifecycle --------------------------------------------------------------------
    def start(self, wait: float) -> TokenSource:
        """Start refreshing; wait up to ``wait`` seconds for the first fetch to end, so that
        the clients created next find a token (or the reason there is none)."""
        self._thread.start()
        self._first.wait(wait)
        return self

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        next_at = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_at or (self._changed is not None and self._changed()):
                next_at = time.monotonic() + self._refresh()
                self._first.set()
            self._stop.wait(min(FILE_POLL, max(0.05, next_at - time.monotonic())))

    def _refresh(self) -> float:
        """Fetch once; the seconds until the next fetch."""
        self.fetches += 1
        try:
            tok = self._fetch()
        except Exception as e:  # noqa: BLE001 - any failure is a reason, kept and retried
            why = str(e) or type(e).__name__
            with self._lock:
                self._error = why
                held = self._token is not None and self._token.expires_at > time.time()
            self._failures += 1
            self._log_failure(why, held)
            return min(BACKOFF[1], BACKOFF[0] * 2 ** (self._failures - 1))
        with self._lock:
            self._token, self._error = tok, None
        if self._failures:
            log.info("cluster %s: OAUTHBEARER token fetched again", self.name)
        self._failures, self._logged = 0, None
        return max(MIN_REFRESH, (tok.expires_at - time.time()) * REFRESH_AT)

    def _log_failure(self, why: str, held: bool) -> None:
        """One line per distinct failure, repeated at most every LOG_AGAIN seconds."""
        now = time.monotonic()
        if self._logged is not None and self._logged[0] == why and now - self._logged[1] < LOG_AGAIN:
            return
        self._logged = (why, now)
        still = " (the current token is still valid)" if held else ""
        log.warning("cluster %s: cannot get an OAUTHBEARER token: %s; retrying with backoff%s",
                    self.name, why, still)


# -- the three ways to get a token ---------------------------------------------------------

def oidc_fetch(spec: TokenSpec, timeout: float) -> Callable[[], Token]:
    """OAuth 2.0 client credentials (RFC 6749 4.4) with HTTP Basic client authentication,
    as librdkafka's ``sasl.oauthbearer.method=oidc`` sends it."""
    ctx = ssl.create_default_context(cafile=spec.ca_location) if spec.ca_location else None
    basic = base64.b64encode(f"{urllib.parse.quote(spec.client_id)}:"
                             f"{urllib.parse.quote(spec.client_secret)}".encode()).decode()
    form = {"grant_type": "client_credentials", **({"scope": spec.scope} if spec.scope else {})}
    body = urllib.parse.urlencode(form).encode()
    where = f"token endpoint {_safe_url(spec.token_endpoint)}"

    def fetch() -> Token:
        req = urllib.request.Request(spec.token_endpoint, data=body, method="POST", headers={
            "Authorization": f"Basic {basic}", "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as res:
                doc = json.loads(res.read(1 << 20))
        except urllib.error.HTTPError as e:
            raise TokenUnavailable(f"{where} refused: HTTP {e.code} {_oauth_error(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            raise TokenUnavailable(f"{where} unreachable: {getattr(e, 'reason', e)}") from None
        except ValueError:
            raise TokenUnavailable(f"{where} answered something that is not JSON") from None
        value = doc.get("access_token") if isinstance(doc, dict) else None
        if not isinstance(value, str) or not value:
            raise TokenUnavailable(f"{where} answered without an access_token")
        claims = jwt_claims(value)
        lifetime = doc.get("expires_in")
        expires = (time.time() + float(lifetime) if isinstance(lifetime, int | float) else
                   float(claims.get("exp", time.time() + UNKNOWN_LIFETIME)))
        return Token(value, expires, str(claims.get(spec.principal_claim) or spec.client_id))
    return fetch


def _oauth_error(e: urllib.error.HTTPError) -> str:
    """The OAuth error code of a refusal (RFC 6749 5.2), e.g. invalid_client; its
    description is left out: servers are free to put anything in it."""
    try:
        doc = json.loads(e.read(64 << 10))
        code = doc.get("error") if isinstance(doc, dict) else None
    except (ValueError, OSError):
        code = None
    return str(code)[:80] if code else str(e.reason)[:80]


def _safe_url(url: str) -> str:
    """The URL without user info or query (where a careless setup might put a secret)."""
    p = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((p.scheme, p.hostname + (f":{p.port}" if p.port else "")
                                    if p.hostname else "", p.path, "", ""))


def file_fetch(path: str) -> tuple[Callable[[], Token], Callable[[], bool]]:
    """A token read from ``path``, and a check that the file changed since (a Kubernetes
    projected token is replaced by swapping a symlink: the inode changes)."""
    seen: list[tuple[int, int, int] | None] = [None]

    def stat() -> tuple[int, int, int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def changed() -> bool:
        return stat() != seen[0]

    def fetch() -> Token:
        seen[0] = stat()
        try:
            with open(path, encoding="utf-8") as f:
                value = f.read(1 << 20).strip()
        except (OSError, UnicodeDecodeError) as e:
            raise TokenUnavailable(f"token file {path}: {getattr(e, 'strerror', None) or e}") from None
        if not value:
            raise TokenUnavailable(f"token file {path} is empty")
        claims = jwt_claims(value)
        expires = float(claims.get("exp", time.time() + UNKNOWN_LIFETIME))
        if expires <= time.time():
            raise TokenUnavailable(f"token file {path} holds a token that expired at "
                                   f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(expires))}")
        return Token(value, expires, str(claims.get("sub") or "lagwatch"))
    return fetch, changed


def aws_msk_iam_fetch(spec: TokenSpec) -> Callable[[], Token]:
    """A SigV4-presigned ``kafka-cluster:Connect`` URL, base64url-encoded, from AWS's signer
    (aws-msk-iam-sasl-signer-python; 900 s lifetime). MSK's IAM listener takes it as an
    OAUTHBEARER token from any client."""
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider as Signer

    aws = spec.aws
    assert aws is not None

    def fetch() -> Token:
        try:
            if aws.role_arn:
                value, expiry_ms = Signer.generate_auth_token_from_role_arn(
                    aws.region, aws.role_arn, aws.role_session_name)
            elif aws.profile:
                value, expiry_ms = Signer.generate_auth_token_from_profile(aws.region, aws.profile)
            else:
                value, expiry_ms = Signer.generate_auth_token(aws.region)
        except Exception as e:  # noqa: BLE001 - botocore's errors name no secret
            raise TokenUnavailable(f"AWS MSK IAM ({aws.region}): {type(e).__name__}: {e}") from None
        return Token(value, expiry_ms / 1000, "lagwatch")
    return fetch


def source_for(name: str, spec: TokenSpec, timeout: float) -> TokenSource:
    """A started source for one cluster (not yet waited on)."""
    changed = None
    if spec.kind == "oidc":
        fetch = oidc_fetch(spec, timeout)
    elif spec.kind == "file":
        fetch, changed = file_fetch(spec.token_file)
    else:
        fetch = aws_msk_iam_fetch(spec)
    return TokenSource(name, fetch, dict(spec.extensions), changed)


_SOURCES: dict[str, TokenSource] = {}
_SOURCES_LOCK = threading.Lock()


def for_cluster(name: str, spec: TokenSpec | None, timeout: float) -> TokenSource | None:
    """The worker process's one token source of a cluster, started at the first call (which
    waits up to ``timeout`` for the first token); None when the cluster uses no tokens."""
    if spec is None:
        return None
    with _SOURCES_LOCK:
        src = _SOURCES.get(name)
        if src is None:
            src = _SOURCES[name] = source_for(name, spec, timeout).start(timeout)
        return src

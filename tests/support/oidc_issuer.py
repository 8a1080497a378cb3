"""A small OIDC token issuer on loopback, for a broker that validates real JWTs.

``POST /token``: OAuth 2.0 client credentials (RFC 6749 4.4), the client authenticated by
HTTP Basic or by form fields; answers an RS256 JWT with ``iss``, ``aud``, ``sub`` (the client id),
``scope``, ``iat`` and ``exp``, and ``expires_in``. A wrong secret gets 401
``invalid_client``. ``GET /jwks``: the public key, which Kafka's
``OAuthBearerValidatorCallbackHandler`` fetches to check signatures.

``foreign_token()`` signs a token with another key under the same ``kid``: a broker that
really checks signatures refuses it.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

KID = "lagwatch-test-key"


@dataclass
class Issuer:
    client_id: str
    client_secret: str
    lifetime: float = 15.0  # seconds each token lives
    audience: str = "lagwatch-test-cluster"  # the aud claim; Kafka 4.4's validator requires one
    issued: list[dict[str, Any]] = field(default_factory=list)  # claims of every token issued
    tokens: list[str] = field(default_factory=list)  # every token issued or forged, to grep for
    refused: int = 0
    down: bool = False  # answer 503 to every token request
    _key: Any = None
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    def start(self) -> Issuer:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:  # quiet: pytest shows failures
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path != "/jwks":
                    return self._send(404, {"error": "not_found"})
                jwk = json.loads(RSAAlgorithm.to_jwk(issuer._key.public_key()))
                self._send(200, {"keys": [{**jwk, "kid": KID, "use": "sig", "alg": "RS256"}]})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", 0))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
                code, doc = issuer._token_answer(self.headers.get("Authorization", ""), form)
                self._send(code, doc)

            def _send(self, code: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="oidc-issuer", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _token_answer(self, authorization: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if self.down:
            return 503, {"error": "temporarily_unavailable"}
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if authorization.startswith("Basic "):
            pair = base64.b64decode(authorization[6:]).decode()
            client_id, _, secret = (urllib.parse.unquote(p) for p in pair.partition(":"))
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        if (client_id, secret) != (self.client_id, self.client_secret):
            self.refused += 1
            return 401, {"error": "invalid_client", "error_description": "bad client credentials"}
        token = self.mint(sub=client_id, scope=form.get("scope", ""))
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": int(self.lifetime)}

    def mint(self, sub: str, scope: str = "", lifetime: float | None = None, key: Any = None) -> str:
        """A signed token; ``key`` another private key (a forgery)."""
        now = int(time.time())
        claims = {"iss": self.url, "aud": self.audience, "sub": sub, "iat": now,
                  "exp": now + int(self.lifetime if lifetime is None else lifetime),
                  **({"scope": scope} if scope else {})}  # Kafka refuses an empty scope claim
        if key is None:
            self.issued.append(claims)
        token = jwt.encode(claims, key or self._key, algorithm="RS256", headers={"kid": KID})
        self.tokens.append(token)
        return token

    def foreign_token(self, sub: str) -> str:
        """A token like the issuer's, signed by a key the JWKS does not have."""
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return self.mint(sub, lifetime=300, key=other)

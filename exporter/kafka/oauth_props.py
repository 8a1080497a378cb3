"""Which token source a cluster's configuration asks for, decided at configuration time.

A cluster that logs in with SASL/OAUTHBEARER gets its tokens from one source that serves
both of lagwatch's Kafka clients (exporter/kafka/tokens.py): librdkafka through an
``oauth_cb``, kafka-python through its token provider. The source is one of

* OIDC client credentials, configured with librdkafka's own properties
  (``sasl.oauthbearer.method: oidc``, ``sasl.oauthbearer.client.id``, ``.client.secret``,
  ``.token.endpoint.url``, ``.scope``, ``.extensions``; librdkafka's CONFIGURATION.md);
* a token file, re-read when it changes (``oauthbearer_token_file``, a lagwatch key: a
  Kubernetes projected service-account token, or a token another process renews);
* AWS MSK IAM (``aws_msk_iam``, a lagwatch key: region, optionally a role and a profile),
  signed by ``aws-msk-iam-sasl-signer-python`` (``pip install 'lagwatch[aws]'``).

Anything under ``sasl.oauthbearer.`` that the source does not implement is refused here,
naming the property and the client, so a cluster never starts half able to log in.
This module imports no Kafka client: the configuration loader uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OIDC_PROPS = frozenset({"sasl.oauthbearer.method", "sasl.oauthbearer.client.id",
                        "sasl.oauthbearer.client.secret", "sasl.oauthbearer.token.endpoint.url",
                        "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions",
                        "sasl.oauthbearer.grant.type", "sasl.oauthbearer.sub.claim.name"})
# Properties of the token endpoint's HTTPS connection (librdkafka's names) that the source honours.
HTTPS_PROPS = frozenset({"https.ca.location"})
# What the source reads; none of it is given to librdkafka, which gets an oauth_cb instead.
CONSUMED = OIDC_PROPS | HTTPS_PROPS
# KIP-342: an extension key is letters only and never "auth"; a value is printable ASCII,
# spaces and tabs (lagwatch also refuses "," and "=", its separators in the property).
_EXT_KEY = re.compile(r"[A-Za-z]+")
_EXT_VALUE = re.compile(r"[\x21-\x7E \t]+")
_CLIENTS = "librdkafka and kafka-python, which share lagwatch's token source"


class AuthConfigError(ValueError):
    """A property that cannot be honoured: ``prop`` names it (a client property, or a
    lagwatch key of the cluster), the message says why and for which client."""

    def __init__(self, prop: str, problem: str) -> None:
        super().__init__(problem)
        self.prop = prop


@dataclass(frozen=True)
class AwsMskIam:
    """AWS MSK IAM credentials: the default chain (environment, IRSA, EKS Pod Identity,
    instance profile), a named profile, or a role assumed with them."""

    region: str
    role_arn: str | None = None
    profile: str | None = None
    role_session_name: str = "lagwatch"


@dataclass(frozen=True)
class TokenSpec:
    """What a cluster's token source does; ``kind`` is ``oidc``, ``file`` or ``aws_msk_iam``."""

    kind: str
    token_endpoint: str = ""
    client_id: str = ""
    client_secret: str = field(default="", repr=False)
    scope: str = ""
    principal_claim: str = "sub"
    ca_location: str | None = None
    token_file: str = ""
    aws: AwsMskIam | None = None
    extensions: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:  # the secret never reaches a log through repr()
        return f"TokenSpec(kind={self.kind!r}, endpoint={self.token_endpoint!r}, file={self.token_file!r})"


def mechanism(props: dict[str, str]) -> str:
    return props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()


def uses_sasl(props: dict[str, str]) -> bool:
    return props.get("security.protocol", "plaintext").lower().startswith("sasl")


def token_spec(props: dict[str, str], token_file: str | None = None,
               aws: AwsMskIam | None = None) -> TokenSpec | None:
    """The cluster's token source, or None when it does not use OAUTHBEARER.
    Raises :class:`AuthConfigError` for what neither client could honour."""
    oauth = uses_sasl(props) and mechanism(props) == "OAUTHBEARER"
    if uses_sasl(props) and mechanism(props) == "AWS_MSK_IAM":
        raise AuthConfigError("sasl.mechanism", "AWS_MSK_IAM is not available to librdkafka: use "
                              "sasl.mechanism OAUTHBEARER with the cluster key aws_msk_iam (MSK's "
                              "IAM listener accepts both)")
    _refuse_unknown(props)
    chosen = [k for k, on in (("sasl.oauthbearer.method", props.get("sasl.oauthbearer.method")),
                              ("oauthbearer_token_file", token_file), ("aws_msk_iam", aws)) if on]
    if not oauth:
        if chosen:
            raise AuthConfigError(chosen[0], "needs security.protocol SASL_SSL (or SASL_PLAINTEXT) "
                                  "and sasl.mechanism OAUTHBEARER")
        return None
    if len(chosen) > 1:
        raise AuthConfigError(chosen[1], f"only one token source per cluster, and {chosen[0]} is set")
    extensions = _extensions(props.get("sasl.oauthbearer.extensions", ""))
    if aws is not None:
        return _aws_spec(props, aws)
    if token_file:
        _only_extensions(props, "oauthbearer_token_file")
        return TokenSpec(kind="file", token_file=token_file, extensions=extensions)
    return _oidc_spec(props, extensions)


def _refuse_unknown(props: dict[str, str]) -> None:
    for key in sorted(props):
        if key.startswith("sasl.oauthbearer.") and key not in OIDC_PROPS:
            raise AuthConfigError(key, f"not available to kafka-python: {_CLIENTS}, which does "
                                  "OIDC client credentials, a token file or AWS MSK IAM")
        if key.startswith("https.") and key not in HTTPS_PROPS:
            raise AuthConfigError(key, f"not available to kafka-python: {_CLIENTS} (https.ca.location "
                                  "is honoured)")
        if key == "enable.sasl.oauthbearer.unsecure.jwt" and props[key].lower() == "true":
            raise AuthConfigError(key, f"not available to kafka-python: {_CLIENTS}, which never "
                                  "makes unsigned tokens")


def _only_extensions(props: dict[str, str], source: str) -> None:
    for key in sorted(OIDC_PROPS - {"sasl.oauthbearer.extensions"}):
        if key in props:
            raise AuthConfigError(key, f"is for sasl.oauthbearer.method oidc, and the cluster's "
                                  f"token source is {source}")


def _aws_spec(props: dict[str, str], aws: AwsMskIam) -> TokenSpec:
    _only_extensions(props, "aws_msk_iam")
    if "sasl.oauthbearer.extensions" in props:
        raise AuthConfigError("sasl.oauthbearer.extensions", "MSK IAM takes no SASL extensions")
    if props.get("security.protocol", "").lower() != "sasl_ssl":
        raise AuthConfigError("security.protocol", "aws_msk_iam needs SASL_SSL (MSK's IAM "
                              "listener is TLS only)")
    try:
        import aws_msk_iam_sasl_signer  # noqa: F401 - only its presence is checked here
    except ImportError:
        raise AuthConfigError("aws_msk_iam", "needs the signer: pip install 'lagwatch[aws]' "
                              "(aws-msk-iam-sasl-signer-python)") from None
    return TokenSpec(kind="aws_msk_iam", aws=aws)


def _oidc_spec(props: dict[str, str], extensions: tuple[tuple[str, str], ...]) -> TokenSpec:
    method = props.get("sasl.oauthbearer.method", "default").lower()
    if method != "oidc":
        raise AuthConfigError("sasl.oauthbearer.method", f"{method!r} (librdkafka's unsecured test "
                              f"tokens) is not available to kafka-python: {_CLIENTS}; set "
                              "sasl.oauthbearer.method oidc, or the cluster key "
                              "oauthbearer_token_file or aws_msk_iam")
    grant = props.get("sasl.oauthbearer.grant.type", "client_credentials")
    if grant != "client_credentials":
        raise AuthConfigError("sasl.oauthbearer.grant.type", f"{grant!r} is not available to "
                              f"kafka-python: {_CLIENTS}, which does client_credentials")
    for key in ("sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
                "sasl.oauthbearer.token.endpoint.url"):
        if not props.get(key):
            raise AuthConfigError(key, "is required with sasl.oauthbearer.method oidc")
    url = props["sasl.oauthbearer.token.endpoint.url"]
    if not url.lower().startswith(("https://", "http://")):
        raise AuthConfigError("sasl.oauthbearer.token.endpoint.url", "expected an http(s) URL")
    return TokenSpec(kind="oidc", token_endpoint=url, client_id=props["sasl.oauthbearer.client.id"],
                     client_secret=props["sasl.oauthbearer.client.secret"],
                     scope=props.get("sasl.oauthbearer.scope", ""),
                     principal_claim=props.get("sasl.oauthbearer.sub.claim.name", "sub"),
                     ca_location=props.get("https.ca.location"), extensions=extensions)


def _extensions(raw: str) -> tuple[tuple[str, str], ...]:
    """``key=value,key=value`` (librdkafka's format) -> pairs, checked as KIP-342 says."""
    out = []
    for part in (p.strip() for p in raw.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        if not sep or not _EXT_KEY.fullmatch(key) or key == "auth" or not _EXT_VALUE.fullmatch(value):
            raise AuthConfigError("sasl.oauthbearer.extensions",
                                  f"expected key=value,... with letters-only keys other than auth "
                                  f"and printable values, got {part.split('=')[0]!r}=...")
        out.append((key, value))
    return tuple(out)

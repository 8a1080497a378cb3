"""Log end offsets (LEO) with a ListOffsets request librdkafka cannot send.

Why hand-written: the broker returns the leader's LEO (not the high watermark)
only for ListOffsets with ``replica_id = -2`` (DEBUGGING_REPLICA_ID), and
librdkafka hard-codes ``replica_id = -1`` with no raw-request API
(shared/reference/kafka-protocol.md §1). So this module speaks just enough of
the protocol: ListOffsets v1, plus SaslHandshake/SaslAuthenticate (PLAIN and
SCRAM-SHA-256/512) and TLS, configured from the same librdkafka properties as
the rest of the exporter. Anything else (GSSAPI, OAUTHBEARER) disables LEO for
that cluster with one warning; every other metric is unaffected.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import socket
import ssl
import struct
import threading
from collections.abc import Iterable

LIST_OFFSETS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 2, 17, 36
DEBUGGING_REPLICA_ID = -2
LATEST = -1
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class LeoUnsupported(Exception):
    """The cluster's security settings need something this client does not speak."""


class ProtocolError(Exception):
    pass


# -- wire encoding -------------------------------------------------------------

def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str,
                   body: bytes) -> bytes:
    msg = struct.pack(">hhi", api_key, version, correlation_id) + _str(client_id) + body
    return struct.pack(">i", len(msg)) + msg


def encode_list_offsets_v1(partitions: dict[str, list[int]]) -> bytes:
    out = [struct.pack(">ii", DEBUGGING_REPLICA_ID, len(partitions))]
    for topic, parts in partitions.items():
        out.append(_str(topic) + struct.pack(">i", len(parts)))
        out.extend(struct.pack(">iq", p, LATEST) for p in parts)
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ProtocolError("truncated response")
        vals = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return vals

    def string(self) -> str | None:
        (n,) = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode(errors="replace")

    def bytes_(self) -> bytes:
        (n,) = self.take(">i")
        if n < 0:
            return b""
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b


def decode_list_offsets_v1(body: bytes) -> dict[tuple[str, int], tuple[int, int]]:
    """Map (topic, partition) -> (error_code, offset)."""
    r = _Reader(body)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    (nt,) = r.take(">i")
    for _ in range(nt):
        topic = r.string() or ""
        (np_,) = r.take(">i")
        for _ in range(np_):
            part, err, _ts, off = r.take(">ihqq")
            out[(topic, part)] = (err, off)
    return out


# -- SCRAM (RFC 5802), only the client side --------------------------------------

class ScramClient:
    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.hash = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
        self.user = user.replace("=", "=3D").replace(",", "=2C")
        self.password = password.encode()
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.bare = f"n={self.user},r={self.nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        attrs = dict(kv.split("=", 1) for kv in server_first.decode().split(","))
        if not attrs.get("r", "").startswith(self.nonce):
            raise ProtocolError("SCRAM server nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac(self.hash().name, self.password,
                                     base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored = self.hash(client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth_msg = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        sig = hmac.new(stored, auth_msg, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, sig, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self.server_signature = hmac.new(server_key, auth_msg, self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(kv.split("=", 1) for kv in server_final.decode().split(",") if "=" in kv)
        if "e" in attrs:
            raise ProtocolError(f"SCRAM authentication failed: {attrs['e']}")
        if base64.b64decode(attrs.get("v", "")) != self.server_signature:
            raise ProtocolError("SCRAM server signature mismatch")


# -- connections ---------------------------------------------------------------

class _Conn:
    def __init__(self, host: str, port: int, props: dict[str, str], timeout: float) -> None:
        self.timeout = timeout
        self.corr = 0
        proto = props.get("security.protocol", "plaintext").lower()
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            if proto in ("ssl", "sasl_ssl"):
                sock = _ssl_context(props).wrap_socket(sock, server_hostname=host)
            self.sock = sock
            if proto.startswith("sasl"):
                self._authenticate(props)
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.corr += 1
        self.sock.settimeout(self.timeout)
        self.sock.sendall(encode_request(api_key, version, self.corr, "lagwatch", body))
        (size,) = struct.unpack(">i", self._recv(4))
        data = self._recv(size)
        (corr,) = struct.unpack_from(">i", data)
        if corr != self.corr:
            raise ProtocolError(f"correlation id {corr} != {self.corr}")
        return data[4:]

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def _authenticate(self, props: dict[str, str]) -> None:
        mech = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()
        user, password = props.get("sasl.username", ""), props.get("sasl.password", "")
        r = _Reader(self.call(SASL_HANDSHAKE, 1, _str(mech)))
        (err,) = r.take(">h")
        if err:
            raise ProtocolError(f"broker refused SASL mechanism {mech} (error {err})")
        if mech == "PLAIN":
            self._sasl_step(b"\0" + user.encode() + b"\0" + password.encode())
            return
        scram = ScramClient(mech, user, password)
        server_first = self._sasl_step(scram.first())
        scram.verify(self._sasl_step(scram.final(server_first)))

    def _sasl_step(self, payload: bytes) -> bytes:
        r = _Reader(self.call(SASL_AUTHENTICATE, 0, struct.pack(">i", len(payload)) + payload))
        (err,) = r.take(">h")
        msg = r.string()
        data = r.bytes_()
        if err:
            # The broker's message names the mechanism, never the password.
            raise ProtocolError(f"SASL authentication failed (error {err}): {msg or ''}".strip())
        return data


def _ssl_context(props: dict[str, str]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=props.get("ssl.ca.location"))
    if props.get("enable.ssl.certificate.verification", "true").lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif props.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        ctx.check_hostname = False
    if props.get("ssl.certificate.location"):
        ctx.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location"),
                            props.get("ssl.key.password"))
    return ctx


def check_supported(props: dict[str, str]) -> None:
    proto = props.get("security.protocol", "plaintext").lower()
    if proto not in ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl"):
        raise LeoUnsupported(f"security.protocol {proto!r}")
    if proto.startswith("sasl"):
        mech = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()
        if mech not in SUPPORTED_MECHANISMS:
            raise LeoUnsupported(f"sasl.mechanism {mech} (supported: {', '.join(SUPPORTED_MECHANISMS)})")


class LeoReader:
    """One connection per broker, reused across cycles; reconnects after any error."""

    def __init__(self, props: dict[str, str], timeout: float) -> None:
        check_supported(props)
        self.props, self.timeout = props, timeout
        self._conns: dict[tuple[str, int], _Conn] = {}
        self._lock = threading.Lock()
        self.requests = 0

    def fetch(self, host: str, port: int, tps: Iterable[tuple[str, int]]
              ) -> dict[tuple[str, int], int]:
        """LEO of partitions led by the broker at host:port. Raises on connection errors."""
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        key = (host, port)
        with self._lock:
            conn = self._conns.pop(key, None)
        try:
            if conn is None:
                conn = _Conn(host, port, self.props, self.timeout)
                self.requests += 1
            body = conn.call(LIST_OFFSETS, 1, encode_list_offsets_v1(by_topic))
            self.requests += 1
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        with self._lock:
            self._conns[key] = conn
        return {tp: off for tp, (err, off) in decode_list_offsets_v1(body).items() if err == 0}

    def close(self) -> None:
        with self._lock:
            for c in self._conns.values():
                c.close()
            self._conns.clear()

"""HTTP endpoints: /metrics, /healthz, /readyz, /api/v1/..., and the status page at /.

Optional TLS and basic auth come from a web config file in the format of the
Prometheus exporter-toolkit (``tls_server_config``, ``basic_auth_users`` with
bcrypt hashes), so operators can reuse what they already have.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from exporter.config import ConfigError
from exporter.expose import api, scrape, statuspage
from exporter.expose.gzip_scrape import accepts_gzip, gzip_chunks
from exporter.store import Store

log = logging.getLogger("lagwatch.http")
_BCRYPT_RE = re.compile(r"^\$2[abxy]\$\d\d\$[./A-Za-z0-9]{53}$")
_WEB_KEYS = ("basic_auth_users", "tls_server_config")
_TLS_KEYS = ("cert_file", "key_file")
HANDSHAKE_TIMEOUT = 10.0  # a client that connects and sends nothing must not hold the server
IDLE_TIMEOUT = 300.0


class WebConfig:
    def __init__(self, path: str | None) -> None:
        self.cert_file = self.key_file = None
        self.ssl_context: ssl.SSLContext | None = None
        self.users: dict[str, bytes] = {}
        if not path:
            return
        try:
            with open(path) as f:
                data = yaml.safe_load(f) or {}
        except OSError as e:
            raise ConfigError("web_config", f"cannot read {path}: {e.strerror}") from None
        except yaml.YAMLError:
            raise ConfigError("web_config", f"invalid YAML in {path}") from None
        if not isinstance(data, dict):
            raise ConfigError("web_config", "the top level must be a mapping")
        # Unknown keys are errors: a typo must not silently turn authentication or TLS off.
        for k in data:
            if k not in _WEB_KEYS:
                raise ConfigError(f"web_config.{k}", f"unknown or unsupported setting (lagwatch "
                                                     f"supports: {', '.join(_WEB_KEYS)})")
        self._load_tls(data.get("tls_server_config") or {})
        self._load_users(data.get("basic_auth_users") or {})
        self._ok_cache: dict[bytes, bool] = {}

    def _load_tls(self, tls: Any) -> None:
        """``tls_server_config``: cert_file and key_file, both readable, loaded now."""
        if not isinstance(tls, dict):
            raise ConfigError("web_config.tls_server_config", "expected a mapping with cert_file "
                                                              "and key_file")
        for k in tls:
            if k not in _TLS_KEYS:
                raise ConfigError(f"web_config.tls_server_config.{k}",
                                  f"not supported by lagwatch (supported: {', '.join(_TLS_KEYS)})")
        if not tls:
            return
        self.cert_file, self.key_file = tls.get("cert_file"), tls.get("key_file")
        if not self.cert_file or not self.key_file:
            raise ConfigError("web_config.tls_server_config",
                              "cert_file and key_file are both required")
        for key, file in (("cert_file", self.cert_file), ("key_file", self.key_file)):
            try:
                with open(str(file), "rb"):
                    pass
            except OSError as e:
                raise ConfigError(f"web_config.tls_server_config.{key}",
                                  f"cannot read {file}: {e.strerror}") from None
        self.ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            self.ssl_context.load_cert_chain(str(self.cert_file), str(self.key_file))
        except ssl.SSLError as e:
            raise ConfigError("web_config.tls_server_config",
                              f"cannot load the certificate and key: {e.reason or e}") from None

    def _load_users(self, users: Any) -> None:
        """``basic_auth_users``: user -> bcrypt hash (bcrypt is needed only then)."""
        if not isinstance(users, dict):
            raise ConfigError("web_config.basic_auth_users", "expected a mapping user: bcrypt-hash")
        if users:
            try:
                import bcrypt  # noqa: F401 - only needed when basic auth is configured
            except ImportError:
                raise ConfigError("web_config.basic_auth_users",
                                  "basic auth needs the bcrypt package (pip install bcrypt)") from None
        for u, h in users.items():
            if not isinstance(h, str) or not _BCRYPT_RE.match(h):
                raise ConfigError(f"web_config.basic_auth_users.{u}", "expected a bcrypt hash")
            self.users[str(u)] = h.encode()

    def authorized(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        raw = header[6:].encode()
        cached = self._ok_cache.get(raw)
        if cached is not None:
            return cached
        import bcrypt

        try:
            user, _, pw = base64.b64decode(raw, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        h = self.users.get(user)
        ok = bool(h) and bcrypt.checkpw(pw.encode(), h)  # type: ignore[arg-type]
        if len(self._ok_cache) > 1000:
            self._ok_cache.clear()
        self._ok_cache[raw] = ok
        return ok


def make_server(store: Store, listen: tuple[str, int], web: WebConfig | None = None,
                status_refresh: int = 10) -> ThreadingHTTPServer:
    server = _Server(listen, _Handler)
    server.store, server.web, server.status_refresh = store, web or WebConfig(None), status_refresh
    server.ssl_context = server.web.ssl_context
    return server


class _Handler(BaseHTTPRequestHandler):
    """One request; what it serves comes from its :class:`_Server`."""

    server: _Server
    server_version = "lagwatch"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), fmt % args)

    def _send(self, code: int, body: bytes, ctype: str, extra: dict[str, str] | None = None
              ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_chunks(self, code: int, chunks: list[scrape.Chunk], ctype: str) -> None:
        """A scrape's body; gzip-encoded where the client takes it (Prometheus does): the
        families kept deflated are written as they are (exporter/expose/gzip_scrape.py)."""
        gz = accepts_gzip(self.headers.get("Accept-Encoding"))
        if gz:
            chunks = list(gzip_chunks(chunks))
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(sum(len(c) for c in chunks)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Vary", "Accept-Encoding")
        if gz:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        if self.command != "HEAD":
            scrape.write_chunks(chunks, self.wfile.write)

    def _json(self, code: int, doc: Any) -> None:
        body = json.dumps(doc, allow_nan=False, ensure_ascii=False, indent=1).encode()
        self._send(code, body, "application/json; charset=utf-8")

    def do_HEAD(self) -> None:  # noqa: N802 - http.server naming
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        # Liveness carries no data: left open so container health checks and probes
        # work with basic auth on. Everything else, /readyz included, needs credentials.
        if urlsplit(self.path).path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
            return
        if not self.server.web.authorized(self.headers.get("Authorization")):
            self._send(401, b"unauthorized\n", "text/plain",
                       {"WWW-Authenticate": 'Basic realm="lagwatch"'})
            return
        path = urlsplit(self.path).path
        try:
            self._route(path)
        except BrokenPipeError:
            pass
        except Exception:  # noqa: BLE001 - one bad request must not kill the server
            log.exception("error serving %s", path)
            self._send(500, b"internal error\n", "text/plain")

    def _route(self, path: str) -> None:
        if path == "/metrics":
            chunks, ctype = scrape.scrape(self.server.store.records(), self.headers.get("Accept"),
                                          time.time())
            self._send_chunks(200, chunks, ctype)
        elif path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif path == "/readyz":
            ready = self.server.store.ready()
            self._send(200 if ready else 503, b"ready\n" if ready else b"not ready\n",
                       "text/plain")
        elif path == "/":
            body = statuspage.render(self.server.store.views(), self.server.status_refresh).encode()
            self._send(200, body, "text/html; charset=utf-8")
        elif path.startswith("/api/v1/"):
            self._api(path[len("/api/v1/"):])
        else:
            self._send(404, b"not found\n", "text/plain")

    def _api(self, rest: str) -> None:
        parts = [unquote(p) for p in rest.split("/")]
        views = {v.cluster: v for v in self.server.store.views()}
        if parts == ["clusters"]:
            self._json(200, [api.cluster_doc(v) for v in views.values()])
            return
        if len(parts) >= 2 and parts[0] == "clusters" and parts[1] in views:
            v = views[parts[1]]
            if len(parts) == 2:
                self._json(200, api.cluster_doc(v))
                return
            if parts[2:] == ["groups"]:
                self._json(200, [api.group_summary(g) for g in
                                 sorted(v.groups.values(), key=lambda g: g.group)])
                return
            if parts[2:] == ["partitions"]:
                self._json(200, api.partitions_doc(v))
                return
            if len(parts) >= 4 and parts[2] == "groups":
                gid = "/".join(parts[3:])  # group ids may contain '/'
                g = v.groups.get(gid)
                if g is not None:
                    self._json(200, api.group_doc(v.cluster, g))
                    return
        self._json(404, {"error": "not found"})


class _Server(ThreadingHTTPServer):
    """TLS handshakes happen in the per-connection thread, with a timeout.

    Wrapping the listening socket would run each handshake inside accept(), in the
    single serving thread: one client that connects and sends nothing (a port scan, a
    plain TCP health check) would block every scrape.
    """

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None
    store: Store
    web: WebConfig
    status_refresh: int  # seconds between reloads of the status page

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            conn = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ValueError) as e:  # plain HTTP on the TLS port, scanners, timeouts
            log.debug("TLS handshake with %s failed: %s", client_address[0], e)
            return
        try:
            conn.settimeout(IDLE_TIMEOUT)
            super().finish_request(conn, client_address)
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    t.start()
    return t

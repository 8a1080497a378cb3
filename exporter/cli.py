"""``lagwatch`` / ``python -m exporter``: parse flags, validate config, run until signalled."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import math
import signal
import sys
import threading

from exporter import __version__, logs
from exporter.config import _NAME_RE, Config, ConfigError, _bootstrap, build_config, load_yaml, parse_listen
from exporter.config_docs import CLI_ONLY, cli_flags, cli_help
from exporter.expose.server import WebConfig, make_server, serve_in_thread
from exporter.runner import Exporter
from exporter.runtime import collect_less

log = logging.getLogger("lagwatch")
# Seconds a thread holds the interpreter lock while another waits for it (see
# _share_the_interpreter).
SWITCH_INTERVAL = 0.0005
# mallopt(3) parameters (glibc's malloc.h)
M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8


class _Parser(argparse.ArgumentParser):
    """Usage errors become one-line ConfigErrors naming the flag (exit code 2 like the rest)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("argument ") and ": " in message:
            flag, _, problem = message[len("argument "):].partition(": ")
            raise ConfigError(flag.split("/")[0], problem)
        raise ConfigError("command line", message)


def parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="lagwatch",
        description="Kafka consumer-lag exporter: lag in offsets and seconds, stalled, stopped "
                    "and livelocked consumers, Spark Structured Streaming queries.")
    # Help, defaults and choices come from the configuration's fields (exporter/config.py).
    for flag in cli_flags():
        ap.add_argument(flag.flag, help=cli_help(flag), metavar=flag.doc["metavar"],
                        choices=flag.doc["choices"],
                        action="append" if isinstance(flag.default, frozenset) else None)
    ap.add_argument("--config", metavar=CLI_ONLY["--config"][0], help=CLI_ONLY["--config"][1])
    ap.add_argument("--version", action="version", version=f"lagwatch {__version__}",
                    help=CLI_ONLY["--version"][1])
    return ap


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return parser().parse_args(argv)


def load(argv: list[str] | None) -> Config:
    args = parse_args(argv)
    file_data = load_yaml(args.config) if args.config else {}
    overrides = {
        "bootstrap_servers": args.bootstrap_servers,
        "cluster": args.cluster,
        "listen": args.listen,
        "interval": args.interval,
        "stall_after": args.stall_after,
        "livelock_after": args.livelock_after,
        "lag_mode": args.lag_mode,
        "compat": args.compat,
        "web_config": args.web_config,
        "log_level": args.log_level,
        "metrics_detail": args.metrics_detail,
        "record_dir": args.record,
    }
    if args.listen is not None:
        parse_listen(args.listen, "--listen")
    if args.interval is not None:
        try:
            if not 0 < float(args.interval) < math.inf:
                raise ValueError
        except ValueError:
            raise ConfigError("--interval", f"expected a positive number of seconds, got "
                                            f"{args.interval!r}") from None
    if args.bootstrap_servers is not None:
        _bootstrap(args.bootstrap_servers, "--bootstrap-servers")
    if args.cluster is not None and not _NAME_RE.match(args.cluster):
        raise ConfigError("--cluster", f"expected 1-63 characters [A-Za-z0-9._-], got {args.cluster!r}")
    return build_config(file_data, overrides)


def _tune_malloc() -> None:
    """Before any thread starts: glibc would give each thread (sampler, HTTP) its own
    malloc arena, and the 50 MB render buffers would fragment across them. And a fixed
    mmap threshold at glibc's own initial 128 KiB: left dynamic, it rises to the size of
    the largest block freed (a cycle's arrays of a chunk, its render buffers), after which
    such temporaries come from the heap, between the arrays the views keep, and the heap
    cannot shrink. https://man7.org/linux/man-pages/man3/mallopt.3.html"""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_ARENA_MAX, 2)
        libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)


def _share_the_interpreter() -> None:
    """A scrape's thread takes the interpreter lock back after every piece it inflates
    and writes; while a cycle computes, each hand-over waits up to the switch interval
    (5 ms by default), which made a 300 MB scrape take seconds more than its own work.
    The interval only matters while threads contend, so an idle exporter pays nothing.
    https://docs.python.org/3/library/sys.html#sys.setswitchinterval"""
    sys.setswitchinterval(SWITCH_INTERVAL)


def main(argv: list[str] | None = None) -> int:
    _tune_malloc()
    _share_the_interpreter()
    try:
        config = load(argv)
        web = WebConfig(config.web_config)
    except ConfigError as e:
        print(f"lagwatch: configuration error: {e}", file=sys.stderr)
        return 2
    logs.setup(config.log_level)
    collect_less()
    exporter = Exporter(config)
    try:
        server = make_server(exporter.store, config.listen, web)
    except OSError as e:
        print(f"lagwatch: cannot listen on {config.listen[0]}:{config.listen[1]}: {e.strerror}",
              file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    host, port = server.server_address[:2]
    scheme = "https" if web.cert_file else "http"
    log.info("lagwatch %s listening on %s://%s:%s/ for cluster(s): %s", __version__, scheme, host,
             port, ", ".join(f"{c.name} ({c.bootstrap_servers})" for c in config.clusters))
    serve_in_thread(server)
    exporter.start()
    stop.wait()
    log.info("shutting down")
    server.shutdown()
    exporter.stop()
    return 0

"""How late do progress events reach a Python listener, with PySpark's own py4j adapter
and with the listener's JSON bridge (``spark_metrics.listener._JsonProgressBridge``)?

Three rate-source queries with a 500 ms trigger in one local[2] driver, each adapter
in its own driver run; ``--busy N`` starts N busy loops next to it (a starved driver, as
in the fleet's start). Prints, per adapter, the delivery delay (event received minus the
batch's end) and the cost of turning the JVM event into Python data. A figure, not a test.

    python -m bench.spark_progress_delivery --seconds 60 --busy 6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def _batch_end(progress: dict[str, Any]) -> float:
    start = datetime.strptime(progress["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
    duration = progress.get("batchDuration") or progress["durationMs"]["triggerExecution"]
    return start.replace(tzinfo=UTC).timestamp() + duration / 1000


def driver(adapter: str, seconds: float) -> dict[str, Any]:
    """One driver run (in a child process: one SparkContext per process)."""
    from pyspark.sql.streaming import StreamingQueryListener
    from pyspark.sql.streaming.listener import JStreamingQueryListener

    from spark_metrics.listener import _JsonProgressBridge

    delays: list[float] = []
    costs: list[float] = []

    class Recorder(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            d = json.loads(p) if isinstance(p, str) else json.loads(p.json)
            delays.append(time.time() - _batch_end(d))

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    base = _JsonProgressBridge if adapter == "json" else JStreamingQueryListener

    class Timed(base):  # type: ignore[misc, valid-type]
        """Times the conversion alone (the bridge's own call, or PySpark's)."""

        def onQueryProgress(self, jevent: Any) -> None:
            t = time.perf_counter()
            if adapter == "json":
                text = jevent.progress().json()
                costs.append(time.perf_counter() - t)
                self.pylistener.onQueryProgress(type("E", (), {"progress": text})())
            else:
                from pyspark.sql.streaming.listener import QueryProgressEvent
                event = QueryProgressEvent.fromJObject(jevent)
                costs.append(time.perf_counter() - t)
                self.pylistener.onQueryProgress(event)

    rec = Recorder()
    _run_queries(rec, lambda: Timed(rec), seconds)
    return {"delays": delays, "costs": costs}


def _run_queries(rec: Any, adapter: Callable[[], Any], seconds: float) -> None:
    """Three rate-source queries for ``seconds``, whose events reach the listener ``rec``
    through the JVM-side wrapper of ``adapter()`` (made once the callback server runs)."""
    from py4j.java_gateway import java_import
    from pyspark.java_gateway import ensure_callback_server_started
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    jvm: Any = spark.sparkContext._jvm
    java_import(jvm, "org.apache.spark.sql.streaming.*")
    ensure_callback_server_started(spark.sparkContext._gateway)
    rec._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(adapter())
    spark.streams.addListener(rec)
    queries = [spark.readStream.format("rate").option("rowsPerSecond", 20).load()
               .writeStream.format("noop").trigger(processingTime="500 milliseconds").start()
               for _ in range(3)]
    time.sleep(seconds)
    for q in queries:
        q.stop()
    spark.streams.removeListener(rec)
    spark.stop()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--busy", type=int, default=0, help="busy loops running beside the driver")
    ap.add_argument("--driver", choices=["pyspark", "json"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        print(json.dumps(driver(args.driver, args.seconds)))
        return
    print(f"3 queries, 500 ms trigger, {args.seconds:.0f} s, {args.busy} busy loop(s), "
          f"{os.cpu_count()} cores")
    print("| adapter | events | delivery delay p50 / p95 / max (s) | conversion p50 / p95 (ms) |")
    print("|---|---|---|---|")
    for adapter in ("pyspark", "json"):
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        try:
            out = subprocess.run([sys.executable, "-m", "bench.spark_progress_delivery", "--driver",
                                  adapter, "--seconds", str(args.seconds)],
                                 capture_output=True, text=True, check=True).stdout
        finally:
            for b in busy:
                b.kill()
        r = json.loads(out.strip().splitlines()[-1])
        d, c = r["delays"], r["costs"]
        name = "PySpark's (field by field)" if adapter == "pyspark" else "lagwatch's JSON bridge"
        print(f"| {name} | {len(d)} | {_pct(d, .5):.3f} / {_pct(d, .95):.3f} / {max(d):.3f} | "
              f"{_pct(c, .5) * 1000:.1f} / {_pct(c, .95) * 1000:.1f} |")


if __name__ == "__main__":
    main()

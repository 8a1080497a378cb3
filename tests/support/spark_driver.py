"""A PySpark driver with a LagListener, run as its own process and driven over stdin/stdout.

    <python> tests/support/spark_driver.py --bootstrap HOST:PORT --jars a.jar,b.jar
    <python> tests/support/spark_driver.py --bootstrap HOST:PORT --remote sc://127.0.0.1:PORT

With ``--remote`` it is a Spark Connect client of that server (the connector jars are the
server's), and queries run on the server.

The listener tests run it with the suite's interpreter (pyspark 4.0) and with the
PySpark 3.5 virtualenv (devenv/pyenvs.py): two pyspark versions cannot share a
process. It imports only the standard library, pyspark and what lagwatch-client
installs (it runs as a script, so the repository is not on ``sys.path``); in the 3.5
virtualenv it is a driver with the light install and nothing else.

Requests are JSON objects, one per line on stdin: ``{"cmd": "start", ...}``. Every
reply is one line ``@@ <json>`` on stdout (the JVM may print other lines there):
``{"ok": ...}`` or ``{"error": "<traceback>"}``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import spark_metrics

# What the exporter needs and a driver must not: absent from the light install.
EXPORTER_ONLY = ("exporter", "prometheus_client", "yaml", "bcrypt")
# Spark Connect 3.5 addListener attempts: each costs the server's 10 s wait at most, and the
# client's start timeout (tests/support/spark_proc.py) covers all of them.
ADD_LISTENER_ATTEMPTS = 8


class Driver:
    def __init__(self, bootstrap: str, jars: str, heartbeat: float, remote: str | None = None,
                 listener: bool = True) -> None:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # Python workers (UDFs) use this venv too
        self.bootstrap = bootstrap
        self.remote = remote
        if remote is not None:  # a Spark Connect client: the server has the jars and settings
            self.spark = SparkSession.builder.remote(remote).getOrCreate()
        else:
            self.spark = (SparkSession.builder.master("local[2]").appName("lagwatch-tests")
                          .config("spark.jars", jars)
                          .config("spark.ui.enabled", "false")
                          .config("spark.sql.shuffle.partitions", "2")
                          .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
                          .config("spark.sql.streaming.stopTimeout", "60s")
                          .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC")
                          .getOrCreate())
            self.spark.sparkContext.setLogLevel("ERROR")
        self.listeners: dict[str, Any] = {}
        if listener:
            self.listeners["main"] = spark_metrics.LagListener(bootstrap_servers=bootstrap,
                                                               heartbeat_interval=heartbeat)
            self._add_listener(self.listeners["main"])
        self.queries: dict[str, Any] = {}
        self.checkpoints: dict[str, str] = {}

    def _add_listener(self, listener: Any) -> None:
        """addListener, tried again where a Spark Connect 3.5 server gave up on the Python
        process it starts for a listener: it waits 10 s for it to connect back (hard-coded in
        PythonWorkerFactory.createSimpleWorker), and on a loaded machine the process's
        imports (pyspark's Connect client, grpc, pandas) can take longer, attempt after
        attempt while the load lasts. Nothing of the listener runs before it connects: a
        new attempt starts from nothing."""
        for attempt in range(1, ADD_LISTENER_ATTEMPTS + 1):
            try:
                self.spark.streams.addListener(listener)
                return
            except Exception as e:
                if "Python worker failed to connect back" not in str(e) \
                        or attempt == ADD_LISTENER_ATTEMPTS:
                    raise
                print(f"addListener attempt {attempt}: {e}; trying again", file=sys.stderr,
                      flush=True)

    def hello(self) -> dict[str, Any]:
        session = getattr(self.spark, "session_id", None)  # Spark Connect 4.x
        if session is None and self.remote is not None:
            session = self.spark.client._session_id  # 3.5
        return {"pyspark": pyspark.__version__, "python": sys.executable,
                "spark_metrics": spark_metrics.__file__, "session_id": session,
                "importable": [m for m in EXPORTER_ONLY if importlib.util.find_spec(m)]}

    def start(self, name: str, topic: str, trigger_ms: int = 500,
              hang_flag: str | None = None) -> dict[str, Any]:
        df = (self.spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", self.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
        if hang_flag is not None:
            df = df.select(_hold_udf(hang_flag)(F.col("value").cast("string")).alias("v"))
        checkpoint = tempfile.mkdtemp(prefix=f"lagwatch-cp-{name}-")
        q = (df.writeStream.format("noop").queryName(name).option("checkpointLocation", checkpoint)
             .trigger(processingTime=f"{trigger_ms} milliseconds").start())
        self.queries[name] = q
        self.checkpoints[name] = checkpoint
        return {"id": str(q.id)}

    def query(self, name: str) -> dict[str, Any]:
        """Spark's own view of the query (the tests compare the exporter's with it)."""
        q = self.queries[name]
        last = q.lastProgress
        return {"active": q.isActive, "trigger_active": bool(q.status["isTriggerActive"]),
                "batch_id": None if last is None else last["batchId"],
                "caught_up": last is not None and _caught_up(last),
                "end_offsets": None if last is None else _offset_sum(last, "endOffset"),
                "latest_offsets": None if last is None else _offset_sum(last, "latestOffset")}

    def planned(self, name: str, batch: int) -> dict[str, int]:
        """The end offsets Spark wrote to the query's offset log for ``batch`` before running
        it, read from the checkpoint's file (``v1``, the metadata, then one line per source):
        the test's own reading, beside the listener's (spark_metrics.offsets.running_batch)."""
        with open(os.path.join(self.checkpoints[name], "offsets", str(batch))) as f:
            lines = f.read().splitlines()
        assert lines[0] == "v1", lines
        (topic_offsets,) = json.loads(lines[2]).values()  # one source, one topic
        return {p: int(o) for p, o in topic_offsets.items()}

    def query_by_id(self, query_id: str) -> dict[str, Any]:
        """The server's view of a query of this session, found by id (a client that did not
        start it, attached to its session)."""
        q = self.spark.streams.get(query_id)
        last = None if q is None else q.lastProgress
        return {"known": q is not None, "active": q is not None and q.isActive,
                "batch_id": None if last is None else last["batchId"]}

    def stop_by_id(self, query_id: str) -> dict[str, Any]:
        q = self.spark.streams.get(query_id)
        if q is not None:
            q.stop()
        return {}

    def stop(self, name: str) -> dict[str, Any]:
        self.queries[name].stop()
        return {}

    def listener(self, name: str | None = None, key: str = "main") -> dict[str, Any]:
        """Counters of a listener; with ``name``, the end offsets it holds for that query."""
        lst = self.listeners[key]
        out: dict[str, Any] = {"counters": lst.counters}
        if name is not None:
            qs = lst._queries.get(str(self.queries[name].id))
            out["end_offsets"] = qs.end_offsets if qs is not None else None
            out["end_offset_sum"] = _total(qs.end_offsets) if qs is not None and qs.end_offsets else None
        return out

    def add_listener(self, key: str, **kwargs: Any) -> dict[str, Any]:
        lst = spark_metrics.LagListener(bootstrap_servers=self.bootstrap, **kwargs)
        self._add_listener(lst)
        self.listeners[key] = lst
        return {}

    def remove_listener(self, key: str) -> dict[str, Any]:
        lst = self.listeners.pop(key)
        self.spark.streams.removeListener(lst)
        lst.close()
        return {"counters": lst.counters}

    def close(self) -> dict[str, Any]:
        for q in self.spark.streams.active:
            q.stop()
        counters = {k: lst.counters for k, lst in self.listeners.items()}
        for lst in self.listeners.values():
            self.spark.streams.removeListener(lst)
            lst.close()
        self.spark.stop()
        return {"counters": counters}


def _caught_up(progress: dict[str, Any]) -> bool:
    """Spark's own word that the batch read everything there was: each source's end offset
    equals the latest offset the source saw (StreamingQueryProgress.sources)."""
    sources = progress.get("sources") or []
    return bool(sources) and all(s.get("latestOffset") is not None
                                 and s.get("endOffset") == s.get("latestOffset") for s in sources)


def _offset_sum(progress: dict[str, Any], key: str) -> int | None:
    """The sum over partitions of a progress event's ``endOffset`` or ``latestOffset``."""
    total = 0
    for src in progress.get("sources") or []:
        offs = src.get(key)
        if isinstance(offs, str):
            offs = json.loads(offs)
        if not isinstance(offs, dict):
            return None
        total += _total(offs)
    return total


def _total(offsets: dict[str, dict[str, Any]]) -> int:
    """The sum of topic -> partition -> offset, Spark's shape of Kafka source offsets."""
    return sum(int(v) for parts in offsets.values() for v in parts.values())


def _hold_udf(flag: str) -> Any:
    def hold(v: Any) -> Any:  # runs in the Python worker: the batch hangs while the flag exists
        if os.path.exists(flag):
            # The first row to block says when the batch really hung (the fleet's ground
            # truth): a batch running when the flag appeared may have passed this UDF already.
            with contextlib.suppress(FileExistsError), open(flag + ".held", "x") as f:
                f.write(repr(time.time()))
        while os.path.exists(flag):
            time.sleep(0.1)
        return v

    return F.udf(hold, StringType(), useArrow=False)


def reply(obj: dict[str, Any]) -> None:
    sys.stdout.write("@@ " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--jars", default="")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--remote")
    ap.add_argument("--no-listener", action="store_true")
    args = ap.parse_args()
    driver = Driver(args.bootstrap, args.jars, args.heartbeat, args.remote, not args.no_listener)
    reply({"ok": driver.hello()})
    for line in sys.stdin:
        req = json.loads(line)
        cmd = req.pop("cmd")
        try:
            reply({"ok": getattr(driver, cmd)(**req)})
        except Exception:  # noqa: BLE001 - reported to the test, which fails with it
            reply({"error": traceback.format_exc()})
        if cmd == "close":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())

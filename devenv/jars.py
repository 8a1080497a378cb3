"""Locate (and on demand fetch) the jars resolved by tools/kafka/pom.xml.

Maven does the resolution; this module only knows where `tools/fetch-jars`
puts the result, so tests, the demo and the launcher agree on one cache.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("LAGWATCH_CACHE", ROOT / ".cache"))
# The brokers the suite, the demo and the benchmarks run (3.9.2 is the legacy check).
DEFAULT_KAFKA_VERSION = "4.4.0"
# The JVM clients and Kafka Streams of devenv/jvm, and the kafka-clients jar that
# exporter/kafka/messages/ copies its message definitions from.
CLIENTS_KAFKA_VERSION = "4.2.1"
SPARK_VERSION = "4.0.0"
# The Spark 3.5 driver the tests run (its own virtualenv, devenv/pyenvs.py). 3.5.3 is the newest
# 3.5 whose connector resolves with all its dependencies from Maven Central as reachable here.
SPARK35_VERSION = "3.5.3"
# The newest PySpark whose Kafka connector (spark-sql-kafka-0-10_2.13) resolves from Maven
# Central as reachable here: 4.2.1's and 4.3.0's are not served. Its driver runs in its own
# virtualenv too (devenv/pyenvs.py), like 3.5's.
SPARK_NEWEST_VERSION = "4.2.0"
# Spark Connect's server for PySpark 3.5 is not in pyspark (4.x bundles it). 3.5.3's
# spark-connect_2.12 is not served by the Maven Central mirror reachable here; 3.5.4's is, and
# runs on pyspark 3.5.3 (a patch release of the same line: tests/test_spark_connect.py).
SPARK35_CONNECT_VERSION = "3.5.4"


class JarsMissing(RuntimeError):
    pass


def _fetch(profile: str, version: str, dest: Path) -> None:
    prop = "spark.version" if profile.startswith("spark") else "kafka.version"
    subprocess.run(
        [str(ROOT / "tools" / "fetch-jars"), profile, version, str(dest)],
        check=True,
    )
    if not any(dest.glob("*.jar")):
        raise JarsMissing(f"maven produced no jars for {profile} {prop}={version} in {dest}")


def kafka_libs(version: str = DEFAULT_KAFKA_VERSION, fetch: bool = True) -> Path:
    """Directory holding the broker and tools jars of one Kafka version."""
    dest = CACHE / f"kafka-{version}" / "libs"
    if not (dest / ".complete").exists():
        if not fetch:
            raise JarsMissing(f"Kafka {version} jars not in {dest}; run tools/fetch-jars")
        _fetch("kafka", version, dest)
    return dest


def spark_kafka_jars(version: str = SPARK_VERSION, fetch: bool = True) -> list[Path]:
    """The spark-sql-kafka connector and the dependencies pyspark does not ship."""
    return _spark_jars("spark", version, "spark-kafka", fetch)


def _spark_jars(profile: str, version: str, name: str, fetch: bool) -> list[Path]:
    """The jars ``tools/fetch-jars profile version`` resolves, cached in .cache/name-version."""
    dest = CACHE / f"{name}-{version}" / "libs"
    if not (dest / ".complete").exists():
        if not fetch:
            raise JarsMissing(f"{profile} {version} jars not in {dest}; run tools/fetch-jars")
        _fetch(profile, version, dest)
    return sorted(dest.glob("*.jar"))


def spark_connect_jars(version: str, fetch: bool = True) -> list[Path]:
    """The Spark Connect server's jar that pyspark ``version`` lacks: none for 4.x (bundled),
    the shaded ``spark-connect_2.12`` of :data:`SPARK35_CONNECT_VERSION` for 3.5."""
    if not version.startswith("3."):
        return []
    return _spark_jars("spark-connect", SPARK35_CONNECT_VERSION, "spark-connect", fetch)


def kafka_streams_libs(version: str = CLIENTS_KAFKA_VERSION, fetch: bool = True) -> Path:
    """Kafka Streams and its kafka-clients (no RocksDB), for JVM consumer tests."""
    dest = CACHE / f"kafka-streams-{version}" / "libs"
    if not (dest / ".complete").exists():
        if not fetch:
            raise JarsMissing(f"Kafka Streams {version} jars not in {dest}")
        _fetch("streams", version, dest)
    return dest


def interceptor_jar() -> Path:
    """lagwatch's JVM consumer interceptor, built by tools/build-interceptor when stale."""
    subprocess.run([str(ROOT / "tools" / "build-interceptor")], check=True, stdout=subprocess.DEVNULL)
    jars = sorted((ROOT / "clients" / "java" / "target").glob("lagwatch-kafka-interceptor-*.jar"))
    if not jars:
        raise JarsMissing("tools/build-interceptor produced no jar")
    return jars[-1]

"""Benchmark: a JVM consumer's throughput with and without lagwatch's interceptor, same broker.

    .venv/bin/python -m bench.interceptor_overhead                  # 8M records, 7 rounds
    .venv/bin/python -m bench.interceptor_overhead --records 4000000 --rounds 3

Starts one local broker and writes N records of 100 bytes to a topic of 4 partitions. Each
round then drains them twice at the same time, in separate groups and fresh JVMs, with
devenv/jvm/LagConsumer (kafka-clients 4.2.1, ByteArrayDeserializer, nothing done per
record, so the interceptor's share is as large as it can be): once without the interceptor,
once with it, reporting every second to the same broker (five times its default rate).
Running both at once makes load from elsewhere on a shared machine hit both alike. Each
run is measured from 3 s after its first record, once the JIT has warmed up and the
interceptor's producer is running (that start-up is paid once per JVM). Prints per round
and as medians: records per second (wall clock) and the JVM's CPU time per million
records, side by side, the median of the rounds' ratios; then what onConsume alone costs
per poll (devenv/jvm/OnConsumeCost). A benchmark, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics

from confluent_kafka import Producer

from devenv.jvm_apps import INTERCEPTOR, JvmApp
from devenv.kafka import KafkaCluster
from tests.conftest import create_topic, unique

PARTITIONS = 4
WARMUP = 3.0  # seconds of each run left out of its figures


def fill(cluster: KafkaCluster, topic: str, records: int) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 50,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def start(cluster: KafkaCluster, topic: str, records: int, interceptor: bool) -> JvmApp:
    extra = ((f"prop.interceptor.classes={INTERCEPTOR}", "prop.lagwatch.report.interval.ms=1000")
             if interceptor else ())
    return JvmApp("LagConsumer", "mode=drain", f"bootstrap={cluster.bootstrap_servers}",
                  f"group={unique('bench')}", f"topic={topic}", f"count={records}", "linger=0",
                  f"warmup={WARMUP}", f"prop.client.id=bench-{interceptor}", *extra,
                  jvm_opts=("-Xmx512m",))


def result(app: JvmApp, interceptor: bool) -> tuple[float, float]:
    """(records per second, CPU seconds per million records) of one consumer JVM."""
    try:
        seconds, consumed, cpu = (float(x) for x in app.event("DRAINED", 900))
        exit_fields = app.event("EXIT", 60)
    finally:
        app.stop()
    if seconds < 2:
        raise RuntimeError("drained within the warm-up: use more --records")
    if interceptor and int(exit_fields[2]) == 0:
        raise RuntimeError("the interceptor sent no report: the comparison would be meaningless")
    return consumed / seconds, cpu / consumed * 1e6


def on_consume_ns() -> float:
    app = JvmApp("OnConsumeCost")
    try:
        ns, errors = app.event("ONCONSUME", 600)
    finally:
        app.stop()
    assert errors == "0", errors
    return float(ns)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=8_000_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with KafkaCluster(brokers_count=1) as cluster:
        topic = create_topic(cluster, unique("bench-drain"), partitions=PARTITIONS)
        fill(cluster, topic, args.records)
        result(start(cluster, topic, args.records, False), False)  # warm the page cache
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        ratios: list[tuple[float, float]] = []
        for r in range(args.rounds):
            # Both at once, on the same backlog: whatever else the machine does hits both alike.
            apps = {k: start(cluster, topic, args.records, k) for k in (False, True)}
            got = {k: result(app, k) for k, app in apps.items()}
            for k, v in got.items():
                runs[k].append(v)
            ratios.append((got[True][0] / got[False][0], got[True][1] / got[False][1]))
            print(f"round {r + 1}: without {got[False][0]:11,.0f} records/s {got[False][1]:5.2f} CPU s/1M;"
                  f" with {got[True][0]:11,.0f} records/s {got[True][1]:5.2f} CPU s/1M", flush=True)
    print(f"\n{args.records:,} records of 100 B, {PARTITIONS} partitions, {args.rounds} rounds, medians:")
    print(f"{'':22}{'records/s':>14}{'CPU s / 1M records':>22}")
    med = {k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v))
           for k, v in runs.items()}
    for k, label in ((False, "without interceptor"), (True, "with interceptor")):
        print(f"{label:22}{med[k][0]:14,.0f}{med[k][1]:22.2f}")
    print(f"{'with / without':22}{(statistics.median(r for r, _ in ratios) - 1) * 100:+13.1f}%"
          f"{(statistics.median(c for _, c in ratios) - 1) * 100:+21.1f}%   (median of the rounds' ratios)")
    ns = on_consume_ns()
    print(f"\nonConsume alone: {ns:.0f} ns per poll of 500 records from {PARTITIONS} partitions "
          f"({ns / 500:.2f} ns per record)")


if __name__ == "__main__":
    main()

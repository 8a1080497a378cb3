"""lagwatch's client side, installable alone as ``lagwatch-client`` (confluent-kafka only).

    from lagwatch_client import InstrumentedConsumer
    consumer = InstrumentedConsumer(conf)      # a confluent_kafka.Consumer subclass

The Spark listener (:mod:`spark_metrics`) ships in the same distribution.
``__version__`` is the one version of every lagwatch distribution and of the
``lagwatch --version`` output (``pyproject.toml`` reads it from here).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Imported on first use, so that the exporter's main process, which only needs the
    # wire format and the version, does not load confluent-kafka.
    if name == "InstrumentedConsumer":
        from lagwatch_client.consumer import InstrumentedConsumer
        return InstrumentedConsumer
    raise AttributeError(name)

__all__ = ["InstrumentedConsumer", "__version__"]

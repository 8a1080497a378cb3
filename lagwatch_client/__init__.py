"""lagwatch's client side, installable alone as ``lagwatch-client`` (confluent-kafka only).

    from lagwatch_client import InstrumentedConsumer
    consumer = InstrumentedConsumer(conf)      # a confluent_kafka.Consumer subclass

The Spark listener (:mod:`spark_metrics`) ships in the same distribution.
``__version__`` is the one version of every lagwatch distribution and of the
``lagwatch --version`` output (``pyproject.toml`` reads it from here).
"""

from __future__ import annotations

from lagwatch_client.consumer import InstrumentedConsumer

__version__ = "0.1.0"

__all__ = ["InstrumentedConsumer", "__version__"]

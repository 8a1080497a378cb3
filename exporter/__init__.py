"""lagwatch: a Kafka consumer-lag exporter (see README.md)."""

__version__ = "0.1.0"

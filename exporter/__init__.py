"""lagwatch: a Kafka consumer-lag exporter (see README.md)."""

from lagwatch_client import __version__  # the one version source

__all__ = ["__version__"]

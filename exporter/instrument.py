"""Moved to :mod:`lagwatch_client.consumer` (installable alone as ``lagwatch-client``).

Kept so that ``from exporter.instrument import InstrumentedConsumer`` keeps working.
"""

from lagwatch_client.consumer import InstrumentedConsumer
from lagwatch_client.wire import ensure_reports_topic

__all__ = ["InstrumentedConsumer", "ensure_reports_topic"]

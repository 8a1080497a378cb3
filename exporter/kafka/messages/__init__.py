"""Kafka request and response definitions kafka-python 3 does not ship, encoded by its
schema engine.

The ``*.json`` files beside this module are Apache Kafka's own message definitions
(``clients/src/main/resources/common/message/``), copied unchanged from the
kafka-clients 4.2.1 jar; ``tests/test_protocol.py`` keeps them equal to the jar's.
See https://kafka.apache.org/protocol for the wire format they describe.
"""

from __future__ import annotations

import sys

from kafka.protocol.api_message import ApiMessage

_HERE = sys.modules[__name__]


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_HERE):  # KIP-848, api key 69
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_HERE):
    pass


class StreamsGroupDescribeRequest(ApiMessage, load_json=_HERE):  # KIP-1071, api key 89
    pass


class StreamsGroupDescribeResponse(ApiMessage, load_json=_HERE):
    pass


class ShareGroupDescribeRequest(ApiMessage, load_json=_HERE):  # KIP-932, api key 77
    pass


class ShareGroupDescribeResponse(ApiMessage, load_json=_HERE):
    pass


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=_HERE):  # KIP-932, api key 90
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=_HERE):
    pass

"""Runs in the Kafka worker process: sampling, the requests kafka-python sends, record timestamps."""

"""Helpers the tests share: processes they start (exporter, Prometheus, Spark driver,
consumers), workloads, recordings and the built distributions and image."""

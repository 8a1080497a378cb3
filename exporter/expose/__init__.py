"""What is served: the metric contract, rendering, compat names, HTTP server, JSON API,
status page. Loads no Kafka library."""

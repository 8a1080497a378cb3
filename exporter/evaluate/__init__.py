"""The evaluator: snapshot + reports + memory -> statuses, lag seconds, reasons. Loads no Kafka library."""

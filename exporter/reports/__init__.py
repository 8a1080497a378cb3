"""Consumer and Spark reports: decode, read (in the Kafka worker), match to group members."""

"""reclaim: safe deletion and retention for tiered stream storage, on Kafka and Spark."""

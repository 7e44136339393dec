"""Latency profiles measured on real backends (Redis, Kafka, a Pulsar broker)."""

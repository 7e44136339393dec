"""Streaming replay: a trace fed through Kafka and replayed by a Faust app."""
